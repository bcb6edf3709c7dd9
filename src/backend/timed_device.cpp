#include "backend/timed_device.h"

#include <chrono>
#include <utility>

namespace tessera {
namespace {

// Kind's names, in its order.
constexpr const char* kNames[] = {"upload",      "download",         "copy",          "place",
                                  "matmul",      "rms_norm",         "embed",         "rope",
                                  "kv_store",    "attention",        "attend",        "matmul_add",
                                  "matmuls",     "project_attend",   "matmuls_each",  "gate_up",
                                  "silu_mul",    "gelu_tanh_mul",    "scale",         "add",
                                  "gather_rows", "scatter_add_rows", "route_experts", "run_experts",
                                  "argmax"};

}  // namespace

template <typename Call>
auto TimedDevice::timed(Kind kind, Call&& call) {
  static_assert(std::size(kNames) == kKinds);
  const auto start = std::chrono::steady_clock::now();
  struct Add {  // after the call, whatever it returns
    TimedDevice& d;
    Kind kind;
    std::chrono::steady_clock::time_point start;
    ~Add() {
      d.seconds_[kind] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      ++d.calls_[kind];
    }
  } add{*this, kind, start};
  return std::forward<Call>(call)();
}

std::vector<TimedDevice::Op> TimedDevice::ops() const {
  std::vector<Op> out;
  for (int k = 0; k < kKinds; ++k)
    if (calls_[k] > 0) out.push_back({kNames[k], seconds_[k], calls_[k]});
  return out;
}

void TimedDevice::reset() {
  seconds_.fill(0);
  calls_.fill(0);
}

void TimedDevice::upload(const void* host, size_t bytes, void* dst) {
  timed(kUpload, [&] { inner_.upload(host, bytes, dst); });
}
void TimedDevice::download(const void* src, size_t bytes, void* host) {
  timed(kDownload, [&] { inner_.download(src, bytes, host); });
}
void TimedDevice::copy(const void* src, size_t bytes, void* dst) {
  timed(kCopy, [&] { inner_.copy(src, bytes, dst); });
}
Result<TensorView> TimedDevice::place(const TensorView& host) {
  return timed(kPlace, [&] { return inner_.place(host); });
}
void TimedDevice::matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y) {
  timed(kMatmul, [&] { inner_.matmul(x, tokens, w, bias, y); });
}
void TimedDevice::rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& weight, float eps, float* y) {
  timed(kRmsNorm, [&] { inner_.rms_norm(x, rows, dim, weight, eps, y); });
}
void TimedDevice::embed(const TensorView& table, std::span<const int32_t> ids, float* y) {
  timed(kEmbed, [&] { inner_.embed(table, ids, y); });
}
void TimedDevice::rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0, const Rotary& rotary) {
  timed(kRope, [&] { inner_.rope(x, tokens, heads, head_dim, pos0, rotary); });
}
void TimedDevice::kv_store(const KvPages& pages, int64_t layer, std::span<const int32_t> blocks, int64_t pos0,
                           int64_t tokens, const float* k, const float* v) {
  timed(kKvStore, [&] { inner_.kv_store(pages, layer, blocks, pos0, tokens, k, v); });
}
void TimedDevice::attention(const AttentionArgs& args) {
  timed(kAttention, [&] { inner_.attention(args); });
}
void TimedDevice::attend(const AttendArgs& args) {
  timed(kAttend, [&] { inner_.attend(args); });
}
void TimedDevice::matmul_add(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias,
                             float* scratch, float* y, const RowNorm& next) {
  timed(kMatmulAdd, [&] { inner_.matmul_add(x, tokens, w, bias, scratch, y, next); });
}
void TimedDevice::matmuls(const float* x, int64_t tokens, std::span<const Projection> outs, const RowNorm& norm) {
  timed(kMatmuls, [&] { inner_.matmuls(x, tokens, outs, norm); });
}
void TimedDevice::project_attend(const float* x, int64_t tokens, std::span<const Projection, 3> qkv,
                                 const RowNorm& norm, const AttendArgs& args) {
  timed(kProjectAttend, [&] { inner_.project_attend(x, tokens, qkv, norm, args); });
}
void TimedDevice::matmuls_each(int64_t tokens, std::span<const float* const> xs, std::span<const Projection> outs) {
  timed(kMatmulsEach, [&] { inner_.matmuls_each(tokens, xs, outs); });
}
void TimedDevice::gate_up(const float* x, int64_t tokens, const TensorView& w_gate, const TensorView& b_gate,
                          const TensorView& w_up, const TensorView& b_up, float* up, float* out, const RowNorm& norm) {
  timed(kGateUp, [&] { inner_.gate_up(x, tokens, w_gate, b_gate, w_up, b_up, up, out, norm); });
}
void TimedDevice::silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  timed(kSiluMul, [&] { inner_.silu_mul(gate, up, n, out); });
}
void TimedDevice::gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  timed(kGeluTanhMul, [&] { inner_.gelu_tanh_mul(gate, up, n, out); });
}
void TimedDevice::scale(float* x, int64_t n, float factor) {
  timed(kScale, [&] { inner_.scale(x, n, factor); });
}
void TimedDevice::add(const float* x, int64_t n, float* y) {
  timed(kAdd, [&] { inner_.add(x, n, y); });
}
void TimedDevice::gather_rows(const float* x, std::span<const int32_t> rows, int64_t dim, float* y) {
  timed(kGatherRows, [&] { inner_.gather_rows(x, rows, dim, y); });
}
void TimedDevice::scatter_add_rows(const float* x, const float* scale, std::span<const int32_t> rows, int64_t dim,
                                   float* y) {
  timed(kScatterAddRows, [&] { inner_.scatter_add_rows(x, scale, rows, dim, y); });
}
bool TimedDevice::route_experts(const float* logits, int64_t tokens, const ExpertRouting& routing,
                                const TensorView& bias, int32_t* experts, float* weights) {
  return timed(kRouteExperts, [&] { return inner_.route_experts(logits, tokens, routing, bias, experts, weights); });
}
bool TimedDevice::run_experts(const float* x, int64_t tokens, const ExpertRouting& routing, int32_t* experts,
                              float* weights, const ExpertWeights& w, float* out, const ExpertStep& step) {
  return timed(kRunExperts, [&] { return inner_.run_experts(x, tokens, routing, experts, weights, w, out, step); });
}
void TimedDevice::argmax(const float* x, int64_t rows, int64_t n, int32_t* y) {
  timed(kArgmax, [&] { inner_.argmax(x, rows, n, y); });
}

}  // namespace tessera
