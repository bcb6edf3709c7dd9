// A portable emulation of bf16_columns_avx2.cpp's Ops (columns_kernel.h's "bf16 widened":
// a bf16 pair's two elements widened by a shift into f32 columns, then FMAs element by
// element), for the tests, which instantiate the kernel with it. Not used by the library.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/f16_columns_emulated.h"

namespace tessera::cpu::bf16_columns_avx2 {

struct EmulatedOps {
  // The tiles' steps over the widened block: one f32 element of 16 rows a unit, f16's
  // emulated steps on weights already f32.
  struct WideOps : f16_columns::EmulatedOps {
    static constexpr int kTileColumns = 1;

    static W load(const float* p) { return loadu_acc(p); }
  };
  using Wide = WideOps;  // (a type of another name: WideOps::WideOps names WideOps itself)

  // Fewer tokens' steps: a unit (16 rows' pair) widened as it is read, its even elements
  // summed, then its odd ones.
  using Acc = Wide::Acc;
  struct W {
    Wide::W even, odd;
  };
  struct X {
    float even, odd;
  };
  static constexpr int64_t kUnit = 2;
  static constexpr int kTileColumns = 1;

  static float widen(uint16_t bits) {
    const uint32_t word = static_cast<uint32_t>(bits) << 16;
    float f;
    std::memcpy(&f, &word, sizeof(f));
    return f;
  }
  static Acc zero() { return Acc{}; }
  static W load(const uint16_t* p) {
    W w;
    for (int r = 0; r < 16; ++r) {
      w.even.v[r] = widen(p[2 * r]);
      w.odd.v[r] = widen(p[2 * r + 1]);
    }
    return w;
  }
  static X broadcast_unit(const uint32_t* x) { return {Wide::broadcast(x[0]), Wide::broadcast(x[1])}; }
  static Acc dot(Acc acc, const W& w, X x) { return Wide::dot(Wide::dot(acc, w.even, x.even), w.odd, x.odd); }
  static Acc loadu_acc(const float* p) { return Wide::loadu_acc(p); }
  static void storeu_acc(float* p, const Acc& a) { Wide::storeu_acc(p, a); }
  // n units into 2n units of 16 floats, each as load() widens it.
  static void widen(const uint16_t* col, int64_t n, float* out, int64_t) {
    for (int64_t p = 0; p < n; ++p) {
      const W w = load(col + p * 32);
      std::memcpy(out + 32 * p, w.even.v, sizeof(w.even.v));
      std::memcpy(out + 32 * p + 16, w.odd.v, sizeof(w.odd.v));
    }
  }
  static void pack_units(const float* x, int64_t k, uint32_t* out) {
    std::memcpy(out, x, static_cast<size_t>(k) * sizeof(float));
    for (int64_t i = k; i < (k + 31) / 32 * 32; ++i) out[i] = 0;
  }
  // 16 rows' 32 elements into 16 units of 16 rows' pairs.
  static void transpose_chunk(const uint16_t* src, int64_t stride, uint16_t* out) {
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t u = 0; u < 16; ++u)
        for (int64_t e = 0; e < 2; ++e) out[32 * u + 2 * r + e] = src[r * stride + 2 * u + e];
  }
};

}  // namespace tessera::cpu::bf16_columns_avx2
