// What the AVX2 column kernels (f16_columns_avx2.cpp, bf16_columns_avx2.cpp) share:
// columns_kernel.h's 16 f32 lanes as two AVX2 vectors, with the steps on them, and the
// 32-bit words of 16 rows' chunks transposed, for their copies of weights not laid out in
// columns. Only included inside their AVX2 attribute regions, after <immintrin.h>,
// <cstdint> and <cstring> (standard headers go before a region, as columns_kernel.h says).
#pragma once

namespace tessera::cpu::avx2 {

// The Ops members over f32 lanes: a column's 16 outputs (Acc) and a unit of its weights
// widened (W) are two vectors each, x's unit one (X). A tile of several tokens is one
// column x 6 tokens: 12 accumulators, the column's two vectors and x, of 16 registers.
struct Lanes {
  struct Acc {
    __m256 lo, hi;
  };
  using W = Acc;
  using X = __m256;
  static constexpr int kTileColumns = 1;

  static Acc zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static X broadcast(uint32_t bits) { return _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(bits))); }
  static Acc dot(Acc acc, W w, X x) { return {_mm256_fmadd_ps(w.lo, x, acc.lo), _mm256_fmadd_ps(w.hi, x, acc.hi)}; }
  static Acc loadu_acc(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static void storeu_acc(float* p, Acc a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
  }
  // x as f32, zeros past k to padded_k (pk).
  static void pack_f32(const float* x, int64_t k, int64_t pk, uint32_t* out) {
    std::memcpy(out, x, static_cast<size_t>(k) * sizeof(float));
    std::memset(out + k, 0, static_cast<size_t>(pk - k) * sizeof(float));
  }
};

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
