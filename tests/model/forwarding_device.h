// A Device that hands every operation to a one-thread CPU device, for tests to
// override the one they watch or break (a place() that runs out of memory, a
// matmul that counts the weights it reads). The fused operations keep Device's
// defaults, so they reach the overridden primitives.
#pragma once

#include <memory>
#include <string>

#include "backend/device.h"

namespace tessera::testing {

class ForwardingDevice : public Device {
 public:
  std::string name() const override { return "forwarding"; }
  Result<Buffer> alloc(size_t bytes) override { return cpu_->alloc(bytes); }
  void upload(const void* host, size_t bytes, void* dst) override { cpu_->upload(host, bytes, dst); }
  void download(const void* src, size_t bytes, void* host) override { cpu_->download(src, bytes, host); }
  void copy(const void* src, size_t bytes, void* dst) override { cpu_->copy(src, bytes, dst); }
  Result<TensorView> place(const TensorView& host) override { return host; }
  void matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y) override {
    cpu_->matmul(x, tokens, w, bias, y);
  }
  void rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& w, float eps, float* y) override {
    cpu_->rms_norm(x, rows, dim, w, eps, y);
  }
  void embed(const TensorView& table, std::span<const int32_t> ids, float* y) override { cpu_->embed(table, ids, y); }
  void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0, const Rotary& rotary) override {
    cpu_->rope(x, tokens, heads, head_dim, pos0, rotary);
  }
  void kv_store(const KvPages& pages, int64_t layer, std::span<const int32_t> blocks, int64_t pos0, int64_t tokens,
                const float* k, const float* v) override {
    cpu_->kv_store(pages, layer, blocks, pos0, tokens, k, v);
  }
  void attention(const AttentionArgs& args) override { cpu_->attention(args); }
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override {
    cpu_->silu_mul(gate, up, n, out);
  }
  void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) override {
    cpu_->gelu_tanh_mul(gate, up, n, out);
  }
  void scale(float* x, int64_t n, float factor) override { cpu_->scale(x, n, factor); }
  void add(const float* x, int64_t n, float* y) override { cpu_->add(x, n, y); }
  void gather_rows(const float* x, std::span<const int32_t> rows, int64_t dim, float* y) override {
    cpu_->gather_rows(x, rows, dim, y);
  }
  void scatter_add_rows(const float* x, const float* scale, std::span<const int32_t> rows, int64_t dim,
                        float* y) override {
    cpu_->scatter_add_rows(x, scale, rows, dim, y);
  }

 private:
  std::unique_ptr<Device> cpu_ = make_cpu_device(1);
};

}  // namespace tessera::testing
