// Seeded random bf16 weights and exact sums of their products with x rounded to bf16, for
// the tests of the instruction kernels (bf16_dot_kernel.h, amx_kernel.h), which both round
// x as bf16_dot_emulated.h does.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/bf16_dot_emulated.h"
#include "support/random_tensors.h"

namespace tessera::testing {

// n random bf16 weights (their bits).
inline std::vector<uint16_t> random_bf16(size_t n, uint32_t seed) {
  auto values = random_values(n, seed);
  std::vector<uint16_t> out(n);
  cpu::bf16_dot::EmulatedOps::round_x(values.data(), static_cast<int64_t>(n), out.data());
  return out;
}

// The sum of w[i] * x[i] over i < k with x rounded to bf16, exactly (in double); of the
// products' absolute values when `magnitude` (the scale of an f32 sum's rounding errors).
inline double rounded_x_dot(const float* x, const uint16_t* w, int64_t k, bool magnitude = false) {
  using Dot = cpu::bf16_dot::EmulatedOps;
  double sum = 0;
  for (int64_t i = 0; i < k; ++i) {
    const double product = double{Dot::widen(Dot::round(x[i]))} * Dot::widen(w[i]);
    sum += magnitude ? std::fabs(product) : product;
  }
  return sum;
}

}  // namespace tessera::testing
