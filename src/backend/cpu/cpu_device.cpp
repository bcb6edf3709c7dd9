#include "backend/cpu/cpu_device.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/check.h"

namespace tessera {

std::unique_ptr<Device> make_cpu_device(size_t threads) { return std::make_unique<CpuDevice>(threads); }

std::string CpuDevice::name() const {
  return std::string("cpu (") + cpu::isa_name() + ", " + std::to_string(pool_.size()) + " threads)";
}

void CpuDevice::matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y) {
  TS_CHECK(w.shape.size() == 2, "matmul weight shape ", shape_string(w.shape));
  const int64_t n = w.dim(0);
  const int64_t k = w.dim(1);
  const size_t row_bytes = static_cast<size_t>(k) * dtype_size(w.dtype);
  const auto* base = static_cast<const uint8_t*>(w.data);
  pool_.parallel_for(static_cast<size_t>(n), 4, [&](size_t begin, size_t end) {
    cpu::matmul_rows(x, tokens, k, base + begin * row_bytes, w.dtype, static_cast<int64_t>(end - begin), y + begin, n);
  });
  if (!bias.empty()) {
    TS_CHECK(bias.numel() == n, "bias ", shape_string(bias.shape), " for ", n, " rows");
    std::vector<float> b(static_cast<size_t>(n));
    cpu::to_f32(bias.data, bias.dtype, n, b.data());
    for (int64_t t = 0; t < tokens; ++t) add(b.data(), n, y + t * n);
  }
}

void CpuDevice::rms_norm(const float* x, int64_t rows, int64_t dim, const TensorView& weight, float eps, float* y) {
  TS_CHECK(weight.numel() == dim, "norm weight ", shape_string(weight.shape), " for dim ", dim);
  std::vector<float> w(static_cast<size_t>(dim));
  cpu::to_f32(weight.data, weight.dtype, dim, w.data());
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const float mean_square = cpu::dot(xr, xr, dim) / static_cast<float>(dim);
    const float inv = 1.0f / std::sqrt(mean_square + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = w[i] * (xr[i] * inv);
  }
}

void CpuDevice::embed(const TensorView& table, std::span<const int32_t> ids, float* y) {
  const int64_t hidden = table.dim(1);
  const size_t row_bytes = static_cast<size_t>(hidden) * dtype_size(table.dtype);
  for (size_t t = 0; t < ids.size(); ++t) {
    TS_CHECK(ids[t] >= 0 && ids[t] < table.dim(0), "token id ", ids[t]);
    cpu::to_f32(static_cast<const uint8_t*>(table.data) + static_cast<size_t>(ids[t]) * row_bytes, table.dtype, hidden,
                y + static_cast<int64_t>(t) * hidden);
  }
}

void CpuDevice::rope(float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0,
                     std::span<const float> inv_freq) {
  const int64_t half = head_dim / 2;
  TS_CHECK_EQ(static_cast<int64_t>(inv_freq.size()), half);
  std::vector<float> cos(static_cast<size_t>(half)), sin(static_cast<size_t>(half));
  for (int64_t t = 0; t < tokens; ++t) {
    const auto position = static_cast<float>(pos0 + t);
    for (int64_t i = 0; i < half; ++i) {
      const float angle = position * inv_freq[static_cast<size_t>(i)];
      cos[static_cast<size_t>(i)] = std::cos(angle);
      sin[static_cast<size_t>(i)] = std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + (t * heads + h) * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        const float c = cos[static_cast<size_t>(i)];
        const float s = sin[static_cast<size_t>(i)];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

void CpuDevice::attention(const AttentionArgs& a) {
  TS_CHECK(a.n_kv_heads > 0 && a.n_heads % a.n_kv_heads == 0, "heads ", a.n_heads, " kv heads ", a.n_kv_heads);
  const int64_t group = a.n_heads / a.n_kv_heads;
  const int64_t kv_stride = a.n_kv_heads * a.head_dim;
  const int64_t units = a.tokens * a.n_heads;
  pool_.parallel_for(static_cast<size_t>(units), 1, [&](size_t begin, size_t end) {
    std::vector<float> scores;
    for (size_t u = begin; u < end; ++u) {
      const int64_t t = static_cast<int64_t>(u) / a.n_heads;
      const int64_t h = static_cast<int64_t>(u) % a.n_heads;
      const int64_t kv = h / group;
      const int64_t pos = a.pos0 + t;
      const int64_t first = a.sliding_window > 0 ? std::max<int64_t>(0, pos - a.sliding_window + 1) : 0;
      scores.resize(static_cast<size_t>(pos + 1 - first));
      cpu::attend(a.q + (t * a.n_heads + h) * a.head_dim, a.k_cache + first * kv_stride + kv * a.head_dim,
                  a.v_cache + first * kv_stride + kv * a.head_dim, kv_stride, pos + 1 - first, a.head_dim, a.scale,
                  scores.data(), a.out + (t * a.n_heads + h) * a.head_dim);
    }
  });
}

void CpuDevice::silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void CpuDevice::add(const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace tessera
