#include "backend/device.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <fstream>
#include <optional>
#include <vector>

namespace tessera {

uint64_t Device::available_memory() const {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  uint64_t kib = 0;
  while (meminfo >> key >> kib >> unit)
    if (key == "MemAvailable:") return kib * 1024;
  return uint64_t{4} << 30;
}

void Device::attend(const AttendArgs& a) {
  const int64_t hd = a.pages->head_dim, kv_heads = a.pages->n_kv_heads;
  int64_t row = 0;
  for (const SeqSlice& part : a.parts) {
    float* q = a.q + row * a.n_heads * hd;
    float* k = a.k + row * kv_heads * hd;
    Rotary rotary = a.rotary;
    if (a.long_inv_freq != nullptr && part.pos0 + part.tokens > a.long_after) rotary.inv_freq = a.long_inv_freq;
    rope(q, part.tokens, a.n_heads, hd, part.pos0, rotary);
    rope(k, part.tokens, kv_heads, hd, part.pos0, rotary);
    kv_store(*a.pages, a.layer, part.blocks, part.pos0, part.tokens, k, a.v + row * kv_heads * hd);
    attention(AttentionArgs{.q = q,
                            .out = a.out + row * a.n_heads * hd,
                            .pages = a.pages,
                            .layer = a.layer,
                            .blocks = part.blocks,
                            .tokens = part.tokens,
                            .pos0 = part.pos0,
                            .n_heads = a.n_heads,
                            .sliding_window = a.sliding_window,
                            .scale = a.scale});
    row += part.tokens;
  }
}

void Device::matmul_add(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* scratch,
                        float* y, const RowNorm& /*next*/) {
  matmul(x, tokens, w, bias, scratch);
  add(scratch, tokens * w.dim(0), y);
}

const float* Device::normed(const float* x, int64_t tokens, int64_t k, const RowNorm& norm) {
  if (norm.weight == nullptr) return x;
  rms_norm(x, tokens, k, *norm.weight, norm.eps, norm.scratch);
  return norm.scratch;
}

void Device::matmuls(const float* x, int64_t tokens, std::span<const Projection> outs, const RowNorm& norm) {
  if (outs.empty()) return;
  x = normed(x, tokens, outs[0].w->dim(1), norm);
  for (const Projection& out : outs) matmul(x, tokens, *out.w, *out.bias, out.y);
}

void Device::project_attend(const float* x, int64_t tokens, std::span<const Projection, 3> qkv, const RowNorm& norm,
                            const AttendArgs& args) {
  matmuls(x, tokens, qkv, norm);
  attend(args);
}

void Device::matmuls_each(int64_t tokens, std::span<const float* const> xs, std::span<const Projection> outs) {
  for (size_t i = 0; i < outs.size(); ++i) matmul(xs[i], tokens, *outs[i].w, *outs[i].bias, outs[i].y);
}

void Device::gate_up(const float* x, int64_t tokens, const TensorView& w_gate, const TensorView& b_gate,
                     const TensorView& w_up, const TensorView& b_up, float* up, float* out, const RowNorm& norm) {
  x = normed(x, tokens, w_gate.dim(1), norm);
  matmul(x, tokens, w_gate, b_gate, out);
  matmul(x, tokens, w_up, b_up, up);
  silu_mul(out, up, tokens * w_gate.dim(0), out);
}

void Device::argmax(const float* x, int64_t rows, int64_t n, int32_t* y) {
  std::vector<float> host(static_cast<size_t>(rows * n));
  download(x, host.size() * sizeof(float), host.data());
  std::vector<int32_t> ids(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    const auto row = host.begin() + r * n;
    ids[static_cast<size_t>(r)] = static_cast<int32_t>(std::max_element(row, row + n) - row);
  }
  upload(ids.data(), ids.size() * sizeof(int32_t), y);
}

Result<double> measure_copy_bandwidth(Device& device) {
  const size_t bytes = size_t{1} << 30;
  TS_ASSIGN_OR_RETURN(Buffer from, device.alloc(bytes));
  TS_ASSIGN_OR_RETURN(Buffer to, device.alloc(bytes));
  float sink = 0;
  double best = 0;
  for (int round = 0; round < 4; ++round) {  // the first round warms up
    device.download(to.data(), sizeof sink, &sink);
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; ++i) device.copy(from.data(), bytes, to.data());
    device.download(to.data(), sizeof sink, &sink);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (round > 0) best = std::max(best, 2.0 * 10 * static_cast<double>(bytes) / seconds);
  }
  return best;
}

std::optional<int> cuda_ordinal(std::string_view name) {
  if (name == "cuda") return 0;
  if (!name.starts_with("cuda:")) return std::nullopt;
  int ordinal = -1;
  const auto digits = name.substr(5);
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
  if (ec != std::errc() || end != digits.data() + digits.size() || ordinal < 0) return std::nullopt;
  return ordinal;
}

Result<std::unique_ptr<Device>> make_device(std::string_view name, size_t cpu_threads) {
  if (name == "cpu") return make_cpu_device(cpu_threads);
  if (const std::optional<int> ordinal = cuda_ordinal(name)) return make_cuda_device(*ordinal);
  return Status::invalid_input("unknown device '" + std::string(name) + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace tessera
