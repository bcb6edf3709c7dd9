// The check the CPU matmul suites share (kernels_test's 16-bit and f32 weights,
// quant_matmul_test's GGUF blocks): a token's outputs are bitwise the same at 1, 2
// and 3 threads, alone, among `some` tokens (from token 100), and among all of x's
// tokens (at least 301: tokens 0, 1, 150 and 300 are asked alone).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_device.h"

namespace tessera::testing {

// The bits of `count` floats, so that a mismatch prints them.
inline std::vector<uint32_t> bits(const float* y, int64_t count) {
  std::vector<uint32_t> out(static_cast<size_t>(count));
  std::memcpy(out.data(), y, out.size() * sizeof(float));
  return out;
}

inline void expect_rows_alone_or_in_a_batch(const TensorView& weight, const std::vector<float>& x, int64_t some) {
  const int64_t n = weight.dim(0), k = weight.dim(1), tokens = static_cast<int64_t>(x.size()) / k;
  std::vector<uint32_t> reference;
  for (const size_t threads : {1, 2, 3}) {
    CpuDevice device(threads);
    std::vector<float> all(static_cast<size_t>(tokens * n));
    device.matmul(x.data(), tokens, weight, {}, all.data());
    if (reference.empty()) reference = bits(all.data(), tokens * n);
    EXPECT_EQ(bits(all.data(), tokens * n), reference) << threads << " threads";
    for (const int64_t t : {0, 1, 150, 300}) {
      std::vector<float> alone(static_cast<size_t>(n));
      device.matmul(x.data() + t * k, 1, weight, {}, alone.data());
      EXPECT_EQ(bits(alone.data(), n), bits(all.data() + t * n, n)) << "token " << t << ", " << threads << " threads";
    }
    std::vector<float> part(static_cast<size_t>(some * n));
    device.matmul(x.data() + 100 * k, some, weight, {}, part.data());
    EXPECT_EQ(bits(part.data(), some * n), bits(all.data() + 100 * n, some * n)) << threads << " threads";
  }
}

}  // namespace tessera::testing
