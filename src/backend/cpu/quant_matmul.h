// Matmul on weights kept in ggml's quantized blocks (DType kQ8_0, kQ4_0, kQ4_K,
// kQ5_K, kQ6_K; core/dtype.h), on the CPU, with run-time ISA dispatch (Highway).
//
// As llama.cpp's CPU backend computes it: each token's activations are rounded to 8
// bits once a call (quant_act.h: Q8_0 blocks against Q8_0/Q4_0 weights, Q8_K against
// the K types, ggml's reference rounding), then each weight row meets them in integer
// dot products (quant_dot.h), whose one stated order of f32 steps makes every output
// the same bits on every instruction set. A token's outputs depend only on its own
// row: bitwise the same alone (decode) as in any batch (prefill), at any thread count.
// The results are not those of the f32 matmul of the dequantized weights (the
// activations are rounded); tests/backend/quant_matmul_test.cpp holds them to gguf-py's
// dequantized weights times the rounded activations.
//
// dequantize_rows gives the f32 values of blocks bitwise as gguf-py's dequantizer
// (io/gguf_quant.h is the reference the tests hold it to); the embedding lookup uses it.
//
// Pure functions over caller-owned memory, except quant_matmul, quant_matmuls and
// quant_gate_up, which run on the pool of the one inference thread that owns it (as
// CpuDevice::matmul).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "core/dtype.h"
#include "core/tensor.h"
#include "core/thread_pool.h"

namespace tessera::cpu {

// out [rows, k] = the f32 values of `rows` rows of k elements each (k a multiple of
// dtype_block_elements) of a quantized `dtype`, bitwise gguf-py's dequantizer.
void dequantize_rows(const void* w, DType dtype, int64_t rows, int64_t k, float* out);

// y [tokens, N] = x [tokens, K] * w [N, K]^T for a quantized w (N rows of K elements),
// with x rounded as above; split over the pool's threads by rows.
void quant_matmul(ThreadPool& pool, const float* x, int64_t tokens, const TensorView& w, float* y);

// Several quantized weights of one x (a lone token's q, k and v): outs[i].y [tokens,
// N_i] = x * outs[i].w^T, each bitwise what quant_matmul gives it, in one parallel
// region: x is rounded once for each kind of activations among the weights
// (quant_act_of), and the rows of all the weights are dealt out together, so a decode
// step pays one hand-off between the threads where it paid one a weight.
struct QuantProjection {
  const TensorView* w = nullptr;
  float* y = nullptr;
};
void quant_matmuls(ThreadPool& pool, const float* x, int64_t tokens, std::span<const QuantProjection> outs);

// Rows [begin, end) of one token's gate and up, combined into out (out may be gate).
using RowsCombine = std::function<void(const float* gate, const float* up, int64_t begin, int64_t end, float* out)>;

// out [tokens, N] = combine(x * w_gate^T, x * w_up^T) in one parallel region: x rounded
// once (when both weights take the same kind of activations), each thread computes
// the same rows of gate (into out) and up (into the scratch `up` [tokens, N]) and then
// combines those rows of every token at once. Each gate and up value is bitwise
// quant_matmul's, so out is what the two matmuls and then combine over every row give.
void quant_gate_up(ThreadPool& pool, const float* x, int64_t tokens, const TensorView& w_gate, const TensorView& w_up,
                   float* up, float* out, const RowsCombine& combine);

}  // namespace tessera::cpu
