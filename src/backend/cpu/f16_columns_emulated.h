// A portable emulation of the vectors and instructions f16_columns.cpp runs
// columns_kernel.h on (AVX-512 FMAs, F16C's exact widening), for the tests, which
// instantiate the kernel with it, so that its blocking and its order are checked on every
// machine and the instructions where the CPU has them. Not used by the library itself.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tessera::cpu::f16_columns {

struct EmulatedOps {
  struct Acc {
    float v[16];
  };
  using W = Acc;  // 16 rows' element, widened
  using X = float;
  static constexpr int64_t kUnit = 1;
  static constexpr int kTileColumns = 4;  // columns_kernel.h's kMaxColumns

  // An f16 as f32, exactly (subnormals too, as vcvtph2ps gives them).
  static float widen(uint16_t bits) {
    const int exponent = bits >> 10 & 0x1F, mantissa = bits & 0x3FF;
    const float sign = (bits & 0x8000u) != 0 ? -1.0f : 1.0f;
    if (exponent == 0x1F) return mantissa == 0 ? sign * INFINITY : NAN;
    if (exponent == 0) return sign * std::ldexp(static_cast<float>(mantissa), -24);
    return sign * std::ldexp(static_cast<float>(mantissa | 0x400), exponent - 25);
  }

  static Acc zero() { return Acc{}; }
  static W load(const uint16_t* p) {
    W w;
    for (int j = 0; j < 16; ++j) w.v[j] = widen(p[j]);
    return w;
  }
  static X broadcast(uint32_t bits) {
    float x;
    std::memcpy(&x, &bits, sizeof(x));
    return x;
  }
  static Acc dot(Acc acc, const W& w, X x) {
    for (int j = 0; j < 16; ++j) acc.v[j] = std::fma(w.v[j], x, acc.v[j]);
    return acc;
  }
  static Acc loadu_acc(const float* p) {
    Acc a;
    std::memcpy(a.v, p, sizeof(a.v));
    return a;
  }
  static void storeu_acc(float* p, const Acc& a) { std::memcpy(p, a.v, sizeof(a.v)); }
  static void pack_units(const float* x, int64_t k, uint32_t* out) {
    std::memcpy(out, x, static_cast<size_t>(k) * sizeof(float));
    for (int64_t i = k; i < (k + 31) / 32 * 32; ++i) out[i] = 0;
  }
  static void transpose_chunk(const uint16_t* src, int64_t stride, uint16_t* out) {
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t u = 0; u < 32; ++u) out[16 * u + r] = src[r * stride + u];
  }
};

}  // namespace tessera::cpu::f16_columns
