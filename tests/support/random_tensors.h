// Seeded random values in [-1, 1) and their bytes in a weight dtype, for kernel
// tests on every device.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace tessera::testing {

inline std::vector<float> random_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Weights in `dtype` holding the (rounded) values of `w`, and `w` replaced by what they hold.
inline std::vector<uint8_t> encode(std::vector<float>& w, DType dtype) {
  std::vector<uint8_t> bytes(w.size() * dtype_size(dtype));
  for (size_t i = 0; i < w.size(); ++i) {
    if (dtype == DType::kF32) {
      std::memcpy(bytes.data() + 4 * i, &w[i], 4);
      continue;
    }
    const uint16_t bits = dtype == DType::kBF16 ? f32_to_bf16(w[i]) : f32_to_f16(w[i]);
    std::memcpy(bytes.data() + 2 * i, &bits, 2);
    w[i] = dtype == DType::kBF16 ? bf16_to_f32(bits) : f16_to_f32(bits);
  }
  return bytes;
}

// The bytes of fresh random values in `dtype`.
inline std::vector<uint8_t> random_weights(size_t n, DType dtype, uint32_t seed) {
  auto values = random_values(n, seed);
  return encode(values, dtype);
}

}  // namespace tessera::testing
