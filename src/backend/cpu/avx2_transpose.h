// The 32-bit words of 16 rows' chunks transposed on AVX2, for the column kernels' copies
// of weights not laid out in columns (f16_columns_avx2.cpp, bf16_columns_avx2.cpp). Only
// included inside their AVX2 attribute regions, after <immintrin.h>.
#pragma once

#include <cstdint>

namespace tessera::cpu::avx2 {

// dst[16 u + r] = src[r * stride + u] for 16 rows r and 16 words u (stride in words).
inline void transpose16_words(const uint32_t* src, int64_t stride, uint32_t* dst) {
  for (int rb = 0; rb < 16; rb += 8)
    for (int ub = 0; ub < 16; ub += 8) {
      __m256 r[8], t[8];
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(reinterpret_cast<const float*>(src + (rb + i) * stride + ub));
      for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
      }
      for (int i = 0; i < 8; i += 4)
        for (int j = 0; j < 2; ++j) {
          r[i + j] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], 0x44);
          r[i + j + 2] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], 0xEE);
        }
      // r[0..7] now hold, by 128-bit lane, columns 0 2 1 3 of rows 0-3 (r 0-3) and 4-7.
      const int order[4] = {0, 2, 1, 3};
      for (int c = 0; c < 4; ++c) {
        const __m256 a = r[order[c]], b = r[4 + order[c]];
        _mm256_storeu_ps(reinterpret_cast<float*>(dst + 16 * (ub + c) + rb), _mm256_permute2f128_ps(a, b, 0x20));
        _mm256_storeu_ps(reinterpret_cast<float*>(dst + 16 * (ub + c + 4) + rb), _mm256_permute2f128_ps(a, b, 0x31));
      }
    }
}

}  // namespace tessera::cpu::avx2
