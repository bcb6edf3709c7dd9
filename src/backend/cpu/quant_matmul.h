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
// Pure functions over caller-owned memory, except quant_matmul, which runs on the
// pool of the one inference thread that owns it (as CpuDevice::matmul).
#pragma once

#include <cstdint>

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

}  // namespace tessera::cpu
