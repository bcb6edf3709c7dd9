// The tensor-core instruction both bf16 matmul kernels use (mma_matmul.cu for a
// few tokens, mma_gemm.cu for many), so that one row's sum is the same
// instruction sequence in both.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace tessera::cuda {

constexpr int kMmaSplit = 8;  // k's chunks are dealt to eight sums, added in order at the end
constexpr int kMmaChunk = 64;

// c += a (16 x 16, row-major fragments) * b (16 x 8), f32 accumulators. Not
// volatile: the compiler may interleave the instructions of different
// accumulators, while each accumulator's own order is fixed by its data.
__device__ __forceinline__ void mma_bf16(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Half of one 64-wide chunk of k for one (16 rows) x (8 tokens) tile, from lane
// (g, t)'s 16-byte pieces: the weights at 8t..8t+7 of the half (positions 32h +
// 8t..) of rows g (a) and g + 8 (b), and x at the same positions of token g. A
// chunk is the lower half, then the upper: the four mma instructions always take
// the same positions in the same slots, in this order, in both kernels.
__device__ __forceinline__ void mma_half(float (&c)[4], uint4 a, uint4 b, uint4 x) {
  mma_bf16(c, a.x, b.x, a.y, b.y, x.x, x.y);
  mma_bf16(c, a.z, b.z, a.w, b.w, x.z, x.w);
}

// One 64-wide chunk of k's weights for lane (g, t), as mma_half takes them: the
// 16 bytes at 8t of rows g (a) and g + 8 (b), in the chunk's lower half (0) and
// upper half (1).
struct WeightChunk {
  uint4 a0, b0, a1, b1;
};

// The chunk at `at` of rows `row_a` and `row_b` (rows g and g + 8, offset by 8t).
__device__ __forceinline__ WeightChunk load_chunk(const __nv_bfloat16* __restrict__ row_a,
                                                  const __nv_bfloat16* __restrict__ row_b, int64_t at) {
  return {__ldg(reinterpret_cast<const uint4*>(row_a + at)), __ldg(reinterpret_cast<const uint4*>(row_b + at)),
          __ldg(reinterpret_cast<const uint4*>(row_a + at + 32)),
          __ldg(reinterpret_cast<const uint4*>(row_b + at + 32))};
}

// c += the chunk times x's pieces of its two halves: the lower half, then the upper.
__device__ __forceinline__ void mma_chunk(float (&c)[4], const WeightChunk& w, uint4 x0, uint4 x1) {
  mma_half(c, w.a0, w.b0, x0);
  mma_half(c, w.a1, w.b1, x1);
}

// Where position p of a row of x rounded to bf16 for the tiled matmuls (mma_gemm.cu)
// sits: in mma slot order. mma_half gives lane t positions 8t..8t+7 of a 32-wide
// half as pairs 2t (first mma, a.x/x.x), 2t + 8 (x.y), then the second mma's; so
// the half's 16 slots of its first k16 step hold positions 0, 1, 8, 9, 16, 17, 24,
// 25, 2, 3, 10, 11, 18, 19, 26, 27 and its second step's the same plus 4. Stored so,
// a row's 16-byte units are whole mma operands (ldmatrix's rows, wgmma's core
// matrices): unit u of a 64-wide chunk holds k16 step u / 2, its slots 8 (u % 2)..
// Rows must be whole halves (k % 32 == 0).
__host__ __device__ constexpr int64_t mma_slot(int64_t p) {
  const int64_t in_half = p % 32, t = in_half / 8, q = in_half % 8 / 2;
  return p - in_half + 16 * (q / 2) + 8 * (q % 2) + 2 * t + p % 2;
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low half
  return *reinterpret_cast<uint32_t*>(&v);
}

// x[at, at + 8) of one token, rounded to bf16 pairs as both kernels' B operand.
__device__ __forceinline__ uint4 load_x(const float* __restrict__ p) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  return make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
}

// load_x, RMS-normalized on the way: weight * (x * scale), as rms_norm writes it
// (the decode matmul's normalizing jobs and a lone token's experts, moe.cu).
__device__ __forceinline__ uint4 load_normed_x(const float* __restrict__ p, const __nv_bfloat16* __restrict__ w,
                                               float scale) {
  const float4 a = __ldg(reinterpret_cast<const float4*>(p));
  const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
  const uint4 u = __ldg(reinterpret_cast<const uint4*>(w));
  const auto n = [&](float x, uint32_t word, bool high) {
    return __uint_as_float(high ? word & 0xffff0000u : word << 16) * (x * scale);
  };
  return make_uint4(pack_bf16(n(a.x, u.x, false), n(a.y, u.x, true)), pack_bf16(n(a.z, u.y, false), n(a.w, u.y, true)),
                    pack_bf16(n(b.x, u.z, false), n(b.y, u.z, true)), pack_bf16(n(b.z, u.w, false), n(b.w, u.w, true)));
}

// The eight warps' sums of accumulator i of this lane, added in warp order (the
// block's warps wrote theirs to `partial` [kMmaSplit][kTiles][32][4]).
template <int kTiles>
__device__ __forceinline__ float block_sum(const float* partial, int j, int i) {
  const int lane = threadIdx.x % 32;
  float sum = partial[((0 * kTiles + j) * 32 + lane) * 4 + i];
#pragma unroll
  for (int s = 1; s < kMmaSplit; ++s) sum += partial[((s * kTiles + j) * 32 + lane) * 4 + i];
  return sum;
}

// The bias both kernels add to a row's sum (then silu_times for gate/up).
__device__ __forceinline__ float with_bias(float sum, const __nv_bfloat16* bias, int64_t row) {
  return bias != nullptr ? sum + __bfloat162float(bias[row]) : sum;
}

}  // namespace tessera::cuda
