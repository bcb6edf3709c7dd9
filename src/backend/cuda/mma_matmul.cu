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
//
// A decode step's q/k/v job may also take rope and the KV store (MmaJob::rope):
// its q and k tiles then hold rope's pairs of rows, and the epilogue turns them
// and writes k and v into the pages (rope_store_rows), as rope_store would.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/rope_pair.cuh"
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

// The sums of kMats tiles of 16 weight rows (from `row_a[m]`/`row_b[m]`, rows g and
// g + 8 of tile m, already offset by 8t) times kTiles * 8 tokens, over this warp's
// chunks (two tiles: gate's and up's, side by side in one pass, sharing x's loads).
// kNorm with `first`: the call that computes the tokens' scales (every warp has a
// chunk: mma_norm_fits).
template <int kTiles, int kUnroll, bool kNorm, int kMats>
__device__ __forceinline__ void warp_sums(const XRows& xr, int64_t tokens, int64_t token0, int64_t k,
                                          const __nv_bfloat16* const (&row_a)[kMats],
                                          const __nv_bfloat16* const (&row_b)[kMats], bool first,
                                          float (&c)[kMats][kTiles][4]) {
  const float* __restrict__ x = xr.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  const int64_t chunks = k / kChunk;
  // kUnroll chunks' weights are loaded before any is used (bytes in flight); they
  // are then summed in chunk order, so kUnroll changes no result.
  for (int64_t base = warp; base < chunks; base += kSplit * kUnroll) {
    uint4 wa0[kMats][kUnroll], wb0[kMats][kUnroll], wa1[kMats][kUnroll], wb1[kMats][kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t at = (base + u * kSplit) * kChunk;
      if (base + u * kSplit < chunks) {
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          wa0[m][u] = __ldg(reinterpret_cast<const uint4*>(row_a[m] + at));
          wb0[m][u] = __ldg(reinterpret_cast<const uint4*>(row_b[m] + at));
          wa1[m][u] = __ldg(reinterpret_cast<const uint4*>(row_a[m] + at + 32));
          wb1[m][u] = __ldg(reinterpret_cast<const uint4*>(row_b[m] + at + 32));
        }
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
#pragma unroll
        for (int m = 0; m < kMats; ++m) {
          mma_half(c[m][j], wa0[m][u], wb0[m][u], x0);
          mma_half(c[m][j], wa1[m][u], wb1[m][u], x1);
        }
      }
    }
  }
}

// Warp 0's end of a block of weight s of a q/k/v job with job.rope (one tile of
// up to 8 tokens): the sums of rows row_a (accumulators 0, 1) and row_b (2, 3) of
// each token, turned and stored (rope_pair.cuh).
__device__ __forceinline__ void rope_store_rows(const MmaJob& job, int s, const float* partial, int64_t row_a,
                                                int64_t row_b, int64_t token0, int64_t tokens) {
  const int t = threadIdx.x % 4;
  for (int odd = 0; odd < 2; ++odd) {
    const int64_t token = token0 + 2 * t + odd;
    if (token >= tokens) continue;
    rope_store_pair(job, s, token, row_a, row_b, with_bias(block_sum<1>(partial, 0, odd), job.bias[s], row_a),
                    with_bias(block_sum<1>(partial, 0, odd + 2), job.bias[s], row_b));
  }
}

// A block owns one 16-row tile of one of the job's weights (a tile of gate and
// the same tile of up in kGateUp) and 8 * kTiles tokens. With kRope (job.rope), the
// tiles of q and k pair rope's rows: tile i of a head holds its rows 8i + g and
// 8i + g + head_dim / 2 where other tiles hold rows g and g + 8 (a row's sum does
// not depend on its tile).
template <int kTiles, int kUnroll, bool kGateUp, bool kNorm, bool kTogether = false, bool kRope = false>
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
  int64_t row_a = row0 + g, row_b = row0 + g + 8;  // the rows of lane (g, t)'s accumulators 0, 1 and 2, 3
  if (kRope && s < 2) {
    const int64_t hd = job.rope.head_dim, tile = blockIdx.x - job.first_tile[s];
    row_a = tile / (hd / 16) * hd + tile % (hd / 16) * 8 + g;
    row_b = row_a + hd / 2;
  }
  const int64_t ra = min(row_a, n - 1) * k + 8 * t, rb = min(row_b, n - 1) * k + 8 * t;

  let_next_start();
  // Each pass's sums into partial[first part..]: gate's and then up's in two passes, or
  // (kTogether) both in one.
  const auto pass = [&]<int kMats>(int first_part, bool first) {
    float c[kMats][kTiles][4] = {};
    const __nv_bfloat16* row_a[kMats];
    const __nv_bfloat16* row_b[kMats];
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
      const __nv_bfloat16* w = job.w[first_part + m == 0 ? s : 1];
      row_a[m] = w + ra, row_b[m] = w + rb;
    }
    warp_sums<kTiles, kUnroll, kNorm, kMats>(xr, tokens, token0, k, row_a, row_b, first, c);
    wait_for_earlier();  // for a warp without chunks (waiting again costs nothing)
#pragma unroll
    for (int m = 0; m < kMats; ++m)
#pragma unroll
      for (int j = 0; j < kTiles; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) partial[first_part + m][warp][j][lane][i] = c[m][j][i];
  };
  if constexpr (kTogether) {
    pass.template operator()<2>(0, true);
  } else {
    pass.template operator()<1>(0, true);
    if constexpr (kGateUp) pass.template operator()<1>(1, false);
  }
  __syncthreads();
  if (warp != 0) return;
  if constexpr (kRope) return rope_store_rows(job, s, &partial[0][0][0][0][0], row_a, row_b, token0, tokens);
  const __nv_bfloat16* bias = job.bias[s];
  float* y = job.y[s];
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      // Accumulator i of lane (g, t): row g (+8 for i >= 2), token 2t (+1 for odd i).
      const int64_t row = i >= 2 ? row_b : row_a;
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

template <int kTiles, int kUnroll, bool kGateUp, bool kTogether = false>
void launch(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const MmaJob& job) {
  const dim3 grid(static_cast<unsigned>(job.first_tile[job.count]),
                  static_cast<unsigned>((tokens + 8 * kTiles - 1) / (8 * kTiles)));
  const auto go = [&]<bool kNorm, bool kRope>() {
    launch_kernel(mma_matmul_kernel<kTiles, kUnroll, kGateUp, kNorm, kTogether, kRope>, grid, kSplit * 32, 0, stream, x,
                  tokens, k, job);
  };
  if constexpr (kTiles == 1) {  // mma_norm_fits and the rope: at most 8 tokens
    const bool norm = job.norm != nullptr;
    if constexpr (!kGateUp)
      if (job.rope.inv_freq != nullptr)
        return norm ? go.template operator()<true, true>() : go.template operator()<false, true>();
    if (norm) return go.template operator()<true, false>();
  }
  go.template operator()<false, false>();
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
  //
  // Up to 8 tokens, gate/up sums gate's and up's chunks in one pass, sharing x's
  // loads and keeping both weights' bytes in flight together, with half the
  // unrolling (as many bytes in flight as one weight's pass): the same sums in the
  // same order. Batch-1 decode on the H200 (session 31, two rounds): 1B 911.8 and
  // 900.7 tok/s against 865.6 and 863.3 in two passes, 8B 178.1 and 178.3 against
  // 174.2 and 173.8; with the whole unrolling in one pass, 861.8 / 851.9 and 171.7
  // / 171.8.
  const bool few_rows = job.first_tile[job.count] <= multiprocessors();
  if constexpr (kGateUp) {
    if (tokens <= 8 && few_rows) return launch<1, 2, true, true>(stream, x, tokens, k, job);
    if (tokens <= 8) return launch<1, 1, true, true>(stream, x, tokens, k, job);
    return launch<4, 2, true>(stream, x, tokens, k, job);
  } else {
    if (tokens <= 8 && few_rows) return launch<1, 4, false>(stream, x, tokens, k, job);
    if (tokens <= 8) return launch<1, 2, false>(stream, x, tokens, k, job);
    if (tokens <= 32) return launch<4, 2, false>(stream, x, tokens, k, job);
    return launch<8, 1, false>(stream, x, tokens, k, job);
  }
}

}  // namespace

bool mma_matmul_fits(DType w_dtype, int64_t k) { return w_dtype == DType::kBF16 && k % kChunk == 0; }

bool mma_norm_fits(int64_t tokens, int64_t k) {
  static const bool off = switched_off("TESSERA_CUDA_NORM_IN_MATMUL");
  return !off && ((tokens <= 8 && k >= kSplit * kChunk) || tokens >= mma_gemm_min_tokens());
}

bool mma_rope_fits(int64_t tokens, int64_t k, int64_t n_q, int64_t n_kv, const KvPages& pages, const Rotary& rotary) {
  const int64_t hd = pages.head_dim;
  if (!(rotary.inv_freq != nullptr && !rotary.interleaved && (rotary.dim == 0 || rotary.dim == hd) &&
        pages.base != nullptr && (pages.dtype == DType::kBF16 || pages.dtype == DType::kF16) && hd > 0 &&
        hd % 16 == 0 && n_q % hd == 0 && n_kv == pages.n_kv_heads * hd && !switched_off("TESSERA_CUDA_ROPE_IN_MATMUL")))
    return false;
  if (tokens < mma_gemm_min_tokens()) return tokens >= 1 && tokens <= 8;
  MmaJob job{.count = 3};
  job.n[0] = n_q, job.n[1] = job.n[2] = n_kv;
  return mma_gemm_splits(tokens, k, job);
}

void mma_matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, MmaJob job) {
  TS_CHECK(job.count >= 1 && job.count <= MmaJob::kMaxWeights, "mma job of ", job.count, " weights");
  TS_CHECK(job.rope.inv_freq == nullptr || (job.count == 3 && tokens <= 8 && !job.gate_up && !job.accumulate),
           "a q/k/v job with rope of ", job.count, " weights for ", tokens, " tokens");
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
