// A portable emulation of the tiles and the instruction amx_kernel.h runs on (AMX-TILE
// and AMX-BF16: ldtilecfg, tileloadd, tilestored, tilezero, tdpbf16ps), and of the vector
// steps its column decode takes instead: tdpbf16ps as amx_kernel.h states it (measured on
// the hardware, not the Intel SDM's pseudo-code). The tests instantiate the kernel with
// it, so that the blocking and the order of the sums are checked on machines without AMX,
// and compare it with the instruction where the CPU has it, bitwise. Not used by the
// library itself. The tiles are the calling thread's, as the real ones are.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backend/cpu/bf16_dot_emulated.h"
#include "backend/cpu/kernels.h"

namespace tessera::cpu::amx {

struct EmulatedOps {
  struct Tiles {
    int rows[8] = {};
    int colsb[8] = {};
    alignas(64) uint8_t data[8][16 * 64] = {};
  };
  static Tiles& tiles() {
    thread_local Tiles t;
    return t;
  }

  // Palette 1 as amx_kernel.h configures it: every tile 16 rows; A tiles (4, 5) 64 bytes
  // a row, C (0-3) and B (6, 7) 4 bytes a token.
  static void configure(int cols) {
    Tiles& t = tiles();
    for (int i = 0; i < 8; ++i) {
      t.rows[i] = 16;
      t.colsb[i] = i == 4 || i == 5 ? 64 : 4 * cols;
    }
    std::memset(t.data, 0, sizeof(t.data));
  }
  static void release() {}
  template <int T>
  static void zero() {
    std::memset(tiles().data[T], 0, sizeof(tiles().data[T]));
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    Tiles& t = tiles();
    std::memset(t.data[T], 0, sizeof(t.data[T]));
    for (int r = 0; r < t.rows[T]; ++r)
      std::memcpy(t.data[T] + r * 64, static_cast<const uint8_t*>(p) + r * stride, static_cast<size_t>(t.colsb[T]));
  }
  template <int T>
  static void load_streaming(const void* p, int64_t stride) {  // a hint to the caches, the same load
    load<T>(p, stride);
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    const Tiles& t = tiles();
    for (int r = 0; r < t.rows[T]; ++r)
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, t.data[T] + r * 64, static_cast<size_t>(t.colsb[T]));
  }

  static uint16_t bf16_at(const uint8_t* row, int i) {
    uint16_t v;
    std::memcpy(&v, row + 2 * i, sizeof(v));
    return v;
  }

  // tdpbf16ps C, A, B as amx_kernel.h states it: for each row m of C and column n, the
  // even products A[m].bf16[2p] * B[p].bf16[2n] summed in one chain and the odd ones in
  // another, each product and sum rounded on its own, then C += even + odd; bf16 and C's
  // subnormals read as zero, subnormal results flushed (Lanes' arithmetic, lane by lane).
  template <int C, int A, int B>
  static void dot() {
    Tiles& t = tiles();
    for (int m = 0; m < t.rows[C]; ++m)
      for (int n = 0; n < t.colsb[C] / 4; ++n) {
        float acc;
        std::memcpy(&acc, t.data[C] + m * 64 + 4 * n, sizeof(acc));
        float even = 0.0f, odd = 0.0f;
        for (int p = 0; p < t.colsb[A] / 4; ++p) {
          const uint8_t* a = t.data[A] + m * 64;
          const uint8_t* b = t.data[B] + p * 64;
          even = Lanes::add1(even, Lanes::mul1(Lanes::widen(bf16_at(a, 2 * p)), Lanes::widen(bf16_at(b, 2 * n))));
          odd = Lanes::add1(odd, Lanes::mul1(Lanes::widen(bf16_at(a, 2 * p + 1)), Lanes::widen(bf16_at(b, 2 * n + 1))));
        }
        acc = Lanes::add1(acc, Lanes::add1(even, odd));
        std::memcpy(t.data[C] + m * 64 + 4 * n, &acc, sizeof(acc));
      }
  }

  // amx_columns.h's steps: 16 lanes, each operation rounded on its own,
  // subnormal inputs read as zero and subnormal results flushed (as MXCSR's DAZ and FTZ).
  struct Lanes {
    struct V {
      float v[16];
    };
    struct Flush {};  // the arithmetic below flushes by itself
    static float widen(uint16_t bits) { return bf16_dot::EmulatedOps::widen(bits); }
    static float daz(float f) { return bf16_dot::EmulatedOps::flush(f); }
    static float mul1(float a, float b) { return daz(daz(a) * daz(b)); }
    static float add1(float a, float b) { return daz(daz(a) + daz(b)); }
    static V zero() { return {}; }
    static void widen_pairs(const uint16_t* x, int64_t pairs, float* even, float* odd) {
      for (int64_t u = 0; u < pairs; ++u) {
        even[u] = widen(x[2 * u]);
        odd[u] = widen(x[2 * u + 1]);
      }
    }
    static void split(const uint32_t* p, V& even, V& odd) {
      for (int i = 0; i < 16; ++i) {
        even.v[i] = widen(static_cast<uint16_t>(p[i] & 0xFFFFu));
        odd.v[i] = widen(static_cast<uint16_t>(p[i] >> 16));
      }
    }
    static V mul(const V& w, float x) {
      V out;
      for (int i = 0; i < 16; ++i) out.v[i] = mul1(w.v[i], x);
      return out;
    }
    static V add(const V& a, const V& b) {
      V out;
      for (int i = 0; i < 16; ++i) out.v[i] = add1(a.v[i], b.v[i]);
      return out;
    }
    static void store(float* p, const V& v) { std::memcpy(p, v.v, sizeof(v.v)); }
  };

  static void round_x(const float* x, int64_t n, uint16_t* out) { bf16_dot::EmulatedOps::round_x(x, n, out); }
  static void transpose16(const float* src, int64_t ss, float* dst, int64_t ds) {
    for (int64_t i = 0; i < 16; ++i)
      for (int64_t j = 0; j < 16; ++j) std::memcpy(dst + j * ds + i, src + i * ss + j, sizeof(float));
  }
  // amx_attention.h's two more.
  static void softmax(float* x, int64_t n, float scale) { softmax_scaled(x, n, scale); }
  static void subtract_widened(float* x, const uint16_t* hi, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] -= bf16_dot::EmulatedOps::widen(hi[i]);
  }
};

// The same tiles with amx_int8_kernel.h's shapes and AMX-INT8's tdpbssd, which sums each
// output's int8 products into its int32 exactly (no saturation: the SDM's pseudo-code adds
// 32-bit wrapping sums, and a unit's at most 32 x 8 x 128 cannot wrap), and its f32 step.
struct EmulatedInt8Ops : EmulatedOps {
  // Every tile whole: 16 rows of 64 bytes.
  static void configure() {
    Tiles& t = tiles();
    for (int i = 0; i < 8; ++i) {
      t.rows[i] = 16;
      t.colsb[i] = 64;
    }
    std::memset(t.data, 0, sizeof(t.data));
  }
  // tdpbssd C, A, B: C[m].i32[n] += the sum over k < colsb(A) of A[m].i8[k] * B[k / 4].i8[4 n + k % 4].
  template <int C, int A, int B>
  static void dot() {
    Tiles& t = tiles();
    for (int m = 0; m < t.rows[C]; ++m)
      for (int n = 0; n < t.colsb[C] / 4; ++n) {
        int32_t acc;
        std::memcpy(&acc, t.data[C] + m * 64 + 4 * n, sizeof(acc));
        for (int k = 0; k < t.colsb[A]; ++k)
          acc += int32_t{static_cast<int8_t>(t.data[A][m * 64 + k])} *
                 int32_t{static_cast<int8_t>(t.data[B][k / 4 * 64 + 4 * n + k % 4])};
        std::memcpy(t.data[C] + m * 64 + 4 * n, &acc, sizeof(acc));
      }
  }
  struct Acc {
    float v[256];
  };
  static void clear(Acc& acc) { std::fill(acc.v, acc.v + 256, 0.0f); }
  static void step(Acc& acc, const float* dw, const float* dx, const int32_t* p) {
    for (int64_t t = 0; t < 16; ++t)
      for (int64_t r = 0; r < 16; ++r)
        acc.v[16 * t + r] = std::fma(dw[r] * dx[t], static_cast<float>(p[16 * t + r]), acc.v[16 * t + r]);
  }
  static void finish(const Acc& acc, float* y, int64_t ldy) {
    for (int64_t t = 0; t < 16; ++t) std::copy(acc.v + 16 * t, acc.v + 16 * t + 16, y + t * ldy);
  }
};

}  // namespace tessera::cpu::amx
