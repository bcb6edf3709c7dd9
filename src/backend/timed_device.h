// TimedDevice: a Device that runs every call on another device and adds up, for each of
// the interface's operations, the wall time its calls took and how many there were
// (`tessera bench --profile`: where a decode step's time goes). Calls go straight to the
// other device, so every result is its own, bit for bit; an operation that the other
// device builds from others (a default such as matmuls calling matmul) counts once, as
// itself. Times mean something only on a device that computes in its calls
// (computes_in_calls: the CPU); a GPU's calls return before their work is done.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/device.h"

namespace tessera {

class TimedDevice final : public Device {
 public:
  explicit TimedDevice(Device& inner) : inner_(inner) {}

  struct Op {
    const char* name;
    double seconds;
    int64_t calls;
  };
  // The operations called since construction or reset(), in the interface's order.
  std::vector<Op> ops() const;
  void reset();

  std::string name() const override { return inner_.name(); }
  uint64_t available_memory() const override { return inner_.available_memory(); }
  double measure_bf16_peak() override { return inner_.measure_bf16_peak(); }
  Result<Buffer> alloc(size_t bytes) override { return inner_.alloc(bytes); }
  void begin_step() override { inner_.begin_step(); }
  void end_step() override { inner_.end_step(); }
  int64_t steps_as_graphs() const override { return inner_.steps_as_graphs(); }
  bool computes_in_calls() const override { return inner_.computes_in_calls(); }

  void upload(const void* host, size_t bytes, void* dst) override;
  void download(const void* src, size_t bytes, void* host) override;
  void copy(const void* src, size_t bytes, void* dst) override;
  Result<TensorView> place(const TensorView& host) override;
  void matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y) override;
  void rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& weight, float eps, float* y) override;
  void embed(const TensorView& table, std::span<const int32_t> ids, float* y) override;
  void rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0, const Rotary& rotary) override;
  void kv_store(const KvPages& pages, int64_t layer, std::span<const int32_t> blocks, int64_t pos0, int64_t tokens,
                const float* k, const float* v) override;
  void attention(const AttentionArgs& args) override;
  void attend(const AttendArgs& args) override;
  void matmul_add(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* scratch, float* y,
                  const RowNorm& next) override;
  void matmuls(const float* x, int64_t tokens, std::span<const Projection> outs, const RowNorm& norm) override;
  void project_attend(const float* x, int64_t tokens, std::span<const Projection, 3> qkv, const RowNorm& norm,
                      const AttendArgs& args) override;
  void matmuls_each(int64_t tokens, std::span<const float* const> xs, std::span<const Projection> outs) override;
  void gate_up(const float* x, int64_t tokens, const TensorView& w_gate, const TensorView& b_gate,
               const TensorView& w_up, const TensorView& b_up, float* up, float* out, const RowNorm& norm) override;
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override;
  void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) override;
  void scale(float* x, int64_t n, float factor) override;
  void add(const float* x, int64_t n, float* y) override;
  void gather_rows(const float* x, std::span<const int32_t> rows, int64_t dim, float* y) override;
  void scatter_add_rows(const float* x, const float* scale, std::span<const int32_t> rows, int64_t dim,
                        float* y) override;
  bool route_experts(const float* logits, int64_t tokens, const ExpertRouting& routing, const TensorView& bias,
                     int32_t* experts, float* weights) override;
  bool run_experts(const float* x, int64_t tokens, const ExpertRouting& routing, int32_t* experts, float* weights,
                   const ExpertWeights& w, float* out, const ExpertStep& step) override;
  void argmax(const float* x, int64_t rows, int64_t n, int32_t* y) override;

 private:
  enum Kind {
    kUpload,
    kDownload,
    kCopy,
    kPlace,
    kMatmul,
    kRmsNorm,
    kEmbed,
    kRope,
    kKvStore,
    kAttention,
    kAttend,
    kMatmulAdd,
    kMatmuls,
    kProjectAttend,
    kMatmulsEach,
    kGateUp,
    kSiluMul,
    kGeluTanhMul,
    kScale,
    kAdd,
    kGatherRows,
    kScatterAddRows,
    kRouteExperts,
    kRunExperts,
    kArgmax,
    kKinds
  };
  // Runs call() on the inner device, its time and one call added to `kind`'s.
  template <typename Call>
  auto timed(Kind kind, Call&& call);

  Device& inner_;
  std::array<double, kKinds> seconds_{};
  std::array<int64_t, kKinds> calls_{};
};

}  // namespace tessera
