// The end of a q/k/v job with MmaJob::rope, shared by the kernels that take it
// (mma_matmul.cu's decode epilogue and mma_gemm.cu's addition of split sums): a
// pair of rope's rows of one token turned and stored, bitwise what the matmuls
// and then rope_store give.
#pragma once

#include <cstdint>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"

namespace tessera::cuda {

// A 16-bit KV element of pages of bf16 or f16 (mma_rope_fits).
__device__ __forceinline__ uint16_t kv_bits(DType dtype, float v) {
  return dtype == DType::kBF16 ? narrow<DType::kBF16>(v) : narrow<DType::kF16>(v);
}

// Weight s's rows row_a and row_b = row_a + head_dim / 2 of one token, whose
// finished sums (with the bias) are a and b: q's (s 0) and k's (s 1) pair turned at
// the token's position as rope_store turns it, written to y[s], then k's and v's
// (s 2) stored into the pages.
__device__ __forceinline__ void rope_store_pair(const MmaJob& job, int s, int64_t token, int64_t row_a, int64_t row_b,
                                                float a, float b) {
  const RopeStore& r = job.rope;
  const KvPages& p = r.pages;
  const int64_t n = job.n[s], hd = r.head_dim;
  const int64_t pos = r.map.pos[token];
  if (s < 2) rotate_pair(a, b, static_cast<float>(pos), r.inv_freq[row_a % hd], r.scaling);
  job.y[s][token * n + row_a] = a;
  job.y[s][token * n + row_b] = b;
  if (s == 0) return;
  const int64_t block = r.map.tables[r.map.table[token] + pos / p.block_size], at = (pos % p.block_size) * hd;
  auto* base = static_cast<uint16_t*>(p.base);
  base[kv_offset(p, block, r.layer, s - 1, row_a / hd) + at + row_a % hd] = kv_bits(p.dtype, a);
  base[kv_offset(p, block, r.layer, s - 1, row_b / hd) + at + row_b % hd] = kv_bits(p.dtype, b);
}

}  // namespace tessera::cuda
