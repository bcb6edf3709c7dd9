// The bf16 matmul on tensor cores (mma.sync m16n8k16, f32 accumulators), for
// every token count: decode streams the weights through it as prefill does, so
// a row's sum has one order whatever the batch.
//
// x is rounded to bf16 as it is loaded (as transformers computes a bf16 model).
// A block of eight warps owns 16 weight rows and 8 * kTiles tokens. k is cut
// into chunks of 64; warp w takes the chunks w, w + 8, ... in order. In a chunk,
// lane (g, t) (g = lane / 4, t = lane % 4) loads the weights at 8t..8t+7 and
// 32+8t..32+8t+7 of rows g and g + 8, and the same positions of x for token g,
// and feeds them to four mma instructions: the 16 k-slots of an mma hold
// positions in a fixed permutation, the same for the weights and x, so the
// products add up to the chunk's dot product. The eight warps' sums are then
// added in warp order. Every order depends on k alone: kTiles, the number of
// tokens and the grid do not touch it.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/mma.cuh"
#include "core/check.h"

namespace tessera::cuda {

namespace {

constexpr int kSplit = kMmaSplit;  // warps of a block, each a fixed eighth of k's chunks
constexpr int kChunk = kMmaChunk;

// How a block reads x: as it is, or normalized (kNorm: the norm's weight and
// each of the block's tokens' scale, in shared memory).
struct XRows {
  const float* x = nullptr;
  const __nv_bfloat16* norm = nullptr;
  float eps = 0.0f;
  float* scale = nullptr;
};

// The scales of the block's tokens (every thread calls it).
template <int kTiles>
__device__ __forceinline__ void norm_scales(const XRows& xr, int64_t tokens, int64_t token0, int64_t k) {
  __shared__ float shared[32];
  for (int j = 0; j < 8 * kTiles && token0 + j < tokens; ++j) {
    const float scale = block_rms_scale(xr.x + (token0 + j) * k, k, xr.eps, shared);
    if (threadIdx.x == 0) xr.scale[j] = scale;
  }
  __syncthreads();
}

// The sum of 16 weight rows (from `rows_a`/`rows_b`, rows g and g + 8 of the
// tile, already offset by 8t) times kTiles * 8 tokens, over this warp's chunks.
// kNorm with `first`: the call that computes the tokens' scales (every warp has
// a chunk: mma_norm_fits).
template <int kTiles, int kUnroll, bool kNorm>
__device__ __forceinline__ void warp_sums(const XRows& xr, int64_t tokens, int64_t token0, int64_t k,
                                          const __nv_bfloat16* row_a, const __nv_bfloat16* row_b, bool first,
                                          float (&c)[kTiles][4]) {
  const float* __restrict__ x = xr.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int64_t chunks = k / kChunk;
  // kUnroll chunks' weights are loaded before any is used (bytes in flight); they
  // are then summed in chunk order, so kUnroll changes no result.
  for (int64_t base = warp; base < chunks; base += kSplit * kUnroll) {
    uint4 wa0[kUnroll], wb0[kUnroll], wa1[kUnroll], wb1[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t at = (base + u * kSplit) * kChunk;
      if (base + u * kSplit < chunks) {
        wa0[u] = __ldg(reinterpret_cast<const uint4*>(row_a + at));
        wb0[u] = __ldg(reinterpret_cast<const uint4*>(row_b + at));
        wa1[u] = __ldg(reinterpret_cast<const uint4*>(row_a + at + 32));
        wb1[u] = __ldg(reinterpret_cast<const uint4*>(row_b + at + 32));
      }
    }
    if (base == warp) {  // the first weights are on their way; x may be another kernel's
      wait_for_earlier();
      if (kNorm && first) norm_scales<kTiles>(xr, tokens, token0, k);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (base + u * kSplit >= chunks) break;
      const int64_t at = (base + u * kSplit) * kChunk;
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        const int64_t token = token0 + 8 * j + g;
        const float* row = x + token * k + at + 8 * t;
        uint4 x0 = zero, x1 = zero;
        if (token < tokens && kNorm) {
          const __nv_bfloat16* w = xr.norm + at + 8 * t;
          x0 = load_normed_x(row, w, xr.scale[8 * j + g]), x1 = load_normed_x(row + 32, w + 32, xr.scale[8 * j + g]);
        } else if (token < tokens) {
          x0 = load_x(row), x1 = load_x(row + 32);
        }
        mma_half(c[j], wa0[u], wb0[u], x0);
        mma_half(c[j], wa1[u], wb1[u], x1);
      }
    }
  }
}

// A block owns one 16-row tile of one of the job's weights (a tile of gate and
// the same tile of up in kGateUp) and 8 * kTiles tokens.
template <int kTiles, int kUnroll, bool kGateUp, bool kNorm>
__global__ void __launch_bounds__(kSplit * 32)
    mma_matmul_kernel(const float* __restrict__ x, int64_t tokens, int64_t k, MmaJob job) {
  __shared__ float partial[kGateUp ? 2 : 1][kSplit][kTiles][32][4];
  __shared__ float scale[kNorm ? 8 * kTiles : 1];
  const XRows xr{x, job.norm, job.eps, scale};
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  int s = 0;
  while (s + 1 < job.count && blockIdx.x >= job.first_tile[s + 1]) ++s;
  const int64_t n = job.n[s];
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) - job.first_tile[s]) * 16;
  const int64_t token0 = static_cast<int64_t>(blockIdx.y) * 8 * kTiles;
  const int64_t ra = min(row0 + g, n - 1) * k + 8 * t, rb = min(row0 + g + 8, n - 1) * k + 8 * t;

  let_next_start();
  float c[kTiles][4] = {};
  warp_sums<kTiles, kUnroll, kNorm>(xr, tokens, token0, k, job.w[s] + ra, job.w[s] + rb, true, c);
  wait_for_earlier();  // for a warp without chunks (waiting again costs nothing)
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[0][warp][j][lane][i] = c[j][i];
  if constexpr (kGateUp) {
    float u[kTiles][4] = {};
    warp_sums<kTiles, kUnroll, kNorm>(xr, tokens, token0, k, job.w[1] + ra, job.w[1] + rb, false, u);
#pragma unroll
    for (int j = 0; j < kTiles; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) partial[1][warp][j][lane][i] = u[j][i];
  }
  __syncthreads();
  if (warp != 0) return;
  const __nv_bfloat16* bias = job.bias[s];
  float* y = job.y[s];
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Accumulator i of lane (g, t): row g (+8 for i >= 2), token 2t (+1 for odd i).
      const int64_t row = row0 + g + (i >= 2 ? 8 : 0);
      const int64_t token = token0 + 8 * j + 2 * t + (i % 2);
      if (row >= n || token >= tokens) continue;
      const float sum = block_sum<kTiles>(&partial[0][0][0][0][0], j, i);
      float value = with_bias(sum, bias, row);
      float& out = y[token * n + row];
      if constexpr (kGateUp) {
        const float up_sum = block_sum<kTiles>(&partial[1][0][0][0][0], j, i);
        value = silu_times(value, with_bias(up_sum, job.bias[1], row));
      }
      out = job.accumulate ? out + value : value;
    }
}

// The streaming form of the kernel above for up to 8 tokens (decode): the same
// sums in the same order, but the block's threads copy the weights into a ring of
// stages in shared memory (cp.async, 16 bytes a thread at a time) that runs ahead
// across the block's tiles, so that a block keeps `stages - 1` stages of bytes in
// flight all the time instead of its warps' own loads. A block of the grid takes
// tiles blockIdx.x, + gridDim.x, ...; a tile's items are its rounds of 8 chunks
// (chunk 8r + w of round r is warp w's), gate's then up's for each round in
// kGateUp. A stage holds one item: 16 rows of up to 512 positions, a row
// kStageRow bytes apart (64 more than 1,024, so that the 8 lanes of a
// quarter-warp read 8 different bank quads).
constexpr int kStageRow = 1024 + 64;
constexpr int kStageBytes = 16 * kStageRow;
constexpr int kMostStages = 12;  // with the static shared memory, under the 227 KiB a block may have

// copies_wait<n>() for n known at run time (0 .. kMostStages - 2).
__device__ __forceinline__ void copies_wait_dynamic(int n) {
  switch (n) {
    case 0: return copies_wait<0>();
    case 1: return copies_wait<1>();
    case 2: return copies_wait<2>();
    case 3: return copies_wait<3>();
    case 4: return copies_wait<4>();
    case 5: return copies_wait<5>();
    case 6: return copies_wait<6>();
    case 7: return copies_wait<7>();
    case 8: return copies_wait<8>();
    case 9: return copies_wait<9>();
    default: return copies_wait<10>();
  }
}

// Where the block's items lie, walked one at a time (no divisions in the loop):
// the tile, its weight s and first row, the item's place in the tile and its stage.
struct ItemWalk {
  int tile, in_tile = 0, stage = 0, s = 0;
  int64_t row0 = 0;
  __device__ void locate(const MmaJob& job) {
    s = 0;
    while (s + 1 < job.count && tile >= job.first_tile[s + 1]) ++s;
    row0 = (tile - job.first_tile[s]) * int64_t{16};
  }
  __device__ ItemWalk(int first, const MmaJob& job) : tile(first) { locate(job); }
  __device__ void next(int items_a_tile, int stages, const MmaJob& job) {
    if (++stage == stages) stage = 0;
    if (++in_tile < items_a_tile) return;
    in_tile = 0;
    tile += static_cast<int>(gridDim.x);
    if (tile < job.first_tile[job.count]) locate(job);
  }
};

template <bool kGateUp, bool kNorm>
__global__ void __launch_bounds__(kSplit * 32)
    stream_matmul_kernel(const float* __restrict__ x, int64_t tokens, int64_t k, MmaJob job, int stages) {
  constexpr int kParts = kGateUp ? 2 : 1;
  extern __shared__ __align__(128) uint8_t ring[];
  __shared__ float partial[2][kParts][kSplit][1][32][4];  // by the tile's parity
  __shared__ float scale[kNorm ? 8 : 1];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int chunks = static_cast<int>(k / kChunk), rounds = (chunks + kSplit - 1) / kSplit;
  const int tiles = static_cast<int>(job.first_tile[job.count]), items_a_tile = rounds * kParts;

  // An item's copies into its stage (every thread: 16-byte units threadIdx.x + 256 m of
  // the item's 16 rows x 64 units), then the group closes (empty past the last item).
  const auto issue = [&](const ItemWalk& it) {
    if (it.tile < tiles) {
      const int part = it.in_tile % kParts, round = it.in_tile / kParts;
      const int64_t n = job.n[it.s];
      const __nv_bfloat16* w = (part == 1 ? job.w[1] : job.w[it.s]) + int64_t{round} * kSplit * kChunk;
      const int units = min(kSplit, chunks - round * kSplit) * 8;  // 16-byte units of a row
      uint8_t* stage = ring + it.stage * kStageBytes;
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int unit = threadIdx.x + kSplit * 32 * m, r = unit / 64, u = unit % 64;
        if (u < units) copy16(stage + r * kStageRow + 16 * u, w + min(it.row0 + r, n - 1) * k + 8 * u);
      }
    }
    copies_sent();
  };

  ItemWalk ahead(static_cast<int>(blockIdx.x), job);
  for (int i = 0; i < stages - 1; ++i)
    issue(ahead), ahead.next(items_a_tile, stages, job);  // weights: no kernel writes them
  let_next_start();
  wait_for_earlier();  // x may be the kernel before's output, y its input
  if constexpr (kNorm) {
    const XRows xr{x, job.norm, job.eps, scale};
    norm_scales<1>(xr, tokens, 0, k);
  }

  const float* __restrict__ x_row = x + min(int64_t{g}, tokens - 1) * k;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  float c[kParts][4] = {};
  int parity = 0;
  for (ItemWalk it(static_cast<int>(blockIdx.x), job); it.tile < tiles; it.next(items_a_tile, stages, job)) {
    const int part = it.in_tile % kParts, chunk = it.in_tile / kParts * kSplit + warp;
    const int64_t at = int64_t{chunk} * kChunk + 8 * t;
    uint4 x0 = zero, x1 = zero;
    if (chunk < chunks && g < tokens) {
      if constexpr (kNorm) {
        const __nv_bfloat16* nw = job.norm + at;
        x0 = load_normed_x(x_row + at, nw, scale[g]), x1 = load_normed_x(x_row + at + 32, nw + 32, scale[g]);
      } else {
        x0 = load_x(x_row + at), x1 = load_x(x_row + at + 32);
      }
    }
    copies_wait_dynamic(stages - 2);
    __syncthreads();  // this item is in; every warp is done with the last item's stage, refilled next
    issue(ahead), ahead.next(items_a_tile, stages, job);
    if (chunk < chunks) {
      const uint8_t* a = ring + it.stage * kStageBytes + g * kStageRow + warp * kChunk * 2 + 16 * t;
      const uint8_t* b = a + 8 * kStageRow;
      const auto unit = [](const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); };
      const auto products = [&](float(&sum)[4]) {
        mma_half(sum, unit(a), unit(b), x0);
        mma_half(sum, unit(a + 64), unit(b + 64), x1);
      };
      if (kGateUp && part == 1) products(c[kParts - 1]);
      else products(c[0]);
    }

    if (it.in_tile + 1 < items_a_tile) continue;
      // The tile's last item: the eight warps' sums, added in warp order by warp 0.
#pragma unroll
    for (int p = 0; p < kParts; ++p)
#pragma unroll
      for (int e = 0; e < 4; ++e) partial[parity][p][warp][0][lane][e] = c[p][e], c[p][e] = 0.0f;
    __syncthreads();
    parity ^= 1;
    if (warp != 0) continue;
    const int64_t n = job.n[it.s];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t row = it.row0 + g + (e >= 2 ? 8 : 0), token = 2 * t + (e % 2);
      if (row >= n || token >= tokens) continue;
      float value = with_bias(block_sum<1>(&partial[parity ^ 1][0][0][0][0][0], 0, e), job.bias[it.s], row);
      if constexpr (kGateUp)
        value = silu_times(value, with_bias(block_sum<1>(&partial[parity ^ 1][1][0][0][0][0], 0, e), job.bias[1], row));
      float& out = job.y[it.s][token * n + row];
      out = job.accumulate ? out + value : value;
    }
  }
}

// Stages of the streaming kernel (TESSERA_CUDA_STREAM_STAGES, 2..12, default 5), or 0
// when it does not run: only when asked (TESSERA_CUDA_STREAM=1), read at every call.
// On the H200 it was slower than the kernel above (session 30: the 8B shape's batch-1
// decode 157.5 tok/s with two blocks an SM, 114.0 with one and 8 stages, against 174.4).
int stream_stages() {
  if (!asked("TESSERA_CUDA_STREAM")) return 0;
  const char* asked = std::getenv("TESSERA_CUDA_STREAM_STAGES");
  const int n = asked != nullptr ? std::atoi(asked) : 5;
  return n >= 2 && n <= kMostStages ? n : 5;
}

template <bool kGateUp, bool kNorm>
void launch_stream(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const MmaJob& job, int stages) {
  const size_t smem = static_cast<size_t>(stages) * kStageBytes;
  static const bool ready =
      cudaFuncSetAttribute(stream_matmul_kernel<kGateUp, kNorm>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           kMostStages * kStageBytes) == cudaSuccess;
  TS_CHECK(ready, "[cuda] the streaming matmul's shared memory");
  const char* blocks_asked = std::getenv("TESSERA_CUDA_STREAM_BLOCKS");
  const int64_t per_sm = blocks_asked != nullptr && std::atoi(blocks_asked) == 2 ? 2 : 1;
  const auto grid = static_cast<unsigned>(std::min<int64_t>(job.first_tile[job.count], per_sm * multiprocessors()));
  launch_kernel(stream_matmul_kernel<kGateUp, kNorm>, grid, kSplit * 32, smem, stream, x, tokens, k, job, stages);
}

template <int kTiles, int kUnroll, bool kGateUp>
void launch(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const MmaJob& job) {
  const dim3 grid(static_cast<unsigned>(job.first_tile[job.count]),
                  static_cast<unsigned>((tokens + 8 * kTiles - 1) / (8 * kTiles)));
  if constexpr (kTiles == 1)  // mma_norm_fits: at most 8 tokens
    if (job.norm != nullptr)
      return launch_kernel(mma_matmul_kernel<kTiles, kUnroll, kGateUp, true>, grid, kSplit * 32, 0, stream, x, tokens,
                           k, job);
  launch_kernel(mma_matmul_kernel<kTiles, kUnroll, kGateUp, false>, grid, kSplit * 32, 0, stream, x, tokens, k, job);
}

template <bool kGateUp>
void launch_tiles(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const MmaJob& job) {
  // The token tile and the unrolling only set how many tokens share a weight load
  // and how many loads are in flight, never a sum's order. (Unrolling 2 streamed
  // the 8B shape's weights fastest at one token, of 1, 2, 4 and 8; 16 warps
  // instead of 8 helped only 1024-row matmuls.) A matmul of at most a block an SM
  // unrolls 4 (128 registers a thread, two blocks an SM): on the H200 the 1B
  // shape's decode, whose o and down are 128 blocks, ran 863 and 853 tok/s against
  // 837 and 832, while the 8B shape's o and down (256 blocks) lost 2 % that way.
  if (const int stages = stream_stages(); tokens <= 8 && stages > 0)
    return job.norm != nullptr ? launch_stream<kGateUp, true>(stream, x, tokens, k, job, stages)
                               : launch_stream<kGateUp, false>(stream, x, tokens, k, job, stages);
  if (tokens <= 8 && job.first_tile[job.count] <= multiprocessors())
    return launch<1, 4, kGateUp>(stream, x, tokens, k, job);
  if (tokens <= 8) return launch<1, 2, kGateUp>(stream, x, tokens, k, job);
  if (tokens <= 32 || kGateUp) return launch<4, 2, kGateUp>(stream, x, tokens, k, job);
  return launch<8, 1, false>(stream, x, tokens, k, job);
}

}  // namespace

bool mma_matmul_fits(DType w_dtype, int64_t k) { return w_dtype == DType::kBF16 && k % kChunk == 0; }

bool mma_norm_fits(int64_t tokens, int64_t k) {
  static const bool off = switched_off("TESSERA_CUDA_NORM_IN_MATMUL");
  return !off && ((tokens <= 8 && k >= kSplit * kChunk) || tokens >= mma_gemm_min_tokens());
}

void mma_matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, MmaJob job) {
  TS_CHECK(job.count >= 1 && job.count <= MmaJob::kMaxWeights, "mma job of ", job.count, " weights");
  TS_CHECK(job.norm == nullptr || (tokens <= 8 && mma_norm_fits(tokens, k)), "a normalizing job of k ", k, " for ",
           tokens, " tokens");
  job.first_tile[0] = 0;
  for (int s = 0; s < job.count; ++s) job.first_tile[s + 1] = job.first_tile[s] + (job.n[s] + 15) / 16;
  if (job.gate_up) {
    TS_CHECK(job.count == 1 && job.w[1] != nullptr, "gate/up job");
    return launch_tiles<true>(stream, x, tokens, k, job);
  }
  launch_tiles<false>(stream, x, tokens, k, job);
}

}  // namespace tessera::cuda
