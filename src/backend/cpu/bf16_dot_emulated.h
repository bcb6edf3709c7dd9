// A portable emulation of the vectors and the instruction bf16_dot_kernel.h runs on
// (AVX-512 BF16: vdpbf16ps and vcvtneps2bf16), written from the Intel SDM's description
// of them. The tests instantiate the kernel with it, so that the blocking and the order
// of the sums are checked on machines without the instruction, and compare it with the
// instruction where the CPU has it. Not used by the library itself.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace tessera::cpu::bf16_dot {

struct EmulatedOps {
  struct Acc {
    float v[16];
  };
  struct Chunk {
    uint16_t v[32];
  };
  using W = Chunk;  // columns_kernel.h's: 16 rows' pair, and x's pair in every lane
  using X = Chunk;
  static constexpr int64_t kUnit = 2;
  static constexpr int kTileColumns = 4;  // columns_kernel.h's kMaxColumns

  static Acc zero() { return Acc{}; }
  static Chunk load(const uint16_t* p) {
    Chunk c;
    std::memcpy(c.v, p, sizeof(c.v));
    return c;
  }
  static Chunk load_partial(const uint16_t* p, int n) {
    Chunk c{};
    std::memcpy(c.v, p, static_cast<size_t>(n) * sizeof(uint16_t));
    return c;
  }
  static Acc load_acc(const float* p) {
    Acc a;
    std::memcpy(a.v, p, sizeof(a.v));
    return a;
  }
  static void store_acc(float* p, const Acc& a) { std::memcpy(p, a.v, sizeof(a.v)); }
  static Acc loadu_acc(const float* p) { return load_acc(p); }
  static void storeu_acc(float* p, const Acc& a) { store_acc(p, a); }
  // columns_kernel.h's: x's pair (a u32 of two bf16) in every lane; a token's x rounded
  // and padded; 16 rows' chunks of 32 elements (`stride` apart) into 16 pairs of 16 rows.
  static Chunk broadcast(uint32_t pair) {
    Chunk c;
    for (int j = 0; j < 16; ++j) std::memcpy(c.v + 2 * j, &pair, sizeof(pair));
    return c;
  }
  static void pack_units(const float* x, int64_t k, uint32_t* out);
  static void transpose_chunk(const uint16_t* src, int64_t stride, uint16_t* out) {
    for (int64_t r = 0; r < 16; ++r)
      for (int64_t p = 0; p < 16; ++p) std::memcpy(out + 2 * (16 * p + r), src + r * stride + 2 * p, 4);
  }

  // A bf16 input as f32, a subnormal read as zero (the SDM's DAZ).
  static float widen(uint16_t bits) {
    if ((bits & 0x7F80u) == 0) bits &= 0x8000u;
    const uint32_t f = uint32_t{bits} << 16;
    float out;
    std::memcpy(&out, &f, sizeof(out));
    return out;
  }
  // A subnormal result flushed to zero (FTZ).
  static float flush(float f) { return std::fpclassify(f) == FP_SUBNORMAL ? std::copysign(0.0f, f) : f; }

  // vdpbf16ps: lane j += w[2j+1] * x[2j+1], then += w[2j] * x[2j], each rounded to nearest
  // even (a bf16 product is exact in f32, so each step is a fused multiply-add).
  static Acc dot(Acc acc, const Chunk& w, const Chunk& x) {
    for (int j = 0; j < 16; ++j) {
      float a = acc.v[j];
      a = flush(std::fma(widen(w.v[2 * j + 1]), widen(x.v[2 * j + 1]), a));
      a = flush(std::fma(widen(w.v[2 * j]), widen(x.v[2 * j]), a));
      acc.v[j] = a;
    }
    return acc;
  }

  // The halving tree of bf16_dot_kernel.h: lane i + 8 onto i, then + 4, + 2, + 1.
  static void sum_lanes16(const Acc* v, float* out) {
    for (int j = 0; j < 16; ++j) {
      float lanes[16];
      std::memcpy(lanes, v[j].v, sizeof(lanes));
      for (int h = 8; h >= 1; h /= 2)
        for (int i = 0; i < h; ++i) lanes[i] = lanes[i] + lanes[i + h];
      out[j] = lanes[0];
    }
  }

  // vcvtneps2bf16: nearest even; a subnormal input reads as zero; NaN stays NaN (quiet).
  static uint16_t round(float f) {
    uint32_t bits;
    std::memcpy(&bits, &f, sizeof(bits));
    if ((bits & 0x7F800000u) == 0) return static_cast<uint16_t>((bits >> 16) & 0x8000u);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
    return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
  }
  static void round_x(const float* x, int64_t n, uint16_t* out) {
    for (int64_t i = 0; i < n; ++i) out[i] = round(x[i]);
  }
};

inline void EmulatedOps::pack_units(const float* x, int64_t k, uint32_t* out) {
  auto* bits = reinterpret_cast<uint16_t*>(out);
  round_x(x, k, bits);
  for (int64_t i = k; i < (k + 31) / 32 * 32; ++i) bits[i] = 0;
}

}  // namespace tessera::cpu::bf16_dot
