// Integer dot products of quantized weight rows (DType kQ8_0, kQ4_0, kQ4_K, kQ5_K,
// kQ6_K) with activation rows rounded to 8 bits (quant_act.h), as ggml's CPU matmul
// computes them (ggml_vec_dot_<type>_q8_<0|K>), with run-time ISA dispatch (Highway;
// AVX2 and AVX-512 targets use vpmaddubsw/vpmaddwd, others plain integer loops).
//
// One order, stated so that every path and every instruction set gives the same bits.
// A row's k elements are split into units, each with one float scale: a block of 32
// for Q8_0 and Q4_0 (activations Q8_0), a super-block of 256 for the K types
// (activations Q8_K); D = d_w * d_x (f32).
// Each row keeps one f32 accumulator, acc = 0, and for each unit in order
//   Q8_0: acc = fma(D, float(P), acc),  P = sum over the unit's 32 elements of q x
//   Q4_0: acc = fma(D, float(P), acc),  P = sum over the unit's 32 elements of (q - 8) x
//   Q4_K, Q5_K: acc = fma(D, float(P), acc), then acc = fma(-(dmin_w * d_x), float(M), acc),
//         P = sum over sub-blocks j of sc_j * (sum of its 32 q x) (q unsigned: 4 bits, or 5),
//         M = sum_j min[j] * (bsums[2 j] + bsums[2 j + 1])
//   Q6_K: acc = fma(D, float(P), acc),
//         P = sum over its 16 sub-blocks g of sc_g * (sum of its 16 (q - 32) x)
// (exact integers; ggml's reference adds a block's sum the same way), so that a vector's
// lanes can be 16 rows (quant_groups.cpp's kernels, rows in weight_layout.h's kQuantGroup
// layout), and an AMX-INT8 tile product 16 rows x 16 tokens of P (amx_int8_kernel.h). Q8_0's
// and Q4_0's rows are placed in those groups (rows left plain go through them a group
// copied at a time); the K types' rows stay as mapped and take quant_dot.cpp's row kernels
// for a few tokens (each unit's 8 int32 lanes added, then the same steps) and
// quant_groups.cpp's kernels, a group copied at a time, for more (quant_dot_rows).
// So a token's output depends only on its own row: the same alone (decode) as among
// any others (prefill), at any thread count, on every instruction set.
//
// Pure function over caller-owned memory; any thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cpu/amx.h"
#include "core/dtype.h"

namespace tessera::cpu {

// How activations are rounded for weights of a dtype: Q8_0 blocks (Q8_0 and Q4_0
// weights) or Q8_K ones (the K types). Weights of one kind can share a rounded x.
enum class QuantAct { kQ8_0, kQ8_K };
QuantAct quant_act_of(DType dtype);

// Bytes of one token's activations rounded for weights of `dtype` (k elements):
// k / 32 Q8Block or k / 256 Q8KBlock.
size_t quant_act_bytes(DType dtype, int64_t k);

// Rounds `tokens` rows of k activations (k apart) for weights of `dtype` into xq
// (quant_act_bytes(dtype, k) a token).
void quantize_activations(DType dtype, const float* x, int64_t tokens, int64_t k, void* xq);

// y[t * ldy + r] = the dot product above of weight row r (of `rows`, dtype_bytes(dtype,
// k) apart from w, or with `group` kQuantGroup rows of a type in weight_layout.h's groups) with
// token t's rounded activations (of `tokens` in xq). packed: xq's first tokens (a multiple of
// 16) packed once for AMX-INT8 tiles (amx.h), when placed Q8_0 or Q4_0 takes them (quant_groups.h).
void quant_dot_rows(DType dtype, const void* w, int64_t rows, int64_t k, const void* xq, int64_t tokens, float* y,
                    int64_t ldy, int64_t group = 1, const amx::PackedX* packed = nullptr);

}  // namespace tessera::cpu
