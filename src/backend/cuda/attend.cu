// Rope, the KV store and paged attention for every sequence of a step, each in
// one launch whatever the number of sequences (kernels.cuh: TokenMap says where
// each token sits).
//
// Attention is split along the context in a fixed way: a token's visible
// positions are cut into partitions of kPartition, counted from the first
// visible one, so the cut depends only on the token's position. One block scores
// one partition for the query heads of one KV head (the keys and values are read
// from memory once for the group), and writes each head's partial output, max
// and sum; a second kernel merges a token's partitions in order. Every sum runs
// in an order fixed by head_dim and the position alone: a token gets bitwise the
// same output whatever else is in the launch (batch invariance), and a prompt
// run in chunks gets what it gets in one pass.
#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/merge.cuh"
#include "backend/cuda/mma.cuh"

#include <algorithm>

namespace tessera::cuda {

namespace {

constexpr int kPartition = 64;  // positions per partition, and threads per block
constexpr int kMaxHeadDim = 512;
// Query heads one block takes from its KV head's group (more become more blocks).
constexpr int64_t kHeadsPerBlock = 8;

// Heads a block of rope_store_kernel takes, so that a prefill's thousands of tokens
// are not a block each of 64 threads per head.
constexpr int64_t kRopeHeads = 8;

// Block (token, chunk of kRopeHeads heads among the q heads, then the k heads).
template <DType D>
__global__ void rope_store_kernel(float* q, int64_t q_heads, float* k, const float* __restrict__ v, int64_t kv_heads,
                                  int64_t hd, KvPages p, int64_t layer, TokenMap map, Rotary r) {
  let_next_start();
  wait_for_earlier();
  const int64_t t = blockIdx.x, first = blockIdx.y * kRopeHeads;
  const int64_t heads = min(kRopeHeads, q_heads + kv_heads - first);
  const int64_t pos = map.pos[t];
  const auto row_of = [&](int64_t head) {
    return head < q_heads ? q + (t * q_heads + head) * hd : k + (t * kv_heads + head - q_heads) * hd;
  };
  if (r.inv_freq != nullptr) {
    const int64_t half = (r.dim > 0 ? r.dim : hd) / 2;
    // Pair i: dimensions (i, i + half), or (2i, 2i + 1) when interleaved (CpuDevice::rope).
    const int64_t first_step = r.interleaved ? 2 : 1, second = r.interleaved ? 1 : half;
    const auto position = static_cast<float>(pos);
    for (int64_t j = threadIdx.x; j < heads * half; j += blockDim.x) {
      float* x = row_of(first + j / half);
      const int64_t i = j % half;
      const int64_t ia = i * first_step, ib = ia + second;
      float a = x[ia], b = x[ib];
      rotate_pair(a, b, position, r.inv_freq[i], r.scaling);
      x[ia] = a;
      x[ib] = b;
    }
  }
  if (first + heads <= q_heads || p.base == nullptr) return;
  __syncthreads();  // the rotated rows, written by the block's threads
  const int32_t* blocks = map.tables + map.table[t];
  const int64_t row = (pos % p.block_size) * hd;
  auto* base = static_cast<Storage<D>*>(p.base);
  const int64_t first_kv = max(first, q_heads);
  for (int64_t j = threadIdx.x; j < (first + heads - first_kv) * hd; j += blockDim.x) {
    const int64_t head = first_kv + j / hd, kv = head - q_heads, i = j % hd;
    Storage<D>* keys = base + kv_offset(p, blocks[pos / p.block_size], layer, 0, kv) + row;
    Storage<D>* values = base + kv_offset(p, blocks[pos / p.block_size], layer, 1, kv) + row;
    keys[i] = narrow<D>(row_of(head)[i]);
    values[i] = narrow<D>(v[(t * kv_heads + kv) * hd + i]);
  }
}

// The first position token t sees, and how many partitions it needs.
__device__ __forceinline__ int64_t first_visible(int64_t pos, int64_t window) {
  return window > 0 ? max(int64_t{0}, pos - window + 1) : 0;
}

// Max or sum over the block, for each of kHeadsPerBlock values per thread, in a
// fixed tree (each warp by shuffles, then the warps in order). `shared` holds
// kHeadsPerBlock * warps floats; every thread gets the results in v.
template <bool kMax>
__device__ __forceinline__ void block_reduce_heads(float (&v)[kHeadsPerBlock], float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
#pragma unroll
  for (int h = 0; h < kHeadsPerBlock; ++h) v[h] = kMax ? warp_max(v[h]) : warp_sum(v[h]);
  __syncthreads();  // `shared` may still be read from the previous reduction
  if (lane == 0)
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) shared[h * warps + warp] = v[h];
  __syncthreads();
#pragma unroll
  for (int h = 0; h < kHeadsPerBlock; ++h) {
    float total = shared[h * warps];
    for (int i = 1; i < warps; ++i) total = kMax ? fmaxf(total, shared[h * warps + i]) : total + shared[h * warps + i];
    v[h] = total;
  }
}

// Block (partition, token, head chunk): up to kHeadsPerBlock query heads of one
// KV head, all at once, so each key and value is read once for them. Thread i
// scores position start + i for every head (its key read as 16-byte pieces,
// each head's dot product summed in dimension order); the partition's max and
// sum per head come from fixed-tree block reductions. For the values the
// threads form kPartition / G lanes of G = head_dim / 8 groups: lane l, group g
// sums dimensions [8g, 8g + 8) over positions l, l + lanes, ... in order, and the
// lanes' sums are added in lane order. Output per (token, head, partition): the
// unnormalised sum [head_dim], then the max and the sum of the weights.
template <DType D, bool kVec>
__global__ void __launch_bounds__(kPartition)
    partition_kernel(const float* __restrict__ q, int64_t n_heads, KvPages p, int64_t layer, TokenMap map,
                     int64_t window, float scale, int64_t partitions, float* __restrict__ scratch) {
  let_next_start();
  wait_for_earlier();
  extern __shared__ float shared[];
  const int64_t hd = p.head_dim, bs = p.block_size;
  const int64_t groups = (hd + 7) / 8, lanes = kPartition / groups;
  float* qs = shared;                                                // [kHeadsPerBlock][hd]
  float* weights = qs + kHeadsPerBlock * hd;                         // [kHeadsPerBlock][kPartition]
  float* partial = weights + kHeadsPerBlock * kPartition;            // [kHeadsPerBlock][lanes][groups * 8]
  float* reduction = partial + kHeadsPerBlock * lanes * groups * 8;  // [kHeadsPerBlock * warps]
  auto* value_rows =
      reinterpret_cast<const Storage<D>**>(reduction + kHeadsPerBlock * kPartition / 32);  // [kPartition]
  const int64_t part = blockIdx.x, t = blockIdx.y;
  const int64_t group_size = n_heads / p.n_kv_heads;
  const int64_t chunks = (group_size + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const int64_t kv = blockIdx.z / chunks;
  const int64_t h0 = kv * group_size + (blockIdx.z % chunks) * kHeadsPerBlock;
  const int nh = static_cast<int>(min(static_cast<int64_t>(kHeadsPerBlock), (kv + 1) * group_size - h0));
  const int64_t pos = map.pos[t];
  const int64_t start = first_visible(pos, window) + part * kPartition;
  if (start > pos) return;  // this token needs fewer partitions (the whole block leaves)
  const int64_t count = min(static_cast<int64_t>(kPartition), pos - start + 1);
  const int32_t* blocks = map.tables + map.table[t];
  const auto* base = static_cast<const Storage<D>*>(p.base);
  const auto row = [&](int64_t j, int kind) {
    return base + kv_offset(p, blocks[j / bs], layer, kind, kv) + (j % bs) * hd;
  };
  for (int64_t i = threadIdx.x; i < nh * hd; i += kPartition) qs[i] = q[(t * n_heads + h0) * hd + i];
  __syncthreads();

  float score[kHeadsPerBlock];
#pragma unroll
  for (int h = 0; h < kHeadsPerBlock; ++h) score[h] = -INFINITY;
  if (threadIdx.x < count) {
    const Storage<D>* key = row(start + threadIdx.x, 0);
    value_rows[threadIdx.x] = row(start + threadIdx.x, 1);  // read by the value loop, after the barriers below
    float dot[kHeadsPerBlock] = {};
#pragma unroll 4
    for (int64_t c = 0; c < groups; ++c) {
      float k8[8];
      load8<D, kVec>(key, c, hd, k8);
#pragma unroll
      for (int h = 0; h < kHeadsPerBlock; ++h) {
        if (h >= nh) break;
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (8 * c + e < hd) dot[h] = fmaf(qs[h * hd + 8 * c + e], k8[e], dot[h]);
      }
    }
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) score[h] = dot[h] * scale;
  }
  float peak[kHeadsPerBlock], sum[kHeadsPerBlock];
#pragma unroll
  for (int h = 0; h < kHeadsPerBlock; ++h) peak[h] = score[h];
  block_reduce_heads<true>(peak, reduction);
#pragma unroll
  for (int h = 0; h < kHeadsPerBlock; ++h) {
    sum[h] = threadIdx.x < count && h < nh ? expf(score[h] - peak[h]) : 0.0f;
    weights[h * kPartition + threadIdx.x] = sum[h];
  }
  block_reduce_heads<false>(sum, reduction);  // its barriers also publish `weights`

  const int64_t lane = threadIdx.x / groups, group = threadIdx.x % groups;
  if (lane < lanes) {
    float sum8[kHeadsPerBlock][8] = {};
#pragma unroll 4
    for (int64_t r = lane; r < count; r += lanes) {
      float v8[8];
      load8<D, kVec>(value_rows[r], group, hd, v8);
#pragma unroll
      for (int h = 0; h < kHeadsPerBlock; ++h) {
        if (h >= nh) break;
        const float w = weights[h * kPartition + r];
#pragma unroll
        for (int e = 0; e < 8; ++e) sum8[h][e] = fmaf(w, v8[e], sum8[h][e]);
      }
    }
#pragma unroll
    for (int h = 0; h < kHeadsPerBlock; ++h) {
      if (h >= nh) break;
#pragma unroll
      for (int e = 0; e < 8; ++e) partial[(h * lanes + lane) * groups * 8 + group * 8 + e] = sum8[h][e];
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < nh * hd; i += kPartition) {
    const int64_t h = i / hd, d = i % hd;
    float acc = partial[h * lanes * groups * 8 + d];
    for (int64_t l = 1; l < lanes; ++l) acc += partial[(h * lanes + l) * groups * 8 + d];
    float* out = scratch + ((t * n_heads + h0 + h) * partitions + part) * (hd + 2);
    out[d] = acc;
    if (d == 0) {
      out[hd] = peak[h];  // every thread holds every head's max and sum
      out[hd + 1] = sum[h];
    }
  }
}

// Block (token, head): the token's partitions merged in order (merge.cuh). With
// kAhead a thread loads kAheadParts partitions' values before it merges them, in
// the same order, rather than waiting for each partition's loads in turn: a lone
// decode token's merge is a few blocks, and waits were all of its time (the 1B
// shape's 32 blocks of 9 partitions: 7.5-7.8 us waiting, 4.1-4.4 ahead, on the H200;
// TESSERA_CUDA_COMBINE_AHEAD=0 waits, to measure it).
constexpr int kAheadParts = 16;

template <bool kAhead>
__global__ void combine_kernel(int64_t n_heads, int64_t hd, TokenMap map, int64_t window, int64_t partitions,
                               const float* __restrict__ scratch, float* __restrict__ out,
                               __nv_bfloat16* __restrict__ rounded) {
  let_next_start();
  wait_for_earlier();
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int64_t pos = map.pos[t];
  const int64_t used = (pos - first_visible(pos, window)) / kPartition + 1;
  const float* parts = scratch + (t * n_heads + h) * partitions * (hd + 2);
  const int64_t stride = hd + 2;
  float* result = out + (t * n_heads + h) * hd;
  for (int64_t d = threadIdx.x; d < hd; d += blockDim.x) {
    RunningMerge run;
    float acc = 0.0f;
    if constexpr (kAhead) {
      for (int64_t i0 = 0; i0 < used; i0 += kAheadParts) {
        float value[kAheadParts], peak[kAheadParts], sum[kAheadParts];
#pragma unroll
        for (int j = 0; j < kAheadParts; ++j) {
          const float* part = parts + min(i0 + j, used - 1) * stride;
          value[j] = part[d], peak[j] = part[hd], sum[j] = part[hd + 1];
        }
#pragma unroll
        for (int j = 0; j < kAheadParts; ++j)
          if (i0 + j < used) acc = merge_output(acc, value[j], merge_partition(run, peak[j], sum[j]));
      }
    } else {
      for (int64_t i = 0; i < used; ++i)
        acc = merge_output(acc, parts[i * stride + d],
                           merge_partition(run, parts[i * stride + hd], parts[i * stride + hd + 1]));
    }
    result[d] = __fdiv_rn(acc, run.sum);
    if (rounded != nullptr) rounded[t * n_heads * hd + mma_slot(h * hd + d)] = __float2bfloat16_rn(result[d]);
  }
}

}  // namespace

void rope_store(cudaStream_t stream, float* q, int64_t q_heads, float* k, const float* v, int64_t kv_heads,
                int64_t head_dim, const KvPages* pages, int64_t layer, int64_t tokens, TokenMap map,
                const Rotary& rotary) {
  if (tokens == 0 || q_heads + kv_heads == 0) return;
  const dim3 grid(static_cast<unsigned>(tokens),
                  static_cast<unsigned>((q_heads + kv_heads + kRopeHeads - 1) / kRopeHeads));
  const auto threads = static_cast<unsigned>(std::clamp<int64_t>(kRopeHeads * head_dim / 2, 32, 256));
  const KvPages p = pages != nullptr ? *pages : KvPages{};
  with_dtype(pages != nullptr ? p.dtype : DType::kF32, [&]<DType D>() {
    launch_kernel(rope_store_kernel<D>, grid, threads, 0, stream, q, q_heads, k, v, kv_heads, head_dim, p, layer, map,
                  rotary);
  });
}

int64_t attention_partitions(int64_t visible) { return (visible + kPartition - 1) / kPartition; }

void attention(cudaStream_t stream, const float* q, float* out, int64_t tokens, int64_t n_heads, const KvPages& p,
               int64_t layer, TokenMap map, int64_t window, float scale, int64_t partitions, float* scratch) {
  TS_CHECK(p.head_dim <= kMaxHeadDim, "head_dim ", p.head_dim, " above ", kMaxHeadDim);
  if (tokens == 0) return;
  const int64_t groups = (p.head_dim + 7) / 8, lanes = kPartition / groups;
  const size_t shared =
      static_cast<size_t>(kHeadsPerBlock * (p.head_dim + kPartition + lanes * groups * 8 + kPartition / 32)) *
          sizeof(float) +
      kPartition * sizeof(void*);
  const int64_t group_size = n_heads / p.n_kv_heads;
  const int64_t chunks = (group_size + kHeadsPerBlock - 1) / kHeadsPerBlock;
  const dim3 grid(static_cast<unsigned>(partitions), static_cast<unsigned>(tokens),
                  static_cast<unsigned>(p.n_kv_heads * chunks));
  with_dtype(p.dtype, [&]<DType D>() {
    if (p.head_dim % 8 == 0) {
      launch_kernel(partition_kernel<D, true>, grid, kPartition, shared, stream, q, n_heads, p, layer, map, window,
                    scale, partitions, scratch);
    } else {
      launch_kernel(partition_kernel<D, false>, grid, kPartition, shared, stream, q, n_heads, p, layer, map, window,
                    scale, partitions, scratch);
    }
  });
  attention_combine(stream, out, tokens, n_heads, p.head_dim, map, window, partitions, scratch);
}

void attention_combine(cudaStream_t stream, float* out, int64_t tokens, int64_t n_heads, int64_t head_dim, TokenMap map,
                       int64_t window, int64_t partitions, const float* scratch, __nv_bfloat16* rounded) {
  const dim3 merge(static_cast<unsigned>(tokens), static_cast<unsigned>(n_heads));
  const auto threads = static_cast<unsigned>(std::clamp<int64_t>(head_dim, 32, 256));
  // Loads ahead where the launch is a few blocks an SM (a decode step of few sequences): in a large launch other
  // blocks hide each one's waits, and the loads of partitions past the token's last cost instead (64 sequences of
  // the 8B shape: 12.5 us a merge ahead against 9.6 waiting).
  const bool ahead = tokens * n_heads <= 4 * multiprocessors() && !switched_off("TESSERA_CUDA_COMBINE_AHEAD");
  launch_kernel(ahead ? combine_kernel<true> : combine_kernel<false>, merge, threads, 0, stream, n_heads, head_dim, map,
                window, partitions, scratch, out, rounded);
}

}  // namespace tessera::cuda
