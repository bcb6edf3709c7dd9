// CpuDevice: the Device interface on the host CPU. Its memory is host memory:
// buffers of 1 MiB and more are anonymous mappings, so a KV pool sized by a
// budget costs only the pages its sequences touch. Large operations are split
// across a ThreadPool by output rows (matmul: chunks of rows taken by whichever thread
// is free; prefill first packs x once, split by tokens, and the weights of one x, q/k/v
// or gate/up, share that x and one region: gemm_together) or by tiles of tokens and
// heads (attention.h: chunks of them taken likewise, the last tile's first, or a few
// long ones in steps that all threads share); each output element is computed by
// exactly one thread in a fixed order, so results depend neither on the thread count
// nor on which thread took it.
#pragma once

#include "backend/device.h"
#include "core/thread_pool.h"

namespace tessera {

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(size_t threads);

  std::string name() const override;
  bool computes_in_calls() const override { return true; }
  Result<Buffer> alloc(size_t bytes) override;
  void upload(const void* host, size_t bytes, void* dst) override;
  void download(const void* src, size_t bytes, void* host) override;
  void copy(const void* src, size_t bytes, void* dst) override;
  // A 2-D weight of f32, bf16 or f16 whose rows can be interleaved (weight_layout.h) in
  // groups of cpu::matmul_row_group: a copy in that layout, kept by the device (one decode
  // tile then reads one stream), while 2 GiB stay available after it; anything else: the
  // view itself (of the mapped file).
  Result<TensorView> place(const TensorView& host) override;

  void matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y) override;
  // A few tokens (decode) through f32, bf16 or f16 weights, or any tokens through
  // GGUF blocks (quant_matmuls: x rounded once): the rows of all the weights dealt out
  // in one parallel region (a lone token's q, k and v, its top_k experts' gates and
  // ups, or their downs), each output bitwise what matmul gives it. Prefill through
  // f32, bf16 or f16 weights of one k: one GEMM region over x packed once
  // (gemm_together). Everything runs one matmul a weight when TESSERA_MATMULS_TOGETHER=0
  // (read once; for measuring one against the other).
  void matmuls(const float* x, int64_t tokens, std::span<const Projection> outs, const RowNorm& norm = {}) override;
  void matmuls_each(int64_t tokens, std::span<const float* const> xs, std::span<const Projection> outs) override;
  // GGUF blocks without biases: gate and up in one region, each thread applying
  // silu_mul to the rows it computed (quant_gate_up); a prefill through f32, bf16 or f16
  // weights: gate and up in one GEMM region (gemm_together), then silu_mul; bitwise the
  // default's calls. Others, and everything when TESSERA_MATMULS_TOGETHER=0, take the
  // default.
  void gate_up(const float* x, int64_t tokens, const TensorView& w_gate, const TensorView& b_gate,
               const TensorView& w_up, const TensorView& b_up, float* up, float* out, const RowNorm& norm) override;
  void rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& weight, float eps, float* y) override;
  void embed(const TensorView& table, std::span<const int32_t> ids, float* y) override;
  void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0, const Rotary& rotary) override;
  void kv_store(const KvPages& pages, int64_t layer, std::span<const int32_t> blocks, int64_t pos0, int64_t tokens,
                const float* k, const float* v) override;
  void attention(const AttentionArgs& args) override;
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override;
  void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) override;
  void scale(float* x, int64_t n, float factor) override;
  void add(const float* x, int64_t n, float* y) override;
  // In place, in vectors (the default copies the rows first): a decode step's LM head
  // row is 150k floats on Qwen's vocabularies.
  void argmax(const float* x, int64_t rows, int64_t n, int32_t* y) override;
  void gather_rows(const float* x, std::span<const int32_t> rows, int64_t dim, float* y) override;
  void scatter_add_rows(const float* x, const float* scale, std::span<const int32_t> rows, int64_t dim,
                        float* y) override;

  ThreadPool& pool() { return pool_; }

 private:
  // y [tokens, n] += bias (matmul's last step), when bias is non-empty.
  void add_bias(int64_t tokens, const TensorView& bias, int64_t n, float* y);
  // Whether matmuls and matmuls_each take all of outs in one region (tiles_together).
  bool together(int64_t tokens, std::span<const Projection> outs) const;
  // Whether matmuls (and gate_up) take outs, all GGUF blocks, in one region (quant_matmuls).
  static bool quantized_together(std::span<const Projection> outs);
  void tiles_together(int64_t tokens, std::span<const float* const> xs, std::span<const Projection> outs);
  // Whether matmuls and gate_up take outs in gemm_together (a prefill's x, one k and dtype).
  static bool gemms_together(int64_t tokens, std::span<const Projection> outs);
  // Prefill's GEMM of one x by every weight of outs (one k and dtype) in one parallel
  // region, x packed once for all of them.
  void gemm_together(const float* x, int64_t tokens, std::span<const Projection> outs);
  // Whether attention over these pages takes cpu::amx::attend (a bf16 cache on a CPU with
  // the tiles), and so kv_store writes their keys and values in cpu::amx::store_key's and
  // store_value's layouts.
  static bool amx_attention(const KvPages& pages);

  ThreadPool pool_;
  // The weights place() copied.
  std::vector<Buffer> placed_;
  // x of the last prefill matmul, packed for the GEMM and shared by the threads; grows
  // to the largest call's size and is kept (one inference thread calls matmul).
  Buffer packed_x_;
};

}  // namespace tessera
