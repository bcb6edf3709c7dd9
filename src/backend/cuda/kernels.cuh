// The CUDA device's kernels, as launch functions on a stream. Every pointer is
// device memory. Activations are f32; weights and KV pages are f32, bf16 or f16.
//
// Batch invariance by construction: every output element is computed by one
// thread or one warp in an order fixed by its own shape (k, head_dim, its
// position), never by how many rows, tokens or sequences share the launch. No
// kernel uses atomics, and no reduction is split by the size of the batch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/device.h"

namespace tessera::cuda {

// y [tokens, n] = x [tokens, k] * w [n, k]^T (+ bias [n] when bias is not null);
// with `accumulate`, y += that instead (the same sum, then one add).
void matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t n,
            const void* bias, DType bias_dtype, float* y, bool accumulate);
// Whether mma_matmul takes this weight (bf16 with k a multiple of 64; the choice
// depends on the weight alone, never on the tokens).
bool mma_matmul_fits(DType w_dtype, int64_t k);
// Where each token of a launch sits, in device memory: pos[t] is its position and
// tables + table[t] its sequence's block table.
struct TokenMap {
  const int32_t* pos = nullptr;
  const int32_t* table = nullptr;
  const int32_t* tables = nullptr;
};
// A step's rope and KV store done by its q/k/v matmul (MmaJob::rope: mma_matmul's
// epilogue for up to 8 tokens, mma_gemm's addition of the split sums for many): q's
// (y[0]) and k's (y[1]) heads turned at each token's position (rotate-half over the
// whole head), then k and v (y[2]) stored into `layer` of the pages (bf16 or f16),
// bitwise what rope_store does after the matmuls (mma_rope_fits says when it can).
struct RopeStore {
  const float* inv_freq = nullptr;  // null: no rope, no store
  float scaling = 1.0f;
  int64_t head_dim = 0;
  KvPages pages{};
  int64_t layer = 0;
  TokenMap map{};
};
// Work for the tensor-core matmul (mma_matmul.cu): up to three bf16 weights of
// the same k and their outputs, y[s] [tokens, n[s]] = x * w[s]^T (+ bias[s]), in
// one launch; with `accumulate`, y[s] += that. With `gate_up`, w[0] is a gate
// and w[1] an up projection of n[0] rows each, and y[0] = silu(gate) * up.
// Each output is bitwise what a launch of its weight alone (and silu_mul) gives.
// With `norm` (when mma_norm_fits), x's rows are RMS-normalized as they load,
// bitwise as rms_norm writes them.
struct MmaJob {
  static constexpr int kMaxWeights = 3;
  const __nv_bfloat16* w[kMaxWeights] = {};
  const __nv_bfloat16* bias[kMaxWeights] = {};
  float* y[kMaxWeights] = {};
  int64_t n[kMaxWeights] = {};
  int64_t first_tile[kMaxWeights + 1] = {};  // set by mma_matmul
  int count = 0;
  bool accumulate = false;
  bool gate_up = false;
  const __nv_bfloat16* norm = nullptr;  // the RMSNorm's weight [k]
  float eps = 0.0f;
  // mma_gemm only, one weight or gate_up: y[0] also rounded to bf16 here [tokens, n[0]],
  // as mma_gemm rounds its x and in its order (mma.cuh's mma_slot), so a tiled matmul
  // of y[0] next need not round it again.
  __nv_bfloat16* y_bf16 = nullptr;
  // mma_gemm only, a job of one weight added to y (accumulate): y[0] after the
  // addition also RMS-normalized by next_norm and rounded to bf16 into next_x
  // [tokens, n[0]], bitwise what a normalizing mma_gemm of y[0] would round, when
  // the launch that adds the split sums can do it (mma_gemm returns whether it did).
  const __nv_bfloat16* next_norm = nullptr;
  float next_eps = 0.0f;
  __nv_bfloat16* next_x = nullptr;
  RopeStore rope{};  // q, k and v (count 3), where mma_rope_fits
};
// Whether the bf16 matmuls (mma_matmul for up to 8 tokens, mma_gemm for many when it
// splits the sums) can take a q/k/v job's rope and KV store (MmaJob::rope) for
// `tokens` tokens of length k: q rows n_q and k, v rows n_kv, whole heads of head_dim.
bool mma_rope_fits(int64_t tokens, int64_t k, int64_t n_q, int64_t n_kv, const KvPages& pages, const Rotary& rotary);
// Whether the matmul normalizes x itself for this job: mma_matmul as it loads
// (up to 8 tokens, a chunk of k for each warp), or mma_gemm as it rounds x to
// bf16 (mma_gemm_min_tokens() and more); TESSERA_CUDA_NORM_IN_MATMUL=0 says
// never, to measure it.
bool mma_norm_fits(int64_t tokens, int64_t k);
void mma_matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, MmaJob job);
// The device's SMs (of the current device, asked once).
int multiprocessors();
// The same job for many tokens (at least mma_gemm_min_tokens()) from tiles staged
// in shared memory (mma_gemm.cu), each output bitwise what mma_matmul gives it;
// `scratch` holds mma_gemm_scratch(tokens, k, job) bytes. `x_rounded`, when not
// null, is x already rounded to bf16 in mma_slot order (a job's y_bf16 or next_x,
// or attention_combine's `rounded`): the launch that would round it is skipped,
// and the job must not normalize. Returns whether it wrote job.next_x.
int64_t mma_gemm_min_tokens();
size_t mma_gemm_scratch(int64_t tokens, int64_t k, const MmaJob& job);
// Whether mma_gemm can write job.next_x for this job (given next_norm and next_x):
// one weight added to y whose eight sums the blocks split (few tokens, few rows).
bool mma_gemm_normalizes_ahead(int64_t tokens, int64_t k, const MmaJob& job);
// Whether mma_gemm's blocks split this job's eight sums (few tokens, few rows).
bool mma_gemm_splits(int64_t tokens, int64_t k, const MmaJob& job);
bool mma_gemm(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const MmaJob& job, void* scratch,
              const __nv_bfloat16* x_rounded = nullptr);
// FLOP/s of mma.sync m16n8k16 (bf16, f32 accumulators) over every SM, registers
// only: the best of three timed launches (Device::measure_bf16_peak).
double mma_peak(cudaStream_t stream);
// y = x / sqrt(mean(x^2) + eps) * weight, per row of `dim`.
void rms_norm(cudaStream_t stream, const float* x, int64_t rows, int64_t dim, const void* weight, DType weight_dtype,
              float eps, float* y);
// y [ids, hidden] = table[id]; ids already checked against the vocabulary.
void embed(cudaStream_t stream, const void* table, DType dtype, int64_t hidden, const int32_t* ids, int64_t count,
           float* y);
// Rope (Rotary: rotate-half or interleaved, partial, scaled) of q [tokens, q_heads,
// head_dim] and k [tokens, kv_heads, head_dim] in place at each token's position
// (none when rotary.inv_freq is null), then
// k and v [tokens, kv_heads, head_dim] stored into `layer` of the pages (none when
// pages is null), rounded to the pages' dtype (attend.cu).
void rope_store(cudaStream_t stream, float* q, int64_t q_heads, float* k, const float* v, int64_t kv_heads,
                int64_t head_dim, const KvPages* pages, int64_t layer, int64_t tokens, TokenMap map,
                const Rotary& rotary);
// The partitions attention splits `visible` positions into.
int64_t attention_partitions(int64_t visible);
// Paged causal (optionally sliding-window) attention of q [tokens, n_heads,
// head_dim] into out; `partitions` is the most any token needs, and scratch holds
// f32 [tokens, n_heads, partitions, head_dim + 2] (attend.cu).
void attention(cudaStream_t stream, const float* q, float* out, int64_t tokens, int64_t n_heads, const KvPages& p,
               int64_t layer, TokenMap map, int64_t window, float scale, int64_t partitions, float* scratch);
// The tensor-core attention (mma_attention.cu) for pages of bf16 or f16, head_dim
// 64 or 128 and no sliding window: when it fits a layer, every token of that
// layer takes it. A ColumnBlock is up to mma_attention_tokens_per_block()
// consecutive tokens of one sequence (launch-relative indices). For prompt chunks
// whose launch has enough blocks, each takes every partition of its tokens and writes out
// (and `rounded`, as attention_combine does) itself; else each block writes the
// same partial outputs into scratch as attention's first kernel, and
// attention_combine merges them. Either way the same bits (merge.cuh).
struct ColumnBlock {
  int32_t first = 0, tokens = 0;
  int32_t fresh = 0;  // the first position of its sequence that this step writes (keys below it are older)
};
bool mma_attention_fits(const KvPages& p, int64_t n_heads, int64_t window);
int64_t mma_attention_tokens_per_block(int64_t n_heads, int64_t n_kv_heads);
// Whether a launch of `count` column blocks of `tokens` tokens seeing up to
// `partitions` partitions takes the whole (writes out itself, no scratch).
bool mma_attention_whole(int64_t partitions, int64_t count, int64_t tokens, int64_t n_kv_heads, int64_t head_dim);
void mma_attention(cudaStream_t stream, const float* q, int64_t n_heads, const KvPages& p, int64_t layer, TokenMap map,
                   float scale, int64_t partitions, const ColumnBlock* column_blocks, int64_t count, int64_t tokens,
                   float* scratch, float* out, __nv_bfloat16* rounded);
// Merges each token's partitions from scratch into out (attend.cu), and into
// `rounded` rounded to bf16 as well when it is not null (mma_gemm's x_rounded, in
// mma_slot order).
void attention_combine(cudaStream_t stream, float* out, int64_t tokens, int64_t n_heads, int64_t head_dim, TokenMap map,
                       int64_t window, int64_t partitions, const float* scratch, __nv_bfloat16* rounded = nullptr);
void silu_mul(cudaStream_t stream, const float* gate, const float* up, int64_t n, float* out);
void gelu_tanh_mul(cudaStream_t stream, const float* gate, const float* up, int64_t n, float* out);
void scale(cudaStream_t stream, float* x, int64_t n, float factor);
void add(cudaStream_t stream, const float* x, int64_t n, float* y);
// Mixture of experts (Device::gather_rows, scatter_add_rows); `rows` in device memory.
void gather_rows(cudaStream_t stream, const float* x, const int32_t* rows, int64_t count, int64_t dim, float* y);
void scatter_add_rows(cudaStream_t stream, const float* x, const float* scale, const int32_t* rows, int64_t count,
                      int64_t dim, float* y);
// y[r] = the first index of the largest value of row r of x [rows, n] (Device::argmax).
void argmax(cudaStream_t stream, const float* x, int64_t rows, int64_t n, int32_t* y);

}  // namespace tessera::cuda
