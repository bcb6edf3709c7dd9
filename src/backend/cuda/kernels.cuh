// The CUDA device's kernels, as launch functions on a stream. Every pointer is
// device memory. Activations are f32; weights and KV pages are f32, bf16 or f16.
//
// Batch invariance by construction: every output element is computed by one
// thread or one warp in an order fixed by its own shape (k, head_dim, its
// position), never by how many rows, tokens or sequences share the launch. No
// kernel uses atomics, and no reduction is split by the size of the batch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/device.h"

namespace tessera::cuda {

// y [tokens, n] = x [tokens, k] * w [n, k]^T (+ bias [n] when bias is not null).
void matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t n,
            const void* bias, DType bias_dtype, float* y);
// Whether mma_matmul takes this weight (bf16 with k a multiple of 64; the choice
// depends on the weight alone, never on the tokens).
bool mma_matmul_fits(DType w_dtype, int64_t k);
// matmul on tensor cores (mma_matmul.cu).
void mma_matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, int64_t n,
                const void* bias, float* y);
// y = x / sqrt(mean(x^2) + eps) * weight, per row of `dim`.
void rms_norm(cudaStream_t stream, const float* x, int64_t rows, int64_t dim, const void* weight, DType weight_dtype,
              float eps, float* y);
// y [ids, hidden] = table[id]; ids already checked against the vocabulary.
void embed(cudaStream_t stream, const void* table, DType dtype, int64_t hidden, const int32_t* ids, int64_t count,
           float* y);
// Rotate-half rope of x [tokens, heads, head_dim] in place at positions pos0...
void rope(cudaStream_t stream, float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0,
          const float* inv_freq);
// k, v f32 [tokens, n_kv_heads, head_dim] into the pages at positions [pos0, pos0 + tokens).
void kv_store(cudaStream_t stream, const KvPages& pages, int64_t layer, const int32_t* blocks, int64_t pos0,
              int64_t tokens, const float* k, const float* v);
// Paged causal attention; `blocks` is the sequence's block table in device memory.
void attention(cudaStream_t stream, const AttentionArgs& args, const int32_t* blocks);
void silu_mul(cudaStream_t stream, const float* gate, const float* up, int64_t n, float* out);
void add(cudaStream_t stream, const float* x, int64_t n, float* y);

}  // namespace tessera::cuda
