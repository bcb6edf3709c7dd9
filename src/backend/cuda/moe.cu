#include "backend/cuda/moe.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/mma.cuh"
#include "core/check.h"

namespace tessera::cuda {

namespace {

// ---- routing ----------------------------------------------------------------
//
// One block a token. The scores are computed in parallel with expert_routing.h's
// functions; every sum the host adds in order (the softmax's denominator, the
// top_k weights' sum) is added in the same order by thread 0, and every choice
// is the first in routing::ranks_before's order, which the host's partial sorts
// also take, so the experts and the weights are bitwise route_token's.

constexpr int kRouteThreads = 256;
constexpr int kRouteWarps = kRouteThreads / 32;

// (value, index) of the candidate that ranks first; index < 0 is none yet.
__device__ __forceinline__ bool better(float v, int32_t i, float best_v, int32_t best_i) {
  return i >= 0 && (best_i < 0 || routing::ranks_before(v, i, best_v, best_i));
}

// One token's experts and weights, `chosen` and `chosen_w` [top_k], from its
// logits [r.experts], by a whole block of kRouteThreads. The logits are read
// from L2 (ld.global.cg): the fused router's other blocks wrote them in the
// same launch, which the non-coherent read-only path would not see.
template <DType D>
__device__ __forceinline__ void route_one(const float* l, const ExpertRouting& r, const Storage<D>* __restrict__ bias,
                                          int32_t* __restrict__ chosen, float* __restrict__ chosen_w) {
  __shared__ float choice[kMaxRoutedExperts];
  __shared__ int32_t top[kRouteThreads];  // the first kRouteThreads chosen experts, in rank order
  __shared__ unsigned char taken[kMaxRoutedExperts];
  __shared__ float group_score[kMaxRoutedExperts / 2];
  __shared__ unsigned char kept[kMaxRoutedExperts / 2];
  __shared__ float reduce[32];
  __shared__ float shared_sum;
  __shared__ float warp_v[kRouteWarps];
  __shared__ int32_t warp_i[kRouteWarps];
  const int n = static_cast<int>(r.experts), k = static_cast<int>(r.top_k);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const bool sigmoid = r.scoring == ExpertScoring::kSigmoidGroups;

  if (!sigmoid) {
    float m = -INFINITY;
    for (int e = threadIdx.x; e < n; e += kRouteThreads) m = fmaxf(m, __ldcg(l + e));
    m = block_reduce<true>(m, reduce);
    for (int e = threadIdx.x; e < n; e += kRouteThreads) {
      choice[e] = routing::softmax_term(__ldcg(l + e), m);
      taken[e] = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      float sum = 0.0f;
      for (int e = 0; e < n; ++e) sum = routing::add(sum, choice[e]);
      shared_sum = sum;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n; e += kRouteThreads) choice[e] = routing::div(choice[e], shared_sum);
  } else {
    for (int e = threadIdx.x; e < n; e += kRouteThreads) {
      choice[e] = routing::add(routing::sigmoid(__ldcg(l + e)), bias != nullptr ? widen<D>(bias[e]) : 0.0f);
      taken[e] = 0;
    }
    __syncthreads();
    // Each group's score: its two best choices, added.
    const int groups = static_cast<int>(r.groups), per_group = n / groups;
    for (int g = threadIdx.x; g < groups; g += kRouteThreads) {
      float v1 = 0, v2 = 0;
      int32_t i1 = -1, i2 = -1;
      for (int e = g * per_group; e < (g + 1) * per_group; ++e) {
        if (better(choice[e], e, v1, i1)) {
          v2 = v1, i2 = i1;
          v1 = choice[e], i1 = e;
        } else if (better(choice[e], e, v2, i2)) {
          v2 = choice[e], i2 = e;
        }
      }
      group_score[g] = routing::add(v1, v2);
      kept[g] = 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int j = 0; j < r.top_groups; ++j) {
        float v = 0;
        int32_t at = -1;
        for (int g = 0; g < groups; ++g)
          if (!kept[g] && better(group_score[g], g, v, at)) v = group_score[g], at = g;
        kept[at] = 1;
      }
    }
    __syncthreads();
    // The other groups' experts score 0 (transformers' masked_fill), not -inf.
    for (int e = threadIdx.x; e < n; e += kRouteThreads)
      if (!kept[e / per_group]) choice[e] = 0.0f;
  }
  __syncthreads();

  if (n <= kRouteThreads) {
    // Each expert's rank in ranks_before's order (a strict order, so the ranks are
    // distinct): the top k are the experts ranked below k, in rank order, as the
    // one-at-a-time choice below finds them.
    if (threadIdx.x < n) {
      const int e = static_cast<int>(threadIdx.x);
      const float v = choice[e];
      int rank = 0;
      for (int o = 0; o < n; ++o) rank += routing::ranks_before(choice[o], o, v, e) ? 1 : 0;
      if (rank < k) chosen[rank] = top[rank] = e;
    }
    __syncthreads();
  } else {
    // The top k, one at a time: each thread's best, each warp's, then the warps'.
    for (int j = 0; j < k; ++j) {
      float v = 0;
      int32_t at = -1;
      for (int e = threadIdx.x; e < n; e += kRouteThreads)
        if (!taken[e] && better(choice[e], e, v, at)) v = choice[e], at = e;
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) {
        const float other_v = __shfl_xor_sync(0xffffffffu, v, offset);
        const int32_t other_at = __shfl_xor_sync(0xffffffffu, at, offset);
        if (better(other_v, other_at, v, at)) v = other_v, at = other_at;
      }
      if (lane == 0) warp_v[warp] = v, warp_i[warp] = at;
      __syncthreads();
      if (threadIdx.x == 0) {
        for (int w = 1; w < kRouteWarps; ++w)
          if (better(warp_v[w], warp_i[w], v, at)) v = warp_v[w], at = warp_i[w];
        taken[at] = 1;
        chosen[j] = at;
        if (j < kRouteThreads) top[j] = at;
      }
      __syncthreads();
    }
  }

  // The weights: the chosen experts' probabilities or (uncorrected) sigmoids,
  // by thread 0 in order: their sum, then each one divided and scaled as it is
  // written. Each expert comes from `top` (shared memory), where reading it back
  // from `experts` behind each weight's store took a trip to L2 an expert (and
  // the division another).
  if (threadIdx.x != 0) return;
  const auto weight = [&](int j) {
    const int32_t e = j < kRouteThreads ? top[j] : chosen[j];
    return sigmoid ? routing::sigmoid(__ldcg(l + e)) : choice[e];
  };
  float sum = 0.0f;
  for (int j = 0; j < k; ++j) sum = routing::add(sum, weight(j));
  if (r.normalize && sigmoid) sum = routing::add(sum, 1e-20f);
  for (int j = 0; j < k; ++j) {
    float w = weight(j);
    if (r.normalize) w = routing::div(w, sum);
    if (r.scaling != 1.0f) w = routing::mul(w, r.scaling);
    chosen_w[j] = w;
  }
}

template <DType D>
__global__ void __launch_bounds__(kRouteThreads)
    route_kernel(const float* __restrict__ logits, ExpertRouting r, const Storage<D>* __restrict__ bias,
                 int32_t* __restrict__ experts, float* __restrict__ weights) {
  let_next_start();
  wait_for_earlier();
  const int64_t t = blockIdx.x;
  route_one<D>(logits + t * r.experts, r, bias, experts + t * r.top_k, weights + t * r.top_k);
}

// ---- a token routed by one warp (softmax, up to 256 experts) -------------------
//
// The same experts and weights as route_one with no block barrier: lane L holds
// experts L, L + 32, ...; the largest logit by shuffles (fmaxf, as block_reduce:
// the order of a max does not change it); every lane adds the softmax terms from
// shared memory in expert order, as route_one's thread 0 does (so every lane has
// the sum); the top k one at a time, each the warp's largest key by two redux
// instructions (order_key's word, then the lower index); lane j keeps the j-th
// chosen, and the weights' sum is added in rank order as route_one's thread 0
// adds it. Mixtral's and Qwen3-MoE's routing at batch 1 is then a few hundred
// cycles of one warp, where route_one took a block and five barriers.

constexpr int kWarpRoutePer = 8;  // experts a lane holds
constexpr int kMaxWarpRouted = 32 * kWarpRoutePer;
constexpr int kMaxWarpTopK = 32;

// Whether one warp routes a token of `r` (TESSERA_CUDA_MOE_WARP_ROUTE=0: never).
bool warp_routes(const ExpertRouting& r) {
  static const bool on = !switched_off("TESSERA_CUDA_MOE_WARP_ROUTE");
  return on && r.scoring == ExpertScoring::kSoftmax && r.experts <= kMaxWarpRouted && r.top_k <= kMaxWarpTopK;
}

// routing::ranks_before's order of scores as one word (the larger word first,
// equal words for equal scores): -0 as +0, NaN the lowest (0).
__device__ __forceinline__ unsigned order_key(float v) {
  if (v != v) return 0u;
  const unsigned u = __float_as_uint(v == 0.0f ? 0.0f : v);
  return (u & 0x80000000u) != 0 ? ~u : u | 0x80000000u;
}

// One token's experts and weights, `chosen` and `chosen_w` [top_k] (global or
// shared memory), from its logits [r.experts] (read from L2, as route_one does),
// by all 32 lanes of a warp; warp_routes(r) holds.
__device__ __forceinline__ void route_warp(const float* l, const ExpertRouting& r, int32_t* chosen, float* chosen_w) {
  __shared__ float terms[kMaxWarpRouted];
  constexpr unsigned kAll = 0xffffffffu;
  const int n = static_cast<int>(r.experts), k = static_cast<int>(r.top_k);
  const int lane = static_cast<int>(threadIdx.x % 32);
  float p[kWarpRoutePer];
  float m = -INFINITY;
#pragma unroll
  for (int j = 0; j < kWarpRoutePer; ++j) {
    const int e = lane + 32 * j;
    p[j] = e < n ? __ldcg(l + e) : -INFINITY;
    m = fmaxf(m, p[j]);
  }
  m = warp_max(m);
#pragma unroll
  for (int j = 0; j < kWarpRoutePer; ++j) {
    const int e = lane + 32 * j;
    if (e < n) terms[e] = p[j] = routing::softmax_term(p[j], m);
  }
  __syncwarp();
  float sum = 0.0f;
#pragma unroll 8
  for (int e = 0; e < n; ++e) sum = routing::add(sum, terms[e]);
  __syncwarp();  // every lane has read the terms before they become probabilities
  // Each candidate's key: its score's word, then the complement of its index (the
  // lower index first); 0 once taken, or past the experts.
  uint64_t key[kWarpRoutePer];
#pragma unroll
  for (int j = 0; j < kWarpRoutePer; ++j) {
    const int e = lane + 32 * j;
    key[j] = 0;
    if (e < n) {
      terms[e] = p[j] = routing::div(p[j], sum);
      key[j] = static_cast<uint64_t>(order_key(p[j])) << 32 | ~static_cast<uint32_t>(e);
    }
  }
  __syncwarp();
  int32_t mine = 0;
  float mine_w = 0.0f, top_sum = 0.0f;
  for (int j = 0; j < k; ++j) {
    uint64_t best = 0;
#pragma unroll
    for (int i = 0; i < kWarpRoutePer; ++i) best = key[i] > best ? key[i] : best;
    const auto hi = static_cast<unsigned>(best >> 32);
    const unsigned top_hi = __reduce_max_sync(kAll, hi);
    const unsigned top_lo = __reduce_max_sync(kAll, hi == top_hi ? static_cast<unsigned>(best) : 0u);
    const auto e = static_cast<int32_t>(~top_lo);
#pragma unroll
    for (int i = 0; i < kWarpRoutePer; ++i)
      if (lane + 32 * i == e) key[i] = 0;
    const float w = terms[e];
    top_sum = routing::add(top_sum, w);
    if (lane == j) mine = e, mine_w = w;
  }
  if (lane < k) {
    float w = mine_w;
    if (r.normalize) w = routing::div(w, top_sum);
    if (r.scaling != 1.0f) w = routing::mul(w, r.scaling);
    chosen[lane] = mine;
    chosen_w[lane] = w;
  }
}

// One warp a token (warp_routes).
__global__ void __launch_bounds__(32) route_warp_kernel(const float* __restrict__ logits, ExpertRouting r,
                                                        int32_t* __restrict__ experts, float* __restrict__ weights) {
  let_next_start();
  wait_for_earlier();
  const int64_t t = blockIdx.x;
  route_warp(logits + t * r.experts, r, experts + t * r.top_k, weights + t * r.top_k);
}

// ---- a lone token's router and routing in one launch --------------------------
//
// Block b computes the router's logits of rows [16b, 16b + 16) as mma_matmul.cu
// does for one token (warp w takes k's chunks w, w + 8, ... in order, the same
// mma_half calls, the eight sums added in warp order: bitwise Device::matmul's
// logits), loading its first weights before it waits for the kernel before it;
// it writes them, and the last block to finish (a counter of the layer's,
// incremented once a block after a fence, set back to zero by that block) routes
// the token as route_kernel does (route_one, or route_warp's warp 0 when
// warp_routes). The counter is the only atomic: no sum depends
// on the order the blocks finish in. One launch where the router's matmul and
// routing took two, each waiting for the one before.

constexpr int kRouterUnroll = 4;  // a warp's chunks in flight (k = 2048: all four of them)

template <DType D>
__global__ void __launch_bounds__(kRouteThreads)
    router_kernel(const float* __restrict__ x, int64_t k, const __nv_bfloat16* __restrict__ norm, float eps,
                  const __nv_bfloat16* __restrict__ router, ExpertRouting r, const Storage<D>* __restrict__ bias,
                  float* logits, unsigned* counter, int32_t* __restrict__ experts, float* __restrict__ weights,
                  bool by_warp) {
  static_assert(kRouteThreads == kMmaSplit * 32 && kRouteThreads == kNormThreads);
  __shared__ float partial[kMmaSplit][32][4];
  __shared__ float squares[32];
  __shared__ bool last;
  let_next_start();
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int g = lane / 4, t = lane % 4;
  const int64_t n = r.experts, row0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int64_t ra = min(row0 + g, n - 1) * k + 8 * t, rb = min(row0 + g + 8, n - 1) * k + 8 * t;
  const int64_t chunks = k / kMmaChunk;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float c[4] = {};
  float scale = 1.0f;
  for (int64_t base = warp; base < chunks; base += kMmaSplit * kRouterUnroll) {
    WeightChunk w[kRouterUnroll];
#pragma unroll
    for (int u = 0; u < kRouterUnroll; ++u)
      if (base + u * kMmaSplit < chunks)
        w[u] = load_chunk(router + ra, router + rb, (base + u * kMmaSplit) * kMmaChunk);
    if (base == warp) {  // the first weights are on their way; x is another kernel's
      wait_for_earlier();
      // With the norm every warp has chunks (router_fits), so all of them are here.
      if (norm != nullptr) scale = block_rms_scale(x, k, eps, squares);
    }
#pragma unroll
    for (int u = 0; u < kRouterUnroll; ++u) {
      if (base + u * kMmaSplit >= chunks) break;
      const int64_t at = (base + u * kMmaSplit) * kMmaChunk;
      // The token is column 0: lanes of g > 0 give the zero columns mma_matmul gives them.
      uint4 x0 = zero, x1 = zero;
      if (g == 0 && norm != nullptr) {
        x0 = load_normed_x(x + at + 8 * t, norm + at + 8 * t, scale);
        x1 = load_normed_x(x + at + 32 + 8 * t, norm + at + 32 + 8 * t, scale);
      } else if (g == 0) {
        x0 = load_x(x + at + 8 * t), x1 = load_x(x + at + 32 + 8 * t);
      }
      mma_chunk(c, w[u], x0, x1);
    }
  }
  wait_for_earlier();  // for a warp without chunks (waiting again costs nothing)
#pragma unroll
  for (int i = 0; i < 4; ++i) partial[warp][lane][i] = c[i];
  __syncthreads();
  if (warp == 0 && t == 0) {  // accumulators 0 and 2 of lane (g, 0): rows g and g + 8 of column 0
#pragma unroll
    for (int i = 0; i < 4; i += 2) {
      const int64_t row = row0 + g + (i >= 2 ? 8 : 0);
      if (row < n) logits[row] = block_sum<1>(&partial[0][0][0], 0, i);
    }
    __threadfence();  // the logits reach L2 before the count says so
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
    if (last) {
      __threadfence();
      *counter = 0;  // the next launch (the next step) waits for this one before it counts
    }
  }
  __syncthreads();
  if (!last) return;
  if (!by_warp) {
    route_one<D>(logits, r, bias, experts, weights);
  } else if (warp == 0) {
    route_warp(logits, r, experts, weights);
  }
}

// ---- grouping ---------------------------------------------------------------
//
// One block. Thread e counts expert e's pairs and later writes them out in pair
// order (so by token), thread 0 lays the experts' runs end to end in ascending
// expert order and cuts them into items. No atomics: every position is computed.

constexpr int kGroupThreads = 256;

struct Slots {
  int32_t* slot_pair = nullptr;    // [pairs]: the pair (token * top_k + j) in each slot
  int32_t* slot_token = nullptr;   // [pairs]: its token
  int32_t* pair_slot = nullptr;    // [pairs]: each pair's slot
  int32_t* token_slots = nullptr;  // [tokens, top_k]: a token's slots, ascending (so by expert)
  int32_t* items = nullptr;        // [max items, 3]: expert, first slot, count
  int32_t* n_items = nullptr;      // [1]
  float* h = nullptr;              // [pairs, inter]: silu(gate) * up, by slot
  float* y = nullptr;              // [pairs, hidden]: down, by slot
  float* sum = nullptr;            // [tokens, hidden]: the weighted sums, when not added onto out at once
};

__global__ void __launch_bounds__(kGroupThreads) group_kernel(const int32_t* __restrict__ experts, int64_t tokens,
                                                              int64_t top_k, int64_t n_experts, int tile, Slots s) {
  __shared__ int32_t count[kMaxRoutedExperts], start[kMaxRoutedExperts];
  let_next_start();
  wait_for_earlier();
  const int64_t pairs = tokens * top_k;
  for (int64_t e = threadIdx.x; e < n_experts; e += kGroupThreads) {
    int32_t c = 0;
    for (int64_t p = 0; p < pairs; ++p) c += experts[p] == e ? 1 : 0;
    count[e] = c;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t at = 0, items = 0;
    for (int64_t e = 0; e < n_experts; ++e) {
      start[e] = at;
      for (int32_t off = 0; off < count[e]; off += tile, ++items) {
        s.items[3 * items] = static_cast<int32_t>(e);
        s.items[3 * items + 1] = at + off;
        s.items[3 * items + 2] = min(tile, count[e] - off);
      }
      at += count[e];
    }
    *s.n_items = items;
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < n_experts; e += kGroupThreads) {
    int32_t at = start[e];
    for (int64_t p = 0; p < pairs; ++p) {
      if (experts[p] != e) continue;
      s.slot_pair[at] = static_cast<int32_t>(p);
      s.slot_token[at] = static_cast<int32_t>(p / top_k);
      s.pair_slot[p] = at++;
    }
  }
  __syncthreads();
  for (int64_t t = threadIdx.x; t < tokens; t += kGroupThreads) {
    int32_t* slots = s.token_slots + t * top_k;
    for (int64_t j = 0; j < top_k; ++j) {  // insertion sort: top_k is small
      const int32_t slot = s.pair_slot[t * top_k + j];
      int64_t i = j;
      for (; i > 0 && slots[i - 1] > slot; --i) slots[i] = slots[i - 1];
      slots[i] = slot;
    }
  }
}

// A lone token (a batch-1 decode step) skips the grouping kernel: its top_k
// experts are distinct, each is an item of one pair, and item i is the i-th
// lowest expert in slot i, so every kernel finds its item from the routed
// experts themselves (a few comparisons) and the step has one launch less.
constexpr int64_t kMaxLoneTopK = 32;

// A lone token's slots, by every warp on its own (all 32 lanes call it): lane j
// < top_k holds expert j and returns its slot, the number of the token's experts
// below it; `expert` is lane j's expert.
__device__ __forceinline__ int lone_slot(const int32_t* experts, int top_k, int32_t& expert) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  expert = lane < top_k ? experts[lane] : 0;
  int below = 0;
  for (int i = 0; i < top_k; ++i) below += __shfl_sync(0xffffffffu, expert, i) < expert ? 1 : 0;
  return below;
}

// Where a block of the matmuls finds its item.
struct Items {
  const int32_t* table = nullptr;       // [max items, 3]: expert, first slot, count (null: a lone token)
  const int32_t* count = nullptr;       // [1]: the items in the table
  const int32_t* slot_token = nullptr;  // [pairs]: the token of each slot
  const int32_t* lone = nullptr;        // a lone token's [top_k] experts
  int top_k = 0;
  // A lone token's gate/up: each expert's down weights [hidden, inter] (down_bytes
  // each), which its blocks send to L2 for the down launch (null: none).
  const void* const* down_ahead = nullptr;
  int64_t down_bytes = 0;
};

struct Item {
  int32_t expert = 0, first = 0, count = 0;
};

// Item `i` of the step, or false past the last (every thread of the block calls it).
__device__ __forceinline__ bool find_item(const Items& items, int i, Item& item) {
  if (items.table != nullptr) {
    if (i >= *items.count) return false;
    item = {items.table[3 * i], items.table[3 * i + 1], items.table[3 * i + 2]};
    return true;
  }
  if (i >= items.top_k) return false;
  int32_t expert = 0;
  const int slot = lone_slot(items.lone, items.top_k, expert);
  const unsigned holder = __ballot_sync(0xffffffffu, static_cast<int>(threadIdx.x % 32) < items.top_k && slot == i);
  item = {__shfl_sync(0xffffffffu, expert, __ffs(holder) - 1), i, 1};
  return true;
}

// The row of x a slot reads: its token for gate/up (x), the slot itself for down (h).
template <bool kGateUp>
__device__ __forceinline__ int64_t x_row(const Items& items, int64_t slot) {
  if constexpr (kGateUp) return items.table != nullptr ? items.slot_token[slot] : 0;
  return slot;
}

// This block's share of every one of a lone token's experts' down weights, sent
// to L2 (nothing waits for it) as its gate/up block ends, so that the down
// launch after it finds them there: the 128-byte lines of each expert's matrix
// dealt out over the grid's threads.
__device__ __forceinline__ void send_down_ahead(const Items& items) {
  const int64_t threads = static_cast<int64_t>(gridDim.x) * gridDim.y * blockDim.x;
  const int64_t first = (static_cast<int64_t>(blockIdx.y) * gridDim.x + blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t lines = items.down_bytes / 128;
  for (int j = 0; j < items.top_k; ++j) {
    const auto* w = static_cast<const char*>(items.down_ahead[items.lone[j]]);
    for (int64_t line = first; line < lines; line += threads) prefetch_l2(w + line * 128);
  }
}

// ---- the experts' matmuls -----------------------------------------------------
//
// A block takes one item (blockIdx.y: an expert and up to kTiles * 8 of its
// slots) and a tile of weight rows (blockIdx.x). Column c of the item reads x's
// row x_row(first + c) (the token for gate/up, the slot for down's h). Nothing
// the block reads is known before the routing is, so it waits for the earlier
// kernels first. The sums are
// mma_matmul.cu's (tensor cores) or kernels.cu's matmul_kernel's (FMA), so each
// output is bitwise what Device::matmul gives it.

// Tensor cores: 16 rows a block; with kGateUp, gate and up side by side and
// silu(gate) * up out. The chunk order, the loads and the mma_half calls are
// mma_matmul.cu's warp_sums (kUnroll 2), with the x rows looked up. kNorm (a
// lone token's gate/up): x normalized by `norm` as it loads, its scale computed
// once the first weights are on their way (before them when a warp has no chunk).
template <int kTiles, bool kGateUp, bool kNorm = false>
__global__ void __launch_bounds__(kMmaSplit * 32)
    mma_experts_kernel(const float* __restrict__ x, int64_t k, int64_t n, const void* const* __restrict__ w_first,
                       const void* const* __restrict__ w_second, Items items, ExpertNorm norm, float* __restrict__ y) {
  static_assert(!kNorm || (kTiles == 1 && kGateUp && kMmaSplit * 32 == kNormThreads));
  constexpr int kUnroll = 2;
  __shared__ float partial[kGateUp ? 2 : 1][kMmaSplit][kTiles][32][4];
  __shared__ float squares[kNorm ? 32 : 1];
  let_next_start();
  wait_for_earlier();
  Item it;
  if (!find_item(items, static_cast<int>(blockIdx.y), it)) return;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int32_t expert = it.expert, first = it.first, count = it.count;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int64_t ra = min(row0 + g, n - 1) * k + 8 * t, rb = min(row0 + g + 8, n - 1) * k + 8 * t;
  const auto* w0 = static_cast<const __nv_bfloat16*>(w_first[expert]);
  const auto* w1 = kGateUp ? static_cast<const __nv_bfloat16*>(w_second[expert]) : nullptr;
  const float* xr[kTiles];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
    const int col = 8 * j + g;
    xr[j] = col < count ? x + x_row<kGateUp>(items, first + col) * k + 8 * t : nullptr;
  }
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int64_t chunks = k / kMmaChunk;
  const __nv_bfloat16* nw = kNorm ? static_cast<const __nv_bfloat16*>(norm.weight) + 8 * t : nullptr;
  const bool scale_first = kNorm && chunks < kMmaSplit;
  float scale = scale_first ? block_rms_scale(x, k, norm.eps, squares) : 1.0f;
  float c[kTiles][4] = {}, up[kTiles][4] = {};
  for (int64_t base = warp; base < chunks; base += kMmaSplit * kUnroll) {
    WeightChunk wg[kUnroll], wu[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t at = (base + u * kMmaSplit) * kMmaChunk;
      if (base + u * kMmaSplit < chunks) {
        wg[u] = load_chunk(w0 + ra, w0 + rb, at);
        if constexpr (kGateUp) wu[u] = load_chunk(w1 + ra, w1 + rb, at);
      }
    }
    if (kNorm && !scale_first && base == warp) scale = block_rms_scale(x, k, norm.eps, squares);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kMmaSplit >= chunks) break;
      const int64_t at = (base + u * kMmaSplit) * kMmaChunk;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        uint4 x0 = zero, x1 = zero;
        if (xr[j] != nullptr && kNorm) {
          x0 = load_normed_x(xr[j] + at, nw + at, scale), x1 = load_normed_x(xr[j] + at + 32, nw + at + 32, scale);
        } else if (xr[j] != nullptr) {
          x0 = load_x(xr[j] + at), x1 = load_x(xr[j] + at + 32);
        }
        mma_chunk(c[j], wg[u], x0, x1);
        if constexpr (kGateUp) mma_chunk(up[j], wu[u], x0, x1);
      }
    }
  }
  if (kGateUp && items.down_ahead != nullptr) send_down_ahead(items);
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      partial[0][warp][j][lane][i] = c[j][i];
      if constexpr (kGateUp) partial[kGateUp ? 1 : 0][warp][j][lane][i] = up[j][i];
    }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Accumulator i of lane (g, t): row g (+8 for i >= 2), column 2t (+1 for odd i).
      const int64_t row = row0 + g + (i >= 2 ? 8 : 0);
      const int col = 8 * j + 2 * t + (i % 2);
      if (row >= n || col >= count) continue;
      float value = block_sum<kTiles>(&partial[0][0][0][0][0], j, i);
      if constexpr (kGateUp) value = silu_times(value, block_sum<kTiles>(&partial[kGateUp ? 1 : 0][0][0][0][0], j, i));
      y[(first + col) * n + row] = value;
    }
}

// FMA (f32 and f16 weights, bf16 of other row lengths): kernels.cu's
// matmul_kernel, 4 rows a block of 128 threads, 8 columns at a time.
constexpr int kFmaWarps = 4;
constexpr int kFmaThreads = kFmaWarps * 32;
constexpr int kFmaRows = 4;
constexpr int kFmaCols = 8;

template <DType D, bool kVec, bool kGateUp>
__global__ void __launch_bounds__(kFmaThreads)
    fma_experts_kernel(const float* __restrict__ x, int64_t k, int64_t n, const void* const* __restrict__ w_first,
                       const void* const* __restrict__ w_second, Items items, float* __restrict__ y) {
  __shared__ float partial[kGateUp ? 2 : 1][kFmaWarps][kFmaRows][kFmaCols];
  let_next_start();
  wait_for_earlier();
  Item it;
  if (!find_item(items, static_cast<int>(blockIdx.y), it)) return;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int32_t expert = it.expert, first = it.first, count = it.count;
  const auto* w0 = static_cast<const Storage<D>*>(w_first[expert]);
  const auto* w1 = kGateUp ? static_cast<const Storage<D>*>(w_second[expert]) : nullptr;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kFmaRows;
  const int64_t chunks = (k + 7) / 8;
  for (int c0 = 0; c0 < count; c0 += kFmaCols) {
    float acc[kFmaRows][kFmaCols] = {}, acc_up[kFmaRows][kFmaCols] = {};
    for (int64_t c = threadIdx.x; c < chunks; c += kFmaThreads) {
      float wv[kFmaRows][8], uv[kFmaRows][8];
#pragma unroll
      for (int r = 0; r < kFmaRows; ++r) {
        load8<D, kVec>(w0 + min(row0 + r, n - 1) * k, c, k, wv[r]);
        if constexpr (kGateUp) load8<D, kVec>(w1 + min(row0 + r, n - 1) * k, c, k, uv[r]);
      }
#pragma unroll
      for (int col = 0; col < kFmaCols; ++col) {
        if (c0 + col >= count) break;
        float xv[8];
        load8<DType::kF32, kVec>(x + x_row<kGateUp>(items, first + c0 + col) * k, c, k, xv);
#pragma unroll
        for (int r = 0; r < kFmaRows; ++r)
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            acc[r][col] = fmaf(wv[r][j], xv[j], acc[r][col]);
            if constexpr (kGateUp) acc_up[r][col] = fmaf(uv[r][j], xv[j], acc_up[r][col]);
          }
      }
    }
#pragma unroll
    for (int r = 0; r < kFmaRows; ++r)
#pragma unroll
      for (int col = 0; col < kFmaCols; ++col) {
        const float s = warp_sum(acc[r][col]);
        if (lane == 0) partial[0][warp][r][col] = s;
        if constexpr (kGateUp) {
          const float su = warp_sum(acc_up[r][col]);
          if (lane == 0) partial[kGateUp ? 1 : 0][warp][r][col] = su;
        }
      }
    __syncthreads();
    if (threadIdx.x < kFmaRows * kFmaCols) {
      const int r = threadIdx.x / kFmaCols, col = threadIdx.x % kFmaCols;
      float s = partial[0][0][r][col];
#pragma unroll
      for (int i = 1; i < kFmaWarps; ++i) s += partial[0][i][r][col];
      if constexpr (kGateUp) {
        float su = partial[kGateUp ? 1 : 0][0][r][col];
#pragma unroll
        for (int i = 1; i < kFmaWarps; ++i) su += partial[kGateUp ? 1 : 0][i][r][col];
        s = silu_times(s, su);
      }
      const int64_t row = row0 + r;
      if (row < n && c0 + col < count) y[(first + c0 + col) * n + row] = s;
    }
    __syncthreads();
  }
}

// out[t] = 0, then + weight * y[slot] for each of the token's slots in ascending
// order (so ascending expert), the product rounded, then the sum (as the CPU's
// scatter_add_rows and torch's index_add_ of weighted rows); with `add`, out[t]
// += that sum instead (add_kernel's rounding). A lone token
// (`lone`: its experts) has slots 0..top_k-1 and finds each slot's pair itself.
__global__ void combine_kernel(const float* __restrict__ y, const float* __restrict__ weights,
                               const int32_t* __restrict__ token_slots, const int32_t* __restrict__ slot_pair,
                               const int32_t* __restrict__ lone, int64_t top_k, int64_t hidden, bool add,
                               float* __restrict__ out) {
  __shared__ int32_t lone_pairs[kMaxLoneTopK];
  let_next_start();
  wait_for_earlier();
  if (lone != nullptr) {
    if (threadIdx.x < 32) {
      int32_t expert = 0;
      const int slot = lone_slot(lone, static_cast<int>(top_k), expert);
      if (threadIdx.x < top_k) lone_pairs[slot] = static_cast<int32_t>(threadIdx.x);
    }
    __syncthreads();
  }
  const int32_t* slots = token_slots + blockIdx.x * top_k;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float sum = 0.0f;
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t slot = lone != nullptr ? j : slots[j];
      const int64_t pair = lone != nullptr ? lone_pairs[j] : slot_pair[slot];
      sum = __fadd_rn(sum, __fmul_rn(weights[pair], y[slot * hidden + i]));
    }
    float& to = out[blockIdx.x * hidden + i];
    to = add ? __fadd_rn(to, sum) : sum;
  }
}

// ---- a lone token's down and weighted sum in one launch ------------------------
//
// A block takes 16 rows of out and every one of the token's experts: each row's
// down output for slot j (the j-th lowest expert) is mma_experts_kernel's sum
// (sum w of the eight adds k's chunks w, w + 8, ... with the same mma_half calls,
// then block_sum adds the eight in order), and the block weights and adds them in
// ascending slot order as combine_kernel does, so out is bitwise the down launch
// and the weighted-sum launch, with one launch, and the y round trip, fewer.
// Warp r adds sum (r - j) mod 8 of slot j: when k's chunks do not divide by 8 (a
// 768-wide row has 12: sums 0-3 take two, 4-7 one), each warp gets the same
// number of chunks. A warp keeps kDownSumDepth chunks' loads in flight, from one
// slot into the next, so that a block (16 rows x top_k experts: 196 KB for
// Qwen3-30B-A3B) streams its weights although there is one block an SM.

constexpr int kMaxDownSumTopK = 8;
constexpr int kDownSumDepth = 4;

__global__ void __launch_bounds__(kMmaSplit * 32)
    down_sum_kernel(const float* __restrict__ h, int64_t k, int64_t n, const void* const* __restrict__ down,
                    const int32_t* __restrict__ experts, const float* __restrict__ weights, int top_k, bool add,
                    float* __restrict__ out) {
  constexpr int kDepth = kDownSumDepth;
  __shared__ float partial[kMaxDownSumTopK][kMmaSplit][32][4];
  __shared__ const __nv_bfloat16* slot_down[kMaxDownSumTopK];
  __shared__ float slot_weight[kMaxDownSumTopK];
  let_next_start();
  wait_for_earlier();
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int g = lane / 4, t = lane % 4;
  if (warp == 0) {
    int32_t expert = 0;
    const int slot = lone_slot(experts, top_k, expert);
    if (lane < top_k) {
      slot_down[slot] = static_cast<const __nv_bfloat16*>(down[expert]);
      slot_weight[slot] = weights[lane];
    }
  }
  __syncthreads();
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int64_t ra = min(row0 + g, n - 1) * k + 8 * t, rb = min(row0 + g + 8, n - 1) * k + 8 * t;
  const int64_t chunks = k / kMmaChunk;
  const auto sum_of = [&](int j) { return (warp - j % kMmaSplit + kMmaSplit) % kMmaSplit; };
  // A sum with no chunks (k under 8 chunks) is 0, as the warp without chunks leaves it.
  for (int j = 0; j < top_k; ++j)
    if (sum_of(j) >= chunks)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[j][sum_of(j)][lane][i] = 0.0f;

  // This warp's steps, in order: slot j's chunks c = sum_of(j), + 8, ... (j == top_k: none left).
  int j = 0;
  int64_t c = sum_of(0);
  const auto settle = [&] {
    while (j < top_k && c >= chunks)
      if (++j < top_k) c = sum_of(j);
  };
  settle();
  const uint4 zero = make_uint4(0, 0, 0, 0);
  WeightChunk wd[kDepth];
  uint4 x0[kDepth], x1[kDepth];
  int step_slot[kDepth];
  float acc[4] = {};
  // A ring of kDepth steps: the first pass fills it, each later one computes
  // entry d's step and then loads the step kDepth later into it.
  for (bool fill = true, more = true; more; fill = false) {
#pragma unroll
    for (int d = 0; d < kDepth; ++d) {
      if (!fill) {
        const int slot = step_slot[d];
        if (slot < 0) {
          more = false;
          break;
        }
        mma_chunk(acc, wd[d], x0[d], x1[d]);
        // A slot's steps are consecutive: the next one (loading already) says whether its sum is whole.
        if (step_slot[(d + 1) % kDepth] != slot) {
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            partial[slot][sum_of(slot)][lane][i] = acc[i];
            acc[i] = 0.0f;
          }
        }
      }
      step_slot[d] = j < top_k ? j : -1;
      if (j < top_k) {  // x: h's row of the slot, for the token's column (g = 0)
        const __nv_bfloat16* w = slot_down[j];
        const int64_t at = c * kMmaChunk;
        wd[d] = load_chunk(w + ra, w + rb, at);
        const float* xr = h + j * k + 8 * t + at;
        x0[d] = g == 0 ? load_x(xr) : zero;
        x1[d] = g == 0 ? load_x(xr + 32) : zero;
        c += kMmaSplit;
        settle();
      }
    }
  }
  __syncthreads();
  // Accumulator i of lane (g, 0) holds row g (+8 for i = 2) of the token's column.
  if (warp != 0 || t != 0) return;
#pragma unroll
  for (int i = 0; i < 4; i += 2) {
    const int64_t row = row0 + g + (i >= 2 ? 8 : 0);
    if (row >= n) continue;
    float sum = 0.0f;
    for (int s = 0; s < top_k; ++s)
      sum = __fadd_rn(sum, __fmul_rn(slot_weight[s], block_sum<1>(&partial[s][0][0][0], 0, i)));
    float& to = out[row];
    to = add ? __fadd_rn(to, sum) : sum;
  }
}

// ---- launches -------------------------------------------------------------------

// Whether a step's tokens take a lone token's path (TESSERA_CUDA_MOE_LONE=0: grouped).
bool lone_token(int64_t tokens, int64_t top_k) {
  static const bool on = !switched_off("TESSERA_CUDA_MOE_LONE");
  return on && tokens == 1 && top_k <= kMaxLoneTopK;
}

// Slots of up to 8 pairs for a few pairs (decode), 32 for more: only how many
// pairs share a weight load, never a sum's order.
int tile_for(int64_t pairs) { return pairs <= 64 ? 8 : 32; }

int64_t max_items(int64_t pairs, int64_t experts, int tile) { return std::min(experts, pairs) + pairs / tile; }

size_t align(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The scratch's regions, in order (each 256-byte aligned).
Slots layout(void* scratch, int64_t tokens, int64_t top_k, const ExpertTable& table, size_t* total) {
  const int64_t pairs = tokens * top_k;
  const auto ints = static_cast<size_t>(pairs) * sizeof(int32_t);
  const size_t item_bytes = static_cast<size_t>(3 * max_items(pairs, table.experts, tile_for(pairs)) + 1) * 4;
  auto* base = static_cast<char*>(scratch);
  size_t at = 0;
  const auto take = [&](size_t bytes) {
    char* p = base != nullptr ? base + at : nullptr;
    at += align(bytes);
    return p;
  };
  Slots s;
  s.slot_pair = reinterpret_cast<int32_t*>(take(ints));
  s.slot_token = reinterpret_cast<int32_t*>(take(ints));
  s.pair_slot = reinterpret_cast<int32_t*>(take(ints));
  s.token_slots = reinterpret_cast<int32_t*>(take(ints));
  s.items = reinterpret_cast<int32_t*>(take(item_bytes));
  s.n_items = s.items + item_bytes / 4 - 1;
  s.h = reinterpret_cast<float*>(take(static_cast<size_t>(pairs * table.inter) * sizeof(float)));
  s.y = reinterpret_cast<float*>(take(static_cast<size_t>(pairs * table.hidden) * sizeof(float)));
  s.sum = reinterpret_cast<float*>(take(static_cast<size_t>(tokens * table.hidden) * sizeof(float)));
  if (total != nullptr) *total = at;
  return s;
}

// One matmul phase over every item: y [slots, n] from x's rows (x_row) of k,
// with the weights of w_first (and w_second: gate/up); x normalized by `norm`
// (a lone token's gate/up on tensor cores: experts_norm_fits).
template <bool kGateUp>
void launch_phase(cudaStream_t stream, const ExpertTable& table, int tile, int64_t items, const Items& table_items,
                  const float* x, int64_t k, int64_t n, const void* const* w_first, const void* const* w_second,
                  float* y, const ExpertNorm& norm = {}) {
  const auto grid_y = static_cast<unsigned>(items);
  if (mma_matmul_fits(table.dtype, k)) {
    const dim3 grid(static_cast<unsigned>((n + 15) / 16), grid_y);
    auto kernel = tile == 8 ? mma_experts_kernel<1, kGateUp> : mma_experts_kernel<4, kGateUp>;
    if constexpr (kGateUp)
      if (norm.weight != nullptr) kernel = mma_experts_kernel<1, true, true>;
    launch_kernel(kernel, grid, kMmaSplit * 32, 0, stream, x, k, n, w_first, w_second, table_items, norm, y);
    return;
  }
  TS_CHECK(norm.weight == nullptr, "a normalizing experts' launch of k ", k);
  const dim3 grid(static_cast<unsigned>((n + kFmaRows - 1) / kFmaRows), grid_y);
  with_dtype(table.dtype, [&]<DType D>() {
    const auto kernel = k % 8 == 0 ? fma_experts_kernel<D, true, kGateUp> : fma_experts_kernel<D, false, kGateUp>;
    launch_kernel(kernel, grid, kFmaThreads, 0, stream, x, k, n, w_first, w_second, table_items, y);
  });
}

void check_routing(const ExpertRouting& r) {
  TS_CHECK(r.experts >= 1 && r.experts <= kMaxRoutedExperts && r.top_k >= 1 && r.top_k <= r.experts, "routing ",
           r.top_k, " of ", r.experts, " experts");
  if (r.scoring == ExpertScoring::kSigmoidGroups)
    TS_CHECK(r.groups >= 1 && r.experts % r.groups == 0 && r.experts / r.groups >= 2 && r.top_groups >= 1 &&
                 r.top_groups <= r.groups,
             "experts ", r.experts, " in groups ", r.groups, ", keeping ", r.top_groups);
}

}  // namespace

bool router_fits(int64_t tokens, const TensorView& router, const ExpertRouting& routing, bool normed) {
  static const bool on = asked("TESSERA_CUDA_MOE_ROUTER");
  return on && tokens == 1 && router.shape.size() == 2 && router.dim(0) == routing.experts &&
         routing.experts <= kMaxRoutedExperts && mma_matmul_fits(router.dtype, router.dim(1)) &&
         (!normed || router.dim(1) >= kMmaSplit * kMmaChunk);
}

bool experts_norm_fits(int64_t tokens, int64_t top_k, const ExpertTable& table, DType norm_dtype) {
  static const bool on = asked("TESSERA_CUDA_MOE_NORM");
  return on && lone_token(tokens, top_k) && mma_matmul_fits(table.dtype, table.hidden) && norm_dtype == DType::kBF16;
}

void route_experts(cudaStream_t stream, const float* logits, int64_t tokens, const ExpertRouting& routing,
                   const void* bias, DType bias_dtype, int32_t* experts, float* weights) {
  const ExpertRouting& r = routing;
  check_routing(r);
  if (tokens == 0) return;
  if (warp_routes(r)) {
    launch_kernel(route_warp_kernel, static_cast<unsigned>(tokens), 32, 0, stream, logits, r, experts, weights);
    return;
  }
  with_dtype(bias != nullptr ? bias_dtype : DType::kF32, [&]<DType D>() {
    launch_kernel(route_kernel<D>, static_cast<unsigned>(tokens), kRouteThreads, 0, stream, logits, r,
                  static_cast<const Storage<D>*>(bias), experts, weights);
  });
}

size_t experts_scratch(int64_t tokens, int64_t top_k, const ExpertTable& table) {
  size_t total = 0;
  layout(nullptr, tokens, top_k, table, &total);
  return total;
}

void run_experts(cudaStream_t stream, const float* x, int64_t tokens, const ExpertRouting& routing,
                 const RouterOutput& router, int32_t* experts, float* weights, const ExpertTable& table, void* scratch,
                 float* out, bool add, const ExpertNorm& norm) {
  if (tokens == 0) return;
  const int64_t top_k = routing.top_k, pairs = tokens * top_k;
  const int tile = tile_for(pairs);
  const int64_t items = max_items(pairs, table.experts, tile);
  TS_CHECK(table.experts >= 1 && table.experts <= kMaxRoutedExperts && items <= 65535, "experts ", table.experts, ", ",
           pairs, " routed pairs");
  const Slots s = layout(scratch, tokens, top_k, table, nullptr);
  // The switches (=0) turn each step saved off, to measure what it gains: a lone
  // token grouped (lone_token), its sum added by Device::add's launch, its down and
  // weighted sum in two launches. Asked for (=1): its down weights sent to L2 by
  // the gate/up launch (measured slower so far), and router_fits'
  // TESSERA_CUDA_MOE_ROUTER and experts_norm_fits' TESSERA_CUDA_MOE_NORM.
  static const bool add_on = !switched_off("TESSERA_CUDA_MOE_ADD");
  static const bool down_sum_on = !switched_off("TESSERA_CUDA_MOE_DOWN_SUM");
  static const bool down_ahead_on = asked("TESSERA_CUDA_MOE_DOWN_AHEAD");
  const bool lone = lone_token(tokens, top_k);
  const bool normed = norm.weight != nullptr;
  TS_CHECK(!normed || (lone && mma_matmul_fits(table.dtype, table.hidden)),
           "x normalized by the experts' launches for ", tokens, " tokens of ", dtype_name(table.dtype), " experts");
  if (router.router != nullptr) {
    TS_CHECK(tokens == 1 && router.logits != nullptr && table.counter != nullptr &&
                 (!normed || table.hidden >= kMmaSplit * kMmaChunk),
             "the router's launch for ", tokens, " tokens of hidden ", table.hidden);
    check_routing(routing);
    with_dtype(router.bias != nullptr ? router.bias_dtype : DType::kF32, [&]<DType D>() {
      launch_kernel(router_kernel<D>, static_cast<unsigned>((routing.experts + 15) / 16), kRouteThreads, 0, stream, x,
                    table.hidden, static_cast<const __nv_bfloat16*>(norm.weight), norm.eps,
                    static_cast<const __nv_bfloat16*>(router.router), routing,
                    static_cast<const Storage<D>*>(router.bias), router.logits, table.counter, experts, weights,
                    warp_routes(routing));
    });
  } else if (router.logits != nullptr) {
    route_experts(stream, router.logits, tokens, routing, router.bias, router.bias_dtype, experts, weights);
  }
  Items by{.top_k = static_cast<int>(top_k)};
  if (lone) {
    by.lone = experts;
    if (down_ahead_on && table.dtype == DType::kBF16) {
      by.down_ahead = table.down;
      by.down_bytes = table.hidden * table.inter * 2;
    }
  } else {
    launch_kernel(group_kernel, 1, kGroupThreads, 0, stream, experts, tokens, top_k, table.experts, tile, s);
    by.table = s.items, by.count = s.n_items, by.slot_token = s.slot_token;
  }
  const int64_t grid_items = lone ? top_k : items;
  launch_phase<true>(stream, table, tile, grid_items, by, x, table.hidden, table.inter, table.gate, table.up, s.h,
                     norm);
  const bool straight = add && add_on;
  float* to = add && !straight ? s.sum : out;
  if (lone && down_sum_on && top_k <= kMaxDownSumTopK && mma_matmul_fits(table.dtype, table.inter)) {
    launch_kernel(down_sum_kernel, static_cast<unsigned>((table.hidden + 15) / 16), kMmaSplit * 32, 0, stream, s.h,
                  table.inter, table.hidden, table.down, experts, weights, static_cast<int>(top_k), straight, to);
  } else {
    launch_phase<false>(stream, table, tile, grid_items, by, s.h, table.inter, table.hidden, table.down, nullptr, s.y);
    launch_kernel(combine_kernel, static_cast<unsigned>(tokens), 256, 0, stream, s.y, weights, s.token_slots,
                  s.slot_pair, lone ? experts : nullptr, top_k, table.hidden, straight, to);
  }
  if (add && !straight) cuda::add(stream, s.sum, tokens * table.hidden, out);
}

}  // namespace tessera::cuda
