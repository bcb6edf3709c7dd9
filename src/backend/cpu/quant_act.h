// Activations rounded to 8 bits for the integer dot products of quant_matmul.cpp, as
// ggml's CPU matmul rounds them (its vec_dot_type): rows against Q8_0 and Q4_0 weights
// become Q8_0 blocks, rows against Q4_K, Q5_K and Q6_K weights become Q8_K blocks.
//
// The rounding is ggml's reference definition, restated operation for operation in
// ISO C++ f32 (nothing fused or reordered), so it is the same on every CPU:
//   Q8_0 (quantize_row_q8_0_ref, also gguf-py's Q8_0 quantizer): per 32 elements,
//        amax = max |x|, d = amax / 127, id = d ? 1 / d : 0, q = roundf(x * id) (half
//        away from zero); d is stored as f16, and the dot products use that f16's value.
//   Q8_K (quantize_row_q8_K_ref): per 256 elements, max = the element of largest |x|
//        (the first such), iscale = -127 / max, q = min(127, nearest_int(iscale * x))
//        (half to even), d = 1 / iscale (f32); bsums = sums of each 16 q; all zero
//        when max is 0.
// Both give q in [-127, 127] (the integer kernels rely on it: no int16 saturation).
// Where ggml is undefined, for a block holding an infinity or a NaN, we make d NaN
// (so the products are NaN, as the f32 matmul's would be) and each such q 0.
//
// Pure functions over caller-owned memory; any thread.
#pragma once

#include <cstdint>

namespace tessera::cpu {

// One Q8_0 block of activations. d is the f32 value of ggml's f16 scale.
struct Q8Block {
  float d = 0;
  int8_t qs[32] = {};
};

// One Q8_K block of activations (ggml's block_q8_K).
struct Q8KBlock {
  float d = 0;
  int8_t qs[256] = {};
  int16_t bsums[16] = {};
};

// k / 32 blocks of x (k a multiple of 32).
void quantize_q8_0(const float* x, int64_t k, Q8Block* out);
// k / 256 blocks of x (k a multiple of 256).
void quantize_q8_K(const float* x, int64_t k, Q8KBlock* out);

}  // namespace tessera::cpu
