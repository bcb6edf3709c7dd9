// Rounding a call's activations to 8 bits on the device (quant_matmul.cu's header
// comment says how, and why the bits are the CPU's): one warp a block of 32 (Q8_0) or
// 256 (Q8_K), the values read as they are, normalized as rms_norm does it, or as
// silu_mul's silu(gate) * up. round_kernel (quant_matmul.cu) launches it on its own;
// round_in_block runs it inside the block of a matmul that rounds its own x
// (quant_mma.cu). Both take the same steps, so both give the same bits.
#pragma once

#include "backend/cuda/common.cuh"
#include "backend/cuda/quant_lanes.cuh"

namespace tessera::cuda {

// One warp a block of 32 (quantize_row_q8_0_ref): lane i rounds element i, v, of the
// scratch's block `block`.
__device__ __forceinline__ void round_q8_0(float v, int64_t block, Acts a) {
  const int lane = threadIdx.x % 32;
  const float amax = warp_max(fabsf(v));
  const bool finite = __all_sync(0xffffffffu, isfinite(v));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const float r = roundf(__fmul_rn(v, id));  // ties away from zero, as roundf on the CPU
  a.q[block * 32 + lane] = static_cast<int8_t>(isfinite(r) ? static_cast<int>(r) : 0);
  if (lane == 0) a.d[block] = finite ? __half2float(__float2half_rn(d)) : __int_as_float(0x7fc00000);
}

// One warp a block of 256 (quantize_row_q8_K_ref): lane i rounds elements 8i..8i+7, v.
__device__ __forceinline__ void round_q8_k(const float (&v)[8], int64_t block, Acts a) {
  const int lane = threadIdx.x % 32;
  const int64_t at = block * 256 + 8 * lane;
  // The element of largest |x|, the first such (the CPU's strict > in ascending order).
  float amax = 0.0f, max = 0.0f;
  int index = 1 << 30;  // past every element
  bool finite = true;
  for (int j = 0; j < 8; ++j) {
    finite = finite && isfinite(v[j]);
    if (fabsf(v[j]) > amax) amax = fabsf(v[j]), max = v[j], index = 8 * lane + j;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_amax = __shfl_xor_sync(0xffffffffu, amax, offset);
    const float other_max = __shfl_xor_sync(0xffffffffu, max, offset);
    const int other_index = __shfl_xor_sync(0xffffffffu, index, offset);
    if (other_amax > amax || (other_amax == amax && other_index < index))
      amax = other_amax, max = other_max, index = other_index;
  }
  finite = __all_sync(0xffffffffu, finite);
  int q[8] = {};
  float d = 0.0f;
  if (amax != 0.0f || !finite) {
    const float iscale = -127.0f / max;
    for (int j = 0; j < 8; ++j) {
      const float s = __fmul_rn(iscale, v[j]);
      q[j] = min(127, isfinite(s) ? __float2int_rn(s) : 0);  // half to even, as ggml's nearest_int
    }
    d = finite ? 1.0f / iscale : __int_as_float(0x7fc00000);
  }
  uint32_t packed[2] = {};
  int sum = 0;
  for (int j = 0; j < 8; ++j) {
    packed[j / 4] |= (static_cast<uint32_t>(q[j]) & 0xffu) << (8 * (j % 4));
    sum += q[j];
  }
  *reinterpret_cast<uint2*>(a.q + at) = make_uint2(packed[0], packed[1]);
  sum += __shfl_down_sync(0xffffffffu, sum, 1);
  if (lane % 2 == 0) a.s[block * 16 + lane / 2] = static_cast<int16_t>(sum);
  if (lane == 0) a.d[block] = d;
}

// What round_kernel rounds: x's rows as they are, normalized as rms_norm does it
// (kNorm), or silu_mul's silu(x) * up, x the gate (kGated), which it also writes to
// `out`, bitwise as silu_mul would.
enum class Rounds { kPlain, kNorm, kGated };

// The kN values of a row from element e on, as `kR` rounds them (kGated: up's and
// out's rows of it too).
template <DType D, Rounds kR, int kN>
__device__ __forceinline__ void values_at(const float* row, const float* up, float* out, const Storage<D>* weight,
                                          float scale, int64_t e, float (&v)[kN]) {
  if constexpr (kN == 8) {
    const float4 v0 = *reinterpret_cast<const float4*>(row + e), v1 = *reinterpret_cast<const float4*>(row + e + 4);
    v[0] = v0.x, v[1] = v0.y, v[2] = v0.z, v[3] = v0.w, v[4] = v1.x, v[5] = v1.y, v[6] = v1.z, v[7] = v1.w;
  } else {
    v[0] = row[e];
  }
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    if constexpr (kR == Rounds::kNorm) v[j] = widen<D>(weight[e + j]) * (v[j] * scale);
    if constexpr (kR == Rounds::kGated) v[j] = silu_times(v[j], up[e + j]);
  }
  if constexpr (kR == Rounds::kGated) {
#pragma unroll
    for (int j = 0; j < kN; ++j) out[e + j] = v[j];
  }
}

// Tokens [0, count) of x [.., k] rounded into `to` (token t's q at t k, its scales at t k
// / kSize, its sums at t k / 16) by a block of kThreads threads, one warp a block of
// kSize at a time, each row normalized first where kR is kNorm: round_kernel's steps
// (block_rms_scale stands for its kNormThreads threads), so its bits. `shared`: 32 floats.
template <DType D, Rounds kR, int kSize, int kThreads>
__device__ __forceinline__ void round_in_block(const float* x, int k, const Storage<D>* weight, float eps, int count,
                                               Acts to, float* shared) {
  static_assert(kR != Rounds::kGated);
  constexpr int kEach = kSize / 32;  // a lane's values
  const int blocks = k / kSize, warp = static_cast<int>(threadIdx.x) / 32;
  for (int t = 0; t < count; ++t) {
    const float* row = x + static_cast<int64_t>(t) * k;
    float scale = 0.0f;
    if constexpr (kR == Rounds::kNorm) scale = block_rms_scale<kThreads>(row, k, eps, shared);
    for (int b = warp; b < blocks; b += kThreads / 32) {
      float v[kEach];
      values_at<D, kR>(row, nullptr, nullptr, weight, scale, int64_t{kSize} * b + kEach * (threadIdx.x % 32), v);
      if constexpr (kSize == 32) round_q8_0(v[0], int64_t{t} * blocks + b, to);
      else round_q8_k(v, int64_t{t} * blocks + b, to);
    }
  }
}

// Where a matmul block's staged activations come from: the scratch, as quant_round left
// them (kCopied), or x's rows as they are (kPlain) or normalized by an f32 weight
// (kNorm), which the block rounds itself (round_in_block); the launch's first blocks
// then leave them in the scratch too, for the launches after it.
enum class Source { kCopied, kPlain, kNorm };
template <Source kSource>
constexpr Rounds kRoundsOf = kSource == Source::kNorm ? Rounds::kNorm : Rounds::kPlain;

}  // namespace tessera::cuda
