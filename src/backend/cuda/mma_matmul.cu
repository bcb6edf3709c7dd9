// The bf16 matmul on tensor cores (mma.sync m16n8k16, f32 accumulators), for
// every token count: decode streams the weights through it as prefill does, so
// a row's sum has one order whatever the batch.
//
// x is first rounded to bf16 (as transformers computes a bf16 model). A block of
// four warps owns 16 weight rows and 8 * kTiles tokens. k is cut into chunks of
// 32; warp w takes the chunks w, w + 4, ... in order. In a chunk, lane (g, t)
// (g = lane / 4, t = lane % 4) loads 8 consecutive weights of rows g and g + 8
// and the same 8 positions of x for token g, and feeds them to two mma
// instructions: the 16 k-slots of an mma hold the chunk's positions in a fixed
// permutation, the same for the weights and x, so the product is the chunk's
// dot product. The four warps' sums are then added in warp order. Every order
// depends on k alone: kTiles, the number of tokens and the grid do not touch it.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/cuda/kernels.cuh"

namespace tessera::cuda {

namespace {

constexpr int kSplit = 4;  // warps of a block, each a fixed quarter of k's chunks
constexpr int kChunk = 32;

__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__global__ void round_to_bf16(const float* __restrict__ x, int64_t n, __nv_bfloat16* __restrict__ out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(x[i]);
}

template <int kTiles>
__global__ void __launch_bounds__(kSplit * 32)
    mma_matmul_kernel(const __nv_bfloat16* __restrict__ x, int64_t tokens, int64_t k,
                      const __nv_bfloat16* __restrict__ w, int64_t n, const __nv_bfloat16* __restrict__ bias,
                      float* __restrict__ y) {
  __shared__ float partial[kSplit][kTiles][32][4];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16;
  const int64_t token0 = static_cast<int64_t>(blockIdx.y) * 8 * kTiles;
  const __nv_bfloat16* row_a = w + min(row0 + g, n - 1) * k + 8 * t;
  const __nv_bfloat16* row_b = w + min(row0 + g + 8, n - 1) * k + 8 * t;
  const uint4 zero = make_uint4(0, 0, 0, 0);

  float c[kTiles][4] = {};
  const int64_t chunks = k / kChunk;
#pragma unroll 4
  for (int64_t chunk = warp; chunk < chunks; chunk += kSplit) {
    const int64_t at = chunk * kChunk;
    const uint4 wa = __ldg(reinterpret_cast<const uint4*>(row_a + at));
    const uint4 wb = __ldg(reinterpret_cast<const uint4*>(row_b + at));
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int64_t token = token0 + 8 * j + g;
      const uint4 xv = token < tokens ? __ldg(reinterpret_cast<const uint4*>(x + token * k + at + 8 * t)) : zero;
      mma_bf16(c[j], wa.x, wb.x, wa.y, wb.y, xv.x, xv.y);
      mma_bf16(c[j], wa.z, wb.z, wa.w, wb.w, xv.z, xv.w);
    }
  }
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][j][lane][i] = c[j][i];
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < kTiles; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float sum = partial[0][j][lane][i];
#pragma unroll
      for (int s = 1; s < kSplit; ++s) sum += partial[s][j][lane][i];
      // Accumulator i of lane (g, t): row g (+8 for i >= 2), token 2t (+1 for odd i).
      const int64_t row = row0 + g + (i >= 2 ? 8 : 0);
      const int64_t token = token0 + 8 * j + 2 * t + (i % 2);
      if (row < n && token < tokens) y[token * n + row] = bias != nullptr ? sum + __bfloat162float(bias[row]) : sum;
    }
}

template <int kTiles>
void launch(cudaStream_t stream, const __nv_bfloat16* x, int64_t tokens, int64_t k, const __nv_bfloat16* w, int64_t n,
            const __nv_bfloat16* bias, float* y) {
  const dim3 grid(static_cast<unsigned>((n + 15) / 16),
                  static_cast<unsigned>((tokens + 8 * kTiles - 1) / (8 * kTiles)));
  mma_matmul_kernel<kTiles><<<grid, kSplit * 32, 0, stream>>>(x, tokens, k, w, n, bias, y);
}

}  // namespace

bool mma_matmul_fits(DType w_dtype, int64_t k) { return w_dtype == DType::kBF16 && k % kChunk == 0; }

void mma_matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, int64_t n,
                const void* bias, float* y, uint16_t* x_bf16) {
  auto* xb = reinterpret_cast<__nv_bfloat16*>(x_bf16);
  const int64_t count = tokens * k;
  round_to_bf16<<<static_cast<unsigned>(std::clamp<int64_t>((count + 255) / 256, 1, 65535)), 256, 0, stream>>>(x, count,
                                                                                                               xb);
  const auto* ws = static_cast<const __nv_bfloat16*>(w);
  const auto* bs = static_cast<const __nv_bfloat16*>(bias);
  // The token tile only sets how many tokens share a weight load, never a sum's order.
  if (tokens <= 8) return launch<1>(stream, xb, tokens, k, ws, n, bs, y);
  if (tokens <= 32) return launch<4>(stream, xb, tokens, k, ws, n, bs, y);
  return launch<8>(stream, xb, tokens, k, ws, n, bs, y);
}

}  // namespace tessera::cuda
