// Matmul on weights kept in ggml's quantized blocks (DType kQ8_0, kQ4_0, kQ4_K,
// kQ5_K, kQ6_K; core/dtype.h), on the CPU, with run-time ISA dispatch (Highway).
//
// Exact by design: each block is dequantized to f32 exactly as gguf-py's NumPy
// dequantizer does (bitwise; io/gguf_quant.h is the reference the tests hold it
// to), and the f32 values are multiplied with f32 activations in the order the
// f32 matmul states (matmul.cpp: L lanes of fused multiply-adds along k, the
// lanes added as a halving tree; k is a whole number of blocks, so no tail).
// So every output is bitwise what cpu::matmul_rows gives on the dequantized f32
// rows, whatever the number of tokens or threads: a token's row is the same alone
// (decode) as in any batch (prefill). The activations are not quantized (llama.cpp
// rounds them to 8 bits for its integer dot products; we chose exactness and batch
// invariance over that speed-up).
//
// Three paths, one order:
//   - 1 token (decode): each block's values unpacked as bytes, widened and multiplied at
//     once, so the weights stream through once, at their quantized size;
//   - 2..15 tokens: a few rows at a time dequantized to f32 scratch, then matmul_rows;
//   - 16 tokens and more: x packed once for all threads (matmul_pack_x), then rows
//     dequantized a few at a time and multiplied by the f32 GEMM (matmul_rows_packed).
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

// y[n] = sum_i x[i] * w[n, i] for n < rows: one token against `rows` quantized rows.
void quant_matvec(const float* x, int64_t k, const void* w, DType dtype, int64_t rows, float* y);

// y [tokens, N] = x [tokens, K] * w [N, K]^T for a quantized w, split over the pool's
// threads by rows (the paths above). Bitwise the same at any thread count.
void quant_matmul(ThreadPool& pool, const float* x, int64_t tokens, const TensorView& w, float* y);

}  // namespace tessera::cpu
