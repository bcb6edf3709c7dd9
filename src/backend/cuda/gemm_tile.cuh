// What the two tiled bf16 matmul kernels share (mma_gemm.cu on mma.sync,
// wgmma_gemm.cu on wgmma): a block computes 128 weight rows x a tile of tokens,
// staging each 64-wide chunk of k through shared memory, and visits the chunks sum
// by sum (chunk c belongs to sum c % 8), so that every output is bitwise what
// mma_matmul.cu's decode kernel gives it.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/mma.cuh"

namespace tessera::cuda {

constexpr int kBlockRows = 128;  // weight rows of a block (64 of gate, then the same 64 of up)
constexpr int kGemmThreads = 256;

// Shared memory holds rows of 64 bf16 as eight 16-byte units; unit u of row r
// sits at u ^ 4 (r & 1), so the eight lanes of a quarter-warp that read rows g and
// g + 1 at units t (or t + 4) hit eight different banks.
__device__ __forceinline__ int unit_at(int row, int unit) { return row * 8 + (unit ^ ((row & 1) << 2)); }

// The block's order of chunks: sum 0's (0, 8, 16, ...), then sum 1's, ...
// Sums 0..r-1 have q + 1 chunks, the rest q (chunks = 8q + r). Walked one step at
// a time (no divisions in the loop).
struct ChunkWalk {
  int q, r;
  int sum = 0, index = 0;  // the step's sum and its place in it
  __device__ int chunk() const { return sum + kMmaSplit * index; }
  __device__ bool ends_sum() const { return index + 1 == q + (sum < r ? 1 : 0); }
  __device__ void next() {
    if (ends_sum()) {
      ++sum;
      index = 0;
    } else {
      ++index;
    }
  }
};

// Where row r's token tok lies in gate/up's exchange ([64][kTokens] floats): swizzled
// within each 32 tokens, so that the 8 rows (of distinct r % 8) and 4 token pairs
// a warp's store or load touches fall in 32 different banks.
template <int kTokens>
__device__ __forceinline__ int exchange_at(int r, int tok) {
  static_assert(kTokens % 32 == 0, "the swizzle stays within 32 tokens");
  return r * kTokens + (tok ^ (8 * (r & 3) + ((r >> 2) & 1)));
}

// A block's outputs from the totals of its eight sums, for weight s of the job
// (rows from row0, tokens from token0): `each(f)` calls f(total, r, tok) for each
// total the thread holds (r: the block's row, tok: its token). Then the bias,
// SiLU * up for gate/up (block rows 64.. are up's: `up_rows` says the thread's are,
// and their values pass through `smem` [64][kTokens] floats), and the
// accumulation. Every thread of the block calls it.
template <bool kGateUp, int kTokens, typename Each>
__device__ __forceinline__ void finish_outputs(const MmaJob& job, int s, int64_t row0, int64_t token0, int64_t tokens,
                                               bool up_rows, void* smem, Each&& each) {
  const int64_t n = job.n[s];
  float* up = static_cast<float*>(smem);
  if constexpr (kGateUp) {
    copies_wait<0>();
    __syncthreads();
    if (up_rows)
      each([&](float total, int r, int tok) {
        up[exchange_at<kTokens>(r - 64, tok)] = with_bias(total, job.bias[1], min(row0 + r - 64, n - 1));
      });
    __syncthreads();
    if (up_rows) return;
  }
  const __nv_bfloat16* bias = job.bias[s];
  float* y = job.y[s];
  each([&](float total, int r, int tok) {
    const int64_t row = row0 + r, token = token0 + tok;
    if (row >= n || token >= tokens) return;
    float value = with_bias(total, bias, row);
    if constexpr (kGateUp) value = silu_times(value, up[exchange_at<kTokens>(r, tok)]);
    float& out = y[token * n + row];
    out = job.accumulate ? out + value : value;
    if (job.y_bf16 != nullptr) job.y_bf16[token * n + mma_slot(row)] = __float2bfloat16_rn(out);
  });
}

// The tiled matmul of 128 tokens a block on wgmma (wgmma_gemm.cu, sm_90a), whole
// outputs a block: false when this build or device has no such kernel (then
// mma_gemm.cu's runs). x is rounded to bf16 in mma_slot order.
bool wgmma_gemm(cudaStream_t stream, const __nv_bfloat16* x, int64_t tokens, int64_t k, MmaJob job);

}  // namespace tessera::cuda
