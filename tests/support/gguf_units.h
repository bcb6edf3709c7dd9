// The integers of one unit of ggml's quantized blocks, for tests of kernels that
// compute on the blocks' exact integer sums.
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace tessera::testing {

// One unit of a weight row as ggml lays it out: each element's integer (Q8_0 q, Q4_0
// q - 8, Q4_K/Q5_K q, Q6_K q - 32) and integer sub-scale (1 for Q8_0/Q4_0), Q4_K/Q5_K's
// 8 mins, d and dmin.
struct UnitInts {
  int q[256] = {}, s[256] = {}, m[8] = {};
  float d = 0, dmin = 0;
};

inline UnitInts unit_ints(DType type, const uint8_t* b) {
  UnitInts w;
  const auto f16 = [&](int at) { return f16_to_f32(static_cast<uint16_t>(b[at] | b[at + 1] << 8)); };
  if (type == DType::kQ8_0 || type == DType::kQ4_0) {
    w.d = f16(0);
    for (int e = 0; e < 32; ++e) {
      w.q[e] = type == DType::kQ8_0 ? static_cast<int8_t>(b[2 + e]) : (e < 16 ? b[2 + e] & 15 : b[2 + e - 16] >> 4) - 8;
      w.s[e] = 1;
    }
  } else if (type == DType::kQ4_K || type == DType::kQ5_K) {
    const bool five = type == DType::kQ5_K;
    w.d = f16(0), w.dmin = f16(2);
    const uint8_t* sc = b + 4;  // ggml's get_scale_min_k4
    for (int g = 0; g < 8; ++g) {
      const int scale = g < 4 ? sc[g] & 63 : (sc[g + 4] & 15) | (sc[g - 4] >> 6) << 4;
      w.m[g] = g < 4 ? sc[g + 4] & 63 : (sc[g + 4] >> 4) | (sc[g] >> 6) << 4;
      for (int l = 0; l < 32; ++l) {
        const int e = 32 * g + l;
        w.q[e] = (b[(five ? 48 : 16) + 32 * (g / 2) + l] >> (4 * (g % 2))) & 15;
        if (five) w.q[e] |= ((b[16 + l] >> g) & 1) << 4;
        w.s[e] = scale;
      }
    }
  } else {
    w.d = f16(208);
    for (int e = 0; e < 256; ++e) {
      const int half = e / 128, r = e % 128;
      const int lo = (b[64 * half + r % 64] >> (4 * (r / 64))) & 15,
                hi = (b[128 + 32 * half + r % 32] >> (2 * (r / 32))) & 3;
      w.q[e] = (lo | hi << 4) - 32;
      w.s[e] = static_cast<int8_t>(b[192 + e / 16]);
    }
  }
  return w;
}

// Unit u's exact sums with activations qx (its elements) and, for Q4_K/Q5_K, Q8_K's sums
// of 16 (bsums): P = sum of s q_w q_x; M = sum over sub-blocks j of min_j times bsums
// 2j and 2j + 1 (0 for the other types).
inline void unit_sums(DType type, const UnitInts& w, const int8_t* qx, const int16_t* bsums, int32_t& p, int32_t& m) {
  const int elems = static_cast<int>(dtype_block_elements(type));
  p = 0, m = 0;
  for (int e = 0; e < elems; ++e) p += w.s[e] * w.q[e] * qx[e];
  if (type == DType::kQ4_K || type == DType::kQ5_K)
    for (int j = 0; j < 8; ++j) m += w.m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
}

}  // namespace tessera::testing
