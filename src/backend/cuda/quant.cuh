// The CUDA kernels on weights kept in ggml's quantized blocks (DType kQ8_0, kQ4_0,
// kQ4_K, kQ5_K, kQ6_K; core/dtype.h), as backend/cpu/quant_matmul.h computes on
// them: each token's activations are rounded to 8 bits once a call, bitwise as the
// CPU rounds them (Q8_0 blocks against Q8_0/Q4_0 weights, Q8_K against the K types,
// ggml's reference rounding), then every weight row meets them in exact integer dot
// products (dp4a). Only the f32 steps that scale and add the integer sums are in an
// order of the GPU's own (quant_matmul.cu), which depends on the row's k alone: a
// token's outputs are bitwise the same alone as in any batch. Every pointer is
// device memory.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace tessera::cuda {

// Bytes of the scratch quant_matmul needs for `tokens` rows of k activations.
size_t quant_scratch_bytes(int64_t tokens, int64_t k);

// An RMSNorm of x's rows that quant_round applies as it reads them: bitwise
// rms_norm's (weight [k] in f32, bf16 or f16, on the device). No weight: none.
struct QuantNorm {
  const void* weight = nullptr;
  DType dtype = DType::kF32;
  float eps = 0.0f;
};

// Rounds x [tokens, k] (normalized by `norm` on the way) to 8 bits into the scratch,
// as weights in `dtype`'s blocks take them: Q8_0 blocks for Q8_0 and Q4_0, Q8_K
// blocks for the K types. One rounding serves every matmul of that x whose dtype
// quant_same_rounding says.
void quant_round(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, DType dtype, void* scratch,
                 const QuantNorm& norm = {});
// gate [tokens, k] = silu(gate) * up (bitwise silu_mul's), then rounded as
// quant_round rounds it: gate_up's gate and up, for the down matmul.
void quant_round_gated(cudaStream_t stream, float* gate, const float* up, int64_t tokens, int64_t k, DType dtype,
                       void* scratch);
inline bool quant_same_rounding(DType a, DType b) { return dtype_block_elements(a) == dtype_block_elements(b); }

// One matmul of quant_products: y [tokens, n] = x [tokens, k] * w [n, k]^T (+ bias
// [n], f32, when not null), w in the call's dtype (16-byte aligned, its bytes
// readable up to the next multiple of 16).
struct QuantJob {
  const void* w = nullptr;
  int64_t n = 0;
  const float* bias = nullptr;
  float* y = nullptr;
};
// The most matmuls one launch takes (q, k and v).
constexpr size_t kMaxQuantJobs = 3;

// Each job's y for x as quant_round left it in the scratch, all in one launch (each
// job's rows their own blocks: every output is bitwise what a launch of its job alone
// gives), for weights in `dtype`'s blocks with rows of k (a multiple of the block);
// with `accumulate`, y += that instead.
void quant_products(cudaStream_t stream, int64_t tokens, int64_t k, DType dtype, std::span<const QuantJob> jobs,
                    bool accumulate, void* scratch);

// A launch's jobs as the kernels read them (quant_matmul.cu, quant_mma.cu): job j takes
// the blocks from first[j] to the next job's first (or the launch's end); an unused
// job's first is the launch's blocks.
struct QuantJobs {
  const uint8_t* w[kMaxQuantJobs];
  const float* bias[kMaxQuantJobs];
  float* y[kMaxQuantJobs];
  int n[kMaxQuantJobs];
  unsigned first[kMaxQuantJobs];
};
// The jobs of a launch whose blocks take `rows` rows each for every one of `tiles` tiles
// of tokens, and its blocks (checked: blocks, rows, tokens and a row's bytes fit 31 bits).
QuantJobs quant_jobs(std::span<const QuantJob> each, int64_t rows, int64_t tiles, DType dtype, int64_t k,
                     int64_t tokens, int64_t& blocks);

// quant_products for up to 8 tokens on Q4_K blocks through the integer tensor cores
// (quant_mma.cu), bitwise the same outputs; false (nothing launched) for other dtypes,
// more tokens, or TESSERA_CUDA_QUANT_MMA=0. TESSERA_CUDA_QUANT_MMA=all takes Q8_0 and
// Q6_K there too (slower on the H200; benchmarks.md). Read at each call.
struct Acts;
bool quant_mma_products(cudaStream_t stream, int64_t tokens, int64_t k, DType dtype, std::span<const QuantJob> jobs,
                        bool accumulate, const Acts& a);

// y [count, hidden] = rows ids of a table in `dtype`'s blocks, dequantized bitwise as
// gguf-py (and cpu::dequantize_rows) dequantizes them; ids already checked.
void quant_embed(cudaStream_t stream, const void* table, DType dtype, int64_t hidden, const int32_t* ids, int64_t count,
                 float* y);

}  // namespace tessera::cuda
