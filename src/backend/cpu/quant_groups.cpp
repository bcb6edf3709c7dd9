// Q8_0, Q4_0, Q4_K, Q5_K and Q6_K rows against 8-bit activations (quant_groups.h) in
// quant_dot.h's order of one f32 accumulator a row, 16 rows a vector: weight_layout.h's groups
// of kQuantGroup rows, or plain rows copied into a group first. Compiled once per target ISA
// (Highway's foreach_target.h re-includes this file) and dispatched at run time: AVX-512
// with VNNI takes the 16 rows a 512-bit register, AVX2 two halves of 8 in 256-bit ones,
// other targets plain integer loops. Every target makes the same integers and then the same
// f32 steps in the same order, so each gives the same bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/quant_groups.cpp"
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // as quant_dot.cpp: vpdpbusd
#endif
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/quant_act.h"
#include "backend/cpu/quant_groups.h"
#include "backend/cpu/quant_isa-inl.h"
#include "backend/cpu/quant_unpack-inl.h"
#include "backend/cpu/weight_layout.h"
#include "core/check.h"
#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {

// A group's unit (kQuantGroup's layout) as a kernel reads it.
struct Unit {
  const uint8_t* p;
  int64_t ahead = 0;  // each 64 bytes read asks for those `ahead` bytes on (0: none)
};

// Byte i of row r's block.
template <DType kT>
HWY_INLINE const uint8_t* byte_at(const Unit& u, int64_t i, int64_t r) {
  return u.p + quant_unit_offset(kT, i, r);
}

// The first 4-byte slice of Q4_K's nibbles (after (d, dmin) and the 12 bytes of scales and
// mins) or of Q5_K's (after its 32 bytes of high bits, slices 4-11).
template <bool kFive>
constexpr int kNibbles = kFive ? 12 : 4;
// Where Q6_K's block holds its scales and its d.
constexpr int kQ6_KScaleBytes = 192, kQ6_KD = 208;

HWY_INLINE int32_t x4(const int8_t* x) {
  int32_t v;
  std::memcpy(&v, x, 4);
  return v;
}

#if TESSERA_QUANT_DOT_AVX2
// vpshufb patterns over 4-byte lanes (each 128-bit half's 4 lanes): kPickByte[j] takes the
// lane's byte j as an int16 (b, 0); kPickTwice[j] as (b, b); kPickPair[i] bytes 2i and
// 2i + 1 as two int16.
struct alignas(64) Pattern {
  int8_t b[64];
};
constexpr Pattern lanes_of(int b0, int b1, int b2, int b3) {
  Pattern p{};
  const int pick[4] = {b0, b1, b2, b3};
  for (int i = 0; i < 64; ++i) p.b[i] = static_cast<int8_t>(pick[i % 4] < 0 ? -128 : i % 16 / 4 * 4 + pick[i % 4]);
  return p;
}
constexpr Pattern kPickByte[4] = {lanes_of(0, -1, -1, -1), lanes_of(1, -1, -1, -1), lanes_of(2, -1, -1, -1),
                                  lanes_of(3, -1, -1, -1)};
constexpr Pattern kPickTwice[4] = {lanes_of(0, -1, 0, -1), lanes_of(1, -1, 1, -1), lanes_of(2, -1, 2, -1),
                                   lanes_of(3, -1, 3, -1)};
constexpr Pattern kPickPair[2] = {lanes_of(0, -1, 1, -1), lanes_of(2, -1, 3, -1)};
constexpr Pattern kLowWords = lanes_of(0, 1, -1, -1);  // then packed: see f16_words
#endif

#if TESSERA_QUANT_DOT_VNNI
#if HWY_COMPILER_GCC_ACTUAL
#pragma GCC diagnostic push  // as quant_dot.cpp: GCC 12's 512-bit intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The 16 rows are a 512-bit register's lanes.
struct Vec {
  using Float = __m512;
  static constexpr int kHalves = 1;
  // The 64 bytes at `at` of a unit: 4 bytes of each row.
  TESSERA_VNNI static __m512i slice(const Unit& u, int, int64_t at) {
    if (u.ahead != 0) hwy::Prefetch(u.p + at + u.ahead);
    return _mm512_loadu_si512(u.p + at);
  }
  // The f16 in word w of each row's 4 bytes as f32.
  TESSERA_VNNI static Float f16_words(__m512i v, int w) {
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w == 0 ? v : _mm512_srli_epi32(v, 16)));
  }
  TESSERA_VNNI static __m512i pick(__m512i v, const Pattern& pattern) {
    return _mm512_shuffle_epi8(v, _mm512_load_si512(pattern.b));
  }
  TESSERA_VNNI static Float zero() { return _mm512_setzero_ps(); }
  TESSERA_VNNI static void store(float* y, int, Float acc) { _mm512_storeu_ps(y, acc); }
};

// Q8_0 and Q4_0 (units of 32 elements): the rows' d, and the f32 step of a unit's sums.
struct Block32Vec : Vec {
  using Int = __m512i;
  static constexpr int kTile = 8;
  static constexpr int kStreams = 4;
  TESSERA_VNNI static Float d(const Unit& u, int) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.p)));
  }
  TESSERA_VNNI static Float step(Float dw, float dx, Int sum, Float acc) {
    return _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(dx)), _mm512_cvtepi32_ps(sum), acc);
  }
};

// Q4_0: one vpdpbusd takes slice j's 4 bytes of every row against x's 4, the low nibbles as
// they are and the high ones masked in place as 16 q (at most 240; vpdpbusd does not
// saturate) into a second sum, shifted right by 4 once a unit (exact: a multiple of 16).
struct Q4_0Vec : Block32Vec {
  struct Weights {
    Int lo[4], hi[4];
  };
  TESSERA_VNNI static void weights(const Unit& u, int, Weights& w) {
    const __m512i low = _mm512_set1_epi8(0x0f), high = _mm512_set1_epi8(static_cast<char>(0xf0));
    for (int j = 0; j < 4; ++j) {
      const __m512i v = slice(u, 0, 32 + 64 * j);
      w.lo[j] = _mm512_and_si512(v, low);
      w.hi[j] = _mm512_and_si512(v, high);
    }
  }
  TESSERA_VNNI static Int sums(const Weights& w, const Q8Block& x, int32_t bias) {
    __m512i sum = _mm512_set1_epi32(bias), sixteen = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      sum = _mm512_dpbusd_epi32(sum, w.lo[j], _mm512_set1_epi32(x4(x.qs + 4 * j)));
      sixteen = _mm512_dpbusd_epi32(sixteen, w.hi[j], _mm512_set1_epi32(x4(x.qs + 16 + 4 * j)));
    }
    return _mm512_add_epi32(sum, _mm512_srai_epi32(sixteen, 4));
  }
};

// Q8_0: the signed weights made unsigned, w + 128 (the sign bit flipped), so that vpdpbusd
// takes slice j's 4 bytes of every row against x's 4, in two chains (even and odd slices),
// the first from bias = -128 (x0 + .. + x31).
struct Q8_0Vec : Block32Vec {
  struct Weights {
    Int u[8];
  };
  TESSERA_VNNI static void weights(const Unit& u, int, Weights& w) {
    const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
    for (int j = 0; j < 8; ++j) w.u[j] = _mm512_xor_si512(slice(u, 0, 32 + 64 * j), sign);
  }
  TESSERA_VNNI static Int sums(const Weights& w, const Q8Block& x, int32_t bias) {
    __m512i even = _mm512_set1_epi32(bias), odd = _mm512_setzero_si512();
    for (int j = 0; j < 8; j += 2) {
      even = _mm512_dpbusd_epi32(even, w.u[j], _mm512_set1_epi32(x4(x.qs + 4 * j)));
      odd = _mm512_dpbusd_epi32(odd, w.u[j + 1], _mm512_set1_epi32(x4(x.qs + 4 * j + 4)));
    }
    return _mm512_add_epi32(even, odd);
  }
};

// Q4_K and Q5_K (kFive): a sub-block's elements go through vpdpbusd in chains of kChain
// slices (Q4_K 16 elements, at most 16 * 15 * 127 in magnitude; Q5_K 8, at most 8 * 31 *
// 127: an int16 either way), then vpdpwssd adds sc_j times that int16 to P, the scale picked
// into each lane as (sc_j, 0). Q4_K's high nibbles are masked in place as 16 q and shifted
// back after a chain; Q5_K's values are made as bytes, bit j of qh[l] as bit 4 of sub-block
// j's element l.
template <bool kFive>
struct KVec : Vec {
  static constexpr int kTile = 8;
  static constexpr int kStreams = 2;
  static constexpr int kChain = kFive ? 2 : 4;
  // v's bits moved left by n (right by -n) within each 16-bit word.
  TESSERA_VNNI static __m512i shifted(__m512i v, int n) {
    return n >= 0 ? _mm512_slli_epi16(v, static_cast<unsigned>(n)) : _mm512_srli_epi16(v, static_cast<unsigned>(-n));
  }
  template <int kT>
  TESSERA_VNNI static void unit(const Unit& u, int, const Q8KBlock* const* xt, const int32_t* const* xm, Float* acc) {
    const auto at = [&](int s) { return slice(u, 0, 64 * s); };
    const __m512i m0f = _mm512_set1_epi8(0x0f), mf0 = _mm512_set1_epi8(static_cast<char>(0xf0)),
                  m3f = _mm512_set1_epi8(0x3f), m30 = _mm512_set1_epi8(0x30), m10 = _mm512_set1_epi8(0x10);
    const __m512i s0 = at(1), s1 = at(2), s2 = at(3);
    // Each row's scales and mins of sub-blocks 0-3 and 4-7, a byte each (as scale_min).
    const __m512i sc[2] = {_mm512_and_si512(s0, m3f),
                           _mm512_or_si512(_mm512_and_si512(s2, m0f), _mm512_and_si512(_mm512_srli_epi32(s0, 2), m30))};
    __m512i sums[kT];
    for (auto& v : sums) v = _mm512_setzero_si512();
    HWY_UNROLL(8)
    for (int i = 0; i < 4; ++i) {
      const __m512i sc_lo = pick(sc[i / 2], kPickByte[2 * i % 4]), sc_hi = pick(sc[i / 2], kPickByte[2 * i % 4 + 1]);
      HWY_UNROLL(8)
      for (int half = 0; half < 2; ++half) {
        __m512i lo[4], hi[4];
        HWY_UNROLL(8)
        for (int l = 0; l < 4; ++l) {
          const __m512i v = at(kNibbles<kFive> + 8 * i + 4 * half + l);
          if constexpr (kFive) {
            const __m512i h = at(4 + 4 * half + l);  // qh's bytes of these elements
            lo[l] = _mm512_ternarylogic_epi32(_mm512_and_si512(shifted(h, 4 - 2 * i), m10), v, m0f, 0xd8);
            hi[l] = _mm512_ternarylogic_epi32(_mm512_and_si512(shifted(h, 3 - 2 * i), m10), _mm512_srli_epi16(v, 4),
                                              m0f, 0xd8);  // m0f ? the nibble : the bit
          } else {
            lo[l] = _mm512_and_si512(v, m0f);
            hi[l] = _mm512_and_si512(v, mf0);
          }
        }
        HWY_UNROLL(8)
        for (int t = 0; t < kT; ++t) {
          const int8_t* x = xt[t]->qs + 64 * i + 16 * half;
          HWY_UNROLL(2)
          for (int c = 0; c < 4; c += kChain) {
            __m512i a = _mm512_setzero_si512(), b = _mm512_setzero_si512();
            HWY_UNROLL(4)
            for (int l = c; l < c + kChain; ++l) {
              a = _mm512_dpbusd_epi32(a, lo[l], _mm512_set1_epi32(x4(x + 4 * l)));
              b = _mm512_dpbusd_epi32(b, hi[l], _mm512_set1_epi32(x4(x + 32 + 4 * l)));
            }
            sums[t] = _mm512_dpwssd_epi32(sums[t], a, sc_lo);
            sums[t] = _mm512_dpwssd_epi32(sums[t], kFive ? b : _mm512_srai_epi32(b, 4), sc_hi);
          }
        }
      }
    }
    const __m512i mn[2] = {_mm512_and_si512(s1, m3f), _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(s2, 4), m0f),
                                                                      _mm512_and_si512(_mm512_srli_epi32(s1, 2), m30))};
    const __m512i dm = at(0);
    const __m512 d = f16_words(dm, 0), dmin = f16_words(dm, 1);
    HWY_UNROLL(8)
    for (int t = 0; t < kT; ++t) {
      __m512i m = _mm512_setzero_si512();
      HWY_UNROLL(8)
      for (int i = 0; i < 4; ++i)
        m = _mm512_dpwssd_epi32(m, pick(mn[i / 2], kPickPair[i % 2]), _mm512_set1_epi32(xm[t][i]));
      const __m512 dx = _mm512_set1_ps(xt[t]->d);
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(d, dx), _mm512_cvtepi32_ps(sums[t]), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(m), acc[t]);
    }
  }
};
// Q6_K: a q is made as a byte, its low 4 bits from ql and its high 2 from qh (in place at
// bits 4-5); each 16 elements' sum of q x starts from the token's -32 (x0 + .. + x15) and goes
// through vpdpbusd (exact), then times the row's scale (vpmulld) into P.
struct Q6KVec : Vec {
  static constexpr int kTile = 8;
  static constexpr int kStreams = 1;
  TESSERA_VNNI static __m512i scale(const Unit& u, int g) {
    const int64_t at = quant_unit_offset(DType::kQ6_K, kQ6_KScaleBytes + g, 0);
    if (u.ahead != 0) hwy::Prefetch(u.p + at + u.ahead);
    return _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u.p + at)));
  }
  TESSERA_VNNI static Float d(const Unit& u) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u.p)));
  }
  template <int kT>
  TESSERA_VNNI static void unit(const Unit& u, int, const Q8KBlock* const* xt, const int32_t* const* bias, Float* acc) {
    // The 4 bytes at block offset i of every row.
    const auto at = [&](int i) { return slice(u, 0, quant_unit_offset(DType::kQ6_K, i, 0)); };
    const __m512i m0f = _mm512_set1_epi8(0x0f), m30 = _mm512_set1_epi8(0x30);
    __m512i sums[kT];
    for (auto& v : sums) v = _mm512_setzero_si512();
    HWY_UNROLL(2)
    for (int half = 0; half < 2; ++half) {
      HWY_UNROLL(2)
      for (int l16 = 0; l16 < 2; ++l16) {
        // The 4 slices of ql holding q0 and q2 (lo, then hi nibbles), of q1 and q3, and of qh.
        __m512i ql[2][4], qh[4];
        HWY_UNROLL(4)
        for (int j = 0; j < 4; ++j) {
          ql[0][j] = at(64 * half + 16 * l16 + 4 * j);
          ql[1][j] = at(64 * half + 32 + 16 * l16 + 4 * j);
          qh[j] = at(128 + 32 * half + 16 * l16 + 4 * j);
        }
        HWY_UNROLL(4)
        for (int q = 0; q < 4; ++q) {
          const int g = 8 * half + 2 * q + l16;
          __m512i qv[4];
          HWY_UNROLL(4)
          for (int j = 0; j < 4; ++j) {
            const __m512i low = q < 2 ? ql[q % 2][j] : _mm512_srli_epi16(ql[q % 2][j], 4);
            const __m512i high = q == 0   ? _mm512_slli_epi16(qh[j], 4)
                                 : q == 1 ? _mm512_slli_epi16(qh[j], 2)
                                 : q == 2 ? qh[j]
                                          : _mm512_srli_epi16(qh[j], 2);
            qv[j] = _mm512_ternarylogic_epi32(_mm512_and_si512(high, m30), low, m0f, 0xd8);  // m0f ? low : high
          }
          const __m512i sc = scale(u, g);
          HWY_UNROLL(8)
          for (int t = 0; t < kT; ++t) {
            const int8_t* x = xt[t]->qs + 128 * half + 32 * q + 16 * l16;
            __m512i sum = _mm512_set1_epi32(bias[t][g]);
            HWY_UNROLL(4)
            for (int j = 0; j < 4; ++j) sum = _mm512_dpbusd_epi32(sum, qv[j], _mm512_set1_epi32(x4(x + 4 * j)));
            sums[t] = _mm512_add_epi32(sums[t], _mm512_mullo_epi32(sum, sc));
          }
        }
      }
    }
    const __m512 dw = d(u);
    HWY_UNROLL(8)
    for (int t = 0; t < kT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, _mm512_set1_ps(xt[t]->d)), _mm512_cvtepi32_ps(sums[t]), acc[t]);
  }
};
#if HWY_COMPILER_GCC_ACTUAL
#pragma GCC diagnostic pop
#endif
#elif TESSERA_QUANT_DOT_AVX2
// Two halves of 8 rows, each a 256-bit register's lanes (bytes 32 h.. of a grouped slice).
struct Vec {
  using Float = __m256;
  static constexpr int kHalves = 2;
  // The 32 bytes of half h at `at` of a unit: 4 bytes of each of its rows.
  static __m256i slice(const Unit& u, int h, int64_t at) {
    if (u.ahead != 0 && h == 0) hwy::Prefetch(u.p + at + u.ahead);
    return load32(u.p + at + 32 * h);
  }
  // The f16 in word w of each row's 4 bytes as f32.
  static Float f16_words(__m256i v, int w) {
    const __m256i low = _mm256_shuffle_epi8(w == 0 ? v : _mm256_srli_epi32(v, 16),
                                            _mm256_load_si256(reinterpret_cast<const __m256i*>(kLowWords.b)));
    // Each 128-bit half's 4 words are in its 4 lanes' low bytes 0-1: pack them to 8 words.
    const __m256i packed = _mm256_packus_epi32(low, low);
    return _mm256_cvtph_ps(_mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08)));
  }
  static __m256i pick(__m256i v, const Pattern& pattern) {
    return _mm256_shuffle_epi8(v, _mm256_load_si256(reinterpret_cast<const __m256i*>(pattern.b)));
  }
  static Float zero() { return _mm256_setzero_ps(); }
  static void store(float* y, int h, Float acc) { _mm256_storeu_ps(y + 8 * h, acc); }
};

// Q8_0 and Q4_0 (units of 32 elements): the rows' d, and the f32 step of a unit's sums.
struct Block32Vec : Vec {
  using Int = __m256i;
  static constexpr int kTile = 4;
  static constexpr int kStreams = 2;  // 2 x 2 accumulators, and the weights, in 16 registers
  static Float d(const Unit& u, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u.p + 16 * h)));
  }
  static Float step(Float dw, float dx, Int sum, Float acc) {
    return _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(dx)), _mm256_cvtepi32_ps(sum), acc);
  }
};

// Q4_0: vpmaddubsw's pairs of a slice summed in int16 over the unit's 8 slices (at most
// 8 * 2 * 15 * 127 = 30,480), then to int32.
struct Q4_0Vec : Block32Vec {
  struct Weights {
    Int lo[4], hi[4];
  };
  static void weights(const Unit& u, int h, Weights& w) {
    const __m256i low = _mm256_set1_epi8(0x0f);
    for (int j = 0; j < 4; ++j) {
      const __m256i v = slice(u, h, 32 + 64 * j);
      w.lo[j] = _mm256_and_si256(v, low);
      w.hi[j] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    }
  }
  static Int sums(const Weights& w, const Q8Block& x, int32_t bias) {
    __m256i pairs = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w.lo[j], _mm256_set1_epi32(x4(x.qs + 4 * j))));
      pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w.hi[j], _mm256_set1_epi32(x4(x.qs + 16 + 4 * j))));
    }
    return _mm256_add_epi32(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)), _mm256_set1_epi32(bias));
  }
};

// Q8_0: |w| times x * sign(w) by vpmaddubsw (a pair at most 2 * 128 * 127: x is never -128),
// each slice's pairs to int32 by vpmaddwd; no bias.
struct Q8_0Vec : Block32Vec {
  struct Weights {
    Int w[8];
  };
  static void weights(const Unit& u, int h, Weights& w) {
    for (int j = 0; j < 8; ++j) w.w[j] = slice(u, h, 32 + 64 * j);
  }
  static Int sums(const Weights& w, const Q8Block& x, int32_t) {
    const __m256i one = _mm256_set1_epi16(1);
    __m256i sum = _mm256_setzero_si256();
    for (int j = 0; j < 8; ++j) {
      const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(w.w[j], w.w[j]),
                                                 _mm256_sign_epi8(_mm256_set1_epi32(x4(x.qs + 4 * j)), w.w[j]));
      sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, one));
    }
    return sum;
  }
};

// Q4_K and Q5_K (kFive): vpmaddubsw's pairs of a sub-block summed in int16 over kChain
// slices (Q4_K all 8: at most 30,480; Q5_K 4: at most 31,496), then vpmaddwd with the scale
// picked into each lane as (sc_j, sc_j); Q5_K's values made as bytes (as the VNNI kernel).
template <bool kFive>
struct KVec : Vec {
  static constexpr int kTile = 2;
  static constexpr int kStreams = 2;
  static constexpr int kChain = kFive ? 4 : 8;
  static __m256i shifted(__m256i v, int n) { return n >= 0 ? _mm256_slli_epi16(v, n) : _mm256_srli_epi16(v, -n); }
  template <int kT>
  static void unit(const Unit& u, int h, const Q8KBlock* const* xt, const int32_t* const* xm, Float* acc) {
    const auto at = [&](int s) { return slice(u, h, 64 * s); };
    const __m256i m0f = _mm256_set1_epi8(0x0f), m3f = _mm256_set1_epi8(0x3f), m30 = _mm256_set1_epi8(0x30),
                  m10 = _mm256_set1_epi8(0x10);
    const __m256i s0 = at(1), s1 = at(2), s2 = at(3);
    const __m256i sc[2] = {_mm256_and_si256(s0, m3f),
                           _mm256_or_si256(_mm256_and_si256(s2, m0f), _mm256_and_si256(_mm256_srli_epi32(s0, 2), m30))};
    __m256i sums[kT];
    for (auto& v : sums) v = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) {
      const __m256i sc_lo = pick(sc[i / 2], kPickTwice[2 * i % 4]), sc_hi = pick(sc[i / 2], kPickTwice[2 * i % 4 + 1]);
      for (int c = 0; c < 8; c += kChain) {
        __m256i even[kT], odd[kT];
        for (int t = 0; t < kT; ++t) even[t] = odd[t] = _mm256_setzero_si256();
        for (int l = c; l < c + kChain; ++l) {
          const __m256i v = at(kNibbles<kFive> + 8 * i + l);
          __m256i lo = _mm256_and_si256(v, m0f), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m0f);
          if constexpr (kFive) {
            const __m256i hb = at(4 + l);  // qh's bytes of these elements
            lo = _mm256_or_si256(lo, _mm256_and_si256(shifted(hb, 4 - 2 * i), m10));
            hi = _mm256_or_si256(hi, _mm256_and_si256(shifted(hb, 3 - 2 * i), m10));
          }
          HWY_UNROLL(8)
          for (int t = 0; t < kT; ++t) {
            const int8_t* x = xt[t]->qs + 64 * i + 4 * l;
            even[t] = _mm256_add_epi16(even[t], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(x4(x))));
            odd[t] = _mm256_add_epi16(odd[t], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(x4(x + 32))));
          }
        }
        HWY_UNROLL(8)
        for (int t = 0; t < kT; ++t)
          sums[t] = _mm256_add_epi32(
              sums[t], _mm256_add_epi32(_mm256_madd_epi16(even[t], sc_lo), _mm256_madd_epi16(odd[t], sc_hi)));
      }
    }
    const __m256i mn[2] = {_mm256_and_si256(s1, m3f), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s2, 4), m0f),
                                                                      _mm256_and_si256(_mm256_srli_epi32(s1, 2), m30))};
    const __m256i dm = at(0);
    const __m256 d = f16_words(dm, 0), dmin = f16_words(dm, 1);
    HWY_UNROLL(8)
    for (int t = 0; t < kT; ++t) {
      __m256i m = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i)
        m = _mm256_add_epi32(m, _mm256_madd_epi16(pick(mn[i / 2], kPickPair[i % 2]), _mm256_set1_epi32(xm[t][i])));
      const __m256 dx = _mm256_set1_ps(xt[t]->d);
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(sums[t]), acc[t]);
      acc[t] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(m), acc[t]);
    }
  }
};
// Q6_K: a q made as a byte (as the VNNI kernel); vpmaddubsw's pairs of two slices summed in
// int16 (at most 2 * 2 * 63 * 127 = 32,004), then vpmaddwd with the scale as (sc, sc), and
// -16 (x0 + .. + x15) twice times it for the -32.
struct Q6KVec : Vec {
  static constexpr int kTile = 2;
  static constexpr int kStreams = 2;
  static __m256i scale(const Unit& u, int h, int g) {
    const int64_t at = quant_unit_offset(DType::kQ6_K, kQ6_KScaleBytes + g, 8 * h);
    if (u.ahead != 0 && h == 0) hwy::Prefetch(u.p + at + u.ahead);
    const __m256i sc = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(u.p + at)));
    return _mm256_blend_epi16(sc, _mm256_slli_epi32(sc, 16), 0xaa);
  }
  static Float d(const Unit& u, int h) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u.p + 16 * h)));
  }
  template <int kT>
  static void unit(const Unit& u, int h, const Q8KBlock* const* xt, const int32_t* const* bias, Float* acc) {
    const auto at = [&](int i) { return slice(u, h, quant_unit_offset(DType::kQ6_K, i, 0)); };
    const __m256i m0f = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
    __m256i sums[kT];
    for (auto& v : sums) v = _mm256_setzero_si256();
    HWY_UNROLL(2)
    for (int half = 0; half < 2; ++half) HWY_UNROLL(2)
    for (int l16 = 0; l16 < 2; ++l16) HWY_UNROLL(4)
    for (int q = 0; q < 4; ++q) {
      const int g = 8 * half + 2 * q + l16;
      __m256i qv[4];
      HWY_UNROLL(4)
      for (int j = 0; j < 4; ++j) {
        const __m256i ql = at(64 * half + 32 * (q % 2) + 16 * l16 + 4 * j), qh = at(128 + 32 * half + 16 * l16 + 4 * j);
        const __m256i low = q < 2 ? ql : _mm256_srli_epi16(ql, 4);
        const __m256i high = q == 0   ? _mm256_slli_epi16(qh, 4)
                             : q == 1 ? _mm256_slli_epi16(qh, 2)
                             : q == 2 ? qh
                                      : _mm256_srli_epi16(qh, 2);
        qv[j] = _mm256_or_si256(_mm256_and_si256(low, m0f), _mm256_and_si256(high, m30));
      }
      const __m256i sc = scale(u, h, g);
      HWY_UNROLL(8)
      for (int t = 0; t < kT; ++t) {
        const int8_t* x = xt[t]->qs + 128 * half + 32 * q + 16 * l16;
        const __m256i pa = _mm256_add_epi16(_mm256_maddubs_epi16(qv[0], _mm256_set1_epi32(x4(x))),
                                            _mm256_maddubs_epi16(qv[1], _mm256_set1_epi32(x4(x + 4))));
        const __m256i pb = _mm256_add_epi16(_mm256_maddubs_epi16(qv[2], _mm256_set1_epi32(x4(x + 8))),
                                            _mm256_maddubs_epi16(qv[3], _mm256_set1_epi32(x4(x + 12))));
        const __m256i minus = _mm256_set1_epi16(static_cast<int16_t>(bias[t][g] / 2));
        sums[t] = _mm256_add_epi32(
            sums[t], _mm256_add_epi32(_mm256_add_epi32(_mm256_madd_epi16(pa, sc), _mm256_madd_epi16(pb, sc)),
                                      _mm256_madd_epi16(minus, sc)));
      }
    }
    const __m256 dw = d(u, h);
    HWY_UNROLL(8)
    for (int t = 0; t < kT; ++t)
      acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(dw, _mm256_set1_ps(xt[t]->d)), _mm256_cvtepi32_ps(sums[t]), acc[t]);
  }
};
#else
// Plain integer loops over the same values, a row at a time.
struct Vec {
  struct Float {
    float v[kQuantGroup];
  };
  static constexpr int kHalves = 1;
  static Float zero() { return Float{}; }
  static void store(float* y, int, const Float& acc) { std::copy(acc.v, acc.v + kQuantGroup, y); }
};

// Q4_0: a row's unit sum from bias (q - 8 as q and -8 x).
struct Q4_0Vec : Vec {
  static constexpr int kTile = 1;
  static constexpr int kStreams = 1;
  static int32_t sum(const Unit& u, int r, const Q8Block& x, int32_t bias) {
    for (int i = 0; i < 16; ++i) {
      const int b = *byte_at<DType::kQ4_0>(u, 2 + i, r);
      bias += (b & 15) * x.qs[i] + (b >> 4) * x.qs[16 + i];
    }
    return bias;
  }
};
// Q8_0: a row's unit sum of w x (the bias, for w + 128, unused).
struct Q8_0Vec : Vec {
  static constexpr int kTile = 1;
  static constexpr int kStreams = 1;
  static int32_t sum(const Unit& u, int r, const Q8Block& x, int32_t) {
    int32_t s = 0;
    for (int i = 0; i < 32; ++i) s += static_cast<int8_t>(*byte_at<DType::kQ8_0>(u, 2 + i, r)) * x.qs[i];
    return s;
  }
};

template <bool kFive>
struct KVec : Vec {
  static constexpr int kTile = 1;
  static constexpr int kStreams = 1;
  template <int kT>
  static void unit(const Unit& u, int, const Q8KBlock* const* xt, const int32_t* const*, Float* acc) {
    for (int r = 0; r < kQuantGroup; ++r) {
      const auto byte = [&](int i) { return *byte_at<DType::kQ4_K>(u, i, r); };  // both: 4-byte slices
      uint8_t scales[12];
      for (int i = 0; i < 12; ++i) scales[i] = byte(4 + i);
      int sc[8], mn[8];
      scale_min(scales, sc, mn);
      const float d = f16_at(byte_at<DType::kQ4_K>(u, 0, r)), dmin = f16_at(byte_at<DType::kQ4_K>(u, 2, r));
      for (int t = 0; t < kT; ++t) {
        int32_t sum = 0, m = 0;
        for (int j = 0; j < 8; ++j) {
          int32_t s = 0;
          for (int e = 0; e < 32; ++e) {
            int q = byte(4 * kNibbles<kFive> + 32 * (j / 2) + e) >> (4 * (j % 2)) & 15;
            if constexpr (kFive) q |= (byte(16 + e) >> j & 1) << 4;
            s += q * xt[t]->qs[32 * j + e];
          }
          sum += sc[j] * s;
          m += mn[j] * (xt[t]->bsums[2 * j] + xt[t]->bsums[2 * j + 1]);
        }
        float& a = acc[t].v[r];
        a = std::fma(d * xt[t]->d, static_cast<float>(sum), a);
        a = std::fma(-(dmin * xt[t]->d), static_cast<float>(m), a);
      }
    }
  }
};
struct Q6KVec : Vec {
  static constexpr int kTile = 1;
  static constexpr int kStreams = 1;
  template <int kT>
  static void unit(const Unit& u, int, const Q8KBlock* const* xt, const int32_t* const* bias, Float* acc) {
    for (int r = 0; r < kQuantGroup; ++r) {
      const auto byte = [&](int i) { return *byte_at<DType::kQ6_K>(u, i, r); };
      const float d = f16_at(byte_at<DType::kQ6_K>(u, kQ6_KD, r));
      for (int t = 0; t < kT; ++t) {
        int32_t sum = 0;
        for (int g = 0; g < 16; ++g) {
          int32_t s = bias[t][g];
          for (int e = 16 * g; e < 16 * g + 16; ++e) {
            // Element e = 128 half + 32 q + l: ql[64 half + 32 (q % 2) + l], nibble q / 2; qh[32 half + l], bits 2 q.
            const int half = e / 128, q = e % 128 / 32, l = e % 32;
            const int low = byte(64 * half + 32 * (q % 2) + l) >> (4 * (q / 2)) & 15;
            const int high = byte(128 + 32 * half + l) >> (2 * q) & 3;
            s += (low | high << 4) * xt[t]->qs[e];
          }
          sum += static_cast<int8_t>(byte(kQ6_KScaleBytes + g)) * s;
        }
        float& a = acc[t].v[r];
        a = std::fma(d * xt[t]->d, static_cast<float>(sum), a);
      }
    }
  }
};
#endif
using Q4KVec = KVec<false>;
using Q5KVec = KVec<true>;

// Q8_0 and Q4_0 (quant_dot.h; V: Q8_0Vec or Q4_0Vec, kT its type): for each of a group's rows
// and each token, acc = fma(d_w * d_x, float(P), acc) unit by unit, P the unit's exact integer
// sum of its 32 products q x (V::sums, from the token's bias where a kernel needs one: Q4_0's
// -8 (x0 + .. + x31) for q - 8, Q8_0's -128 (..) for w + 128). tile32 takes kTile tokens
// against one group (token t's unit u at x[t * units + u], its bias likewise; its 16 outputs
// at y + t * ldy); streams32 one token against kS groups side by side, both halves of a unit
// together so that its bytes are read once from memory.
template <DType kT>
constexpr int kUnitLines = (quant_unit_bytes(kT) + 63) / 64;  // a unit's lines, to ask ahead

template <typename V, DType kT, int kTile>
TESSERA_VNNI HWY_INLINE void tile32(const uint8_t* g, int64_t units, const Q8Block* x, const int32_t* bias, float* y,
                                    int64_t ldy) {
  constexpr int64_t kStep = quant_unit_bytes(kT);
#if TESSERA_QUANT_DOT_AVX2
  for (int h = 0; h < V::kHalves; ++h) {
    typename V::Float acc[kTile];
    for (auto& a : acc) a = V::zero();
    for (int64_t u = 0; u < units; ++u) {
      const Unit unit{g + u * kStep};
      if (h == 0)
        for (int l = 0; l < kUnitLines<kT>; ++l) hwy::Prefetch(unit.p + kPrefetchAhead + 64 * l);
      typename V::Weights w;
      V::weights(unit, h, w);
      const typename V::Float dw = V::d(unit, h);
      for (int t = 0; t < kTile; ++t) {
        const Q8Block& xt = x[t * units + u];
        acc[t] = V::step(dw, xt.d, V::sums(w, xt, bias[t * units + u]), acc[t]);
      }
    }
    for (int t = 0; t < kTile; ++t) V::store(y + t * ldy, h, acc[t]);
  }
#else
  for (int t = 0; t < kTile; ++t)
    for (int r = 0; r < kQuantGroup; ++r) {
      float acc = 0.0f;
      for (int64_t u = 0; u < units; ++u) {
        const Unit unit{g + u * kStep};
        const Q8Block& xt = x[t * units + u];
        const int32_t sum = V::sum(unit, static_cast<int>(r), xt, bias[t * units + u]);
        acc = std::fma(f16_at(byte_at<kT>(unit, 0, r)) * xt.d, static_cast<float>(sum), acc);
      }
      y[t * ldy + r] = acc;
    }
#endif
}

template <typename V, DType kT, int kS>
TESSERA_VNNI HWY_INLINE void streams32(const uint8_t* const* g, int64_t units, const Q8Block* x, const int32_t* bias,
                                       float* const* y) {
#if TESSERA_QUANT_DOT_AVX2
  constexpr int64_t kStep = quant_unit_bytes(kT);
  typename V::Float acc[kS][V::kHalves];
  for (auto& a : acc)
    for (auto& half : a) half = V::zero();
  for (int64_t u = 0; u < units; ++u) {
    for (int s = 0; s < kS; ++s) {
      const Unit unit{g[s] + u * kStep};
      for (int l = 0; l < kUnitLines<kT>; ++l) hwy::Prefetch(unit.p + kPrefetchAhead + 64 * l);
      for (int h = 0; h < V::kHalves; ++h) {
        typename V::Weights w;
        V::weights(unit, h, w);
        acc[s][h] = V::step(V::d(unit, h), x[u].d, V::sums(w, x[u], bias[u]), acc[s][h]);
      }
    }
  }
  for (int s = 0; s < kS; ++s)
    for (int h = 0; h < V::kHalves; ++h) V::store(y[s], h, acc[s][h]);
#else
  for (int s = 0; s < kS; ++s) tile32<V, kT, 1>(g[s], units, x, bias, y[s], 0);
#endif
}

// One token against 16 plain rows (row_bytes apart, not placed in groups) of Q8_0 or Q4_0, in
// tile32's order: each row's unit takes its 32 products into its own lanes, the lanes are
// added (exact), then the same f32 step for the 16 rows, so the bits are tile32's. Decode of
// weights left as mapped: about 70 % of the placed rows' speed, where a group copied a call
// ran at a quarter (no prefetches: asking each row's line 2 KiB ahead gained nothing).
#if HWY_COMPILER_GCC_ACTUAL
#pragma GCC diagnostic push  // as the Vec structs: GCC 12's 512-bit intrinsics
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
template <DType kT>
TESSERA_VNNI HWY_INLINE void plain32(const uint8_t* w, int64_t row_bytes, int64_t units, const Q8Block* x,
                                     const int32_t* bias, float* y) {
  constexpr int64_t kBytes = static_cast<int64_t>(dtype_block_bytes(kT));
#if TESSERA_QUANT_DOT_VNNI
  const __m512i rows = _mm512_mullo_epi32(_mm512_set1_epi32(static_cast<int32_t>(row_bytes)),
                                          _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15));
  // P's lanes after the adds below (rows 0, 2, 4, 6, 1, 3, ...) back in row order.
  const __m512i order = _mm512_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
  __m512 acc = _mm512_setzero_ps();
  for (int64_t u = 0; u < units; ++u) {
    const uint8_t* b = w + u * kBytes;
    const __m512i xv = _mm512_broadcast_i64x4(load32(x[u].qs));
    // Rows 2i and 2i + 1's lanes (8 each: 128-bit lanes 0-1 and 2-3) of their 32 products.
    __m512i lanes[8];
    for (int i = 0; i < 8; ++i) {
      const uint8_t* a = b + 2 * i * row_bytes + 2;
      __m512i q;
      if constexpr (kT == DType::kQ8_0) {
        q = _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(load32(a)), load32(a + row_bytes), 1),
                             _mm512_set1_epi8(static_cast<char>(0x80)));  // w + 128
      } else {  // each row's 16 bytes twice, the second time shifted to its high nibbles
        const __m512i v = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)))),
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + row_bytes))), 1);
        q = _mm512_and_si512(_mm512_srlv_epi64(v, _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4)), _mm512_set1_epi8(0x0f));
      }
      lanes[i] = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q, xv);
    }
    __m512i s[4], t[2];
    for (int i = 0; i < 4; ++i)
      s[i] = _mm512_add_epi32(_mm512_unpacklo_epi32(lanes[2 * i], lanes[2 * i + 1]),
                              _mm512_unpackhi_epi32(lanes[2 * i], lanes[2 * i + 1]));
    for (int j = 0; j < 2; ++j)
      t[j] = _mm512_add_epi32(_mm512_unpacklo_epi64(s[2 * j], s[2 * j + 1]),
                              _mm512_unpackhi_epi64(s[2 * j], s[2 * j + 1]));
    const __m512i p = _mm512_add_epi32(_mm512_shuffle_i32x4(t[0], t[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                       _mm512_shuffle_i32x4(t[0], t[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i sum = _mm512_add_epi32(_mm512_permutexvar_epi32(order, p), _mm512_set1_epi32(bias[u]));
    const __m512 dw = Vec::f16_words(_mm512_i32gather_epi32(rows, b, 1), 0);
    acc = Block32Vec::step(dw, x[u].d, sum, acc);
  }
  _mm512_storeu_ps(y, acc);
#elif TESSERA_QUANT_DOT_AVX2
  const __m256i one = _mm256_set1_epi16(1);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* wh = w + 8 * h * row_bytes;
    const __m256i rows = _mm256_mullo_epi32(_mm256_set1_epi32(static_cast<int32_t>(row_bytes)),
                                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    __m256 acc = _mm256_setzero_ps();
    for (int64_t u = 0; u < units; ++u) {
      const uint8_t* b = wh + u * kBytes;
      const __m256i xv = load32(x[u].qs);
      // Each row's 8 int32 lanes of its 32 products.
      __m256i lanes[8];
      for (int r = 0; r < 8; ++r) {
        const uint8_t* a = b + r * row_bytes + 2;
        __m256i pairs;
        if constexpr (kT == DType::kQ8_0) {  // |w| times x sign(w), as Q8_0Vec
          const __m256i v = load32(a);
          pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(v, v), _mm256_sign_epi8(xv, v));
        } else {
          const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(a));
          const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0f));
          pairs = _mm256_maddubs_epi16(q, xv);
        }
        lanes[r] = _mm256_madd_epi16(pairs, one);
      }
      const __m256i lo =
          _mm256_hadd_epi32(_mm256_hadd_epi32(lanes[0], lanes[1]), _mm256_hadd_epi32(lanes[2], lanes[3]));
      const __m256i hi =
          _mm256_hadd_epi32(_mm256_hadd_epi32(lanes[4], lanes[5]), _mm256_hadd_epi32(lanes[6], lanes[7]));
      __m256i sum = _mm256_add_epi32(_mm256_permute2x128_si256(lo, hi, 0x20), _mm256_permute2x128_si256(lo, hi, 0x31));
      if constexpr (kT == DType::kQ4_0) sum = _mm256_add_epi32(sum, _mm256_set1_epi32(bias[u]));  // q - 8
      const __m256 dw = Vec::f16_words(_mm256_i32gather_epi32(reinterpret_cast<const int*>(b), rows, 1), 0);
      acc = Block32Vec::step(dw, x[u].d, sum, acc);
    }
    _mm256_storeu_ps(y + 8 * h, acc);
  }
#else
  for (int r = 0; r < kQuantGroup; ++r) {
    float acc = 0.0f;
    for (int64_t u = 0; u < units; ++u) {
      const uint8_t* b = w + r * row_bytes + u * kBytes;
      int32_t sum = 0;
      if constexpr (kT == DType::kQ8_0) {
        for (int i = 0; i < 32; ++i) sum += static_cast<int8_t>(b[2 + i]) * x[u].qs[i];
      } else {
        sum = bias[u];
        for (int i = 0; i < 16; ++i) sum += (b[2 + i] & 15) * x[u].qs[i] + (b[2 + i] >> 4) * x[u].qs[16 + i];
      }
      acc = std::fma(f16_at(b) * x[u].d, static_cast<float>(sum), acc);
    }
    y[r] = acc;
  }
#endif
}
#if HWY_COMPILER_GCC_ACTUAL
#pragma GCC diagnostic pop
#endif

// The K types (V: Q4KVec, Q5KVec or Q6KVec) one super-block unit at a time: V::unit takes a unit
// against kT tokens (their blocks xt[t], what per_unit made of them e[t]) into acc[t].
template <typename V, DType kT, int kPerUnit, int kTile>
TESSERA_VNNI HWY_INLINE void k_tile(const uint8_t* g, int64_t units, const Q8KBlock* x, const int32_t* e, float* y,
                                    int64_t ldy) {
  typename V::Float acc[V::kHalves][kTile];
  for (auto& half : acc)
    for (auto& a : half) a = V::zero();
  for (int64_t u = 0; u < units; ++u) {
    const Unit unit{g + u * quant_unit_bytes(kT)};
    const Q8KBlock* xt[kTile];
    const int32_t* et[kTile];
    for (int t = 0; t < kTile; ++t) {
      xt[t] = x + t * units + u;
      et[t] = e + kPerUnit * (t * units + u);
    }
    for (int h = 0; h < V::kHalves; ++h) V::template unit<kTile>(unit, h, xt, et, acc[h]);
  }
  for (int h = 0; h < V::kHalves; ++h)
    for (int t = 0; t < kTile; ++t) V::store(y + t * ldy, h, acc[h][t]);
}

// Each stream asks for its bytes 8 KiB on, a line at each line it reads (a stream of a
// group's units reads 16 rows' bytes at once, so 2048 bytes on, as quant_dot.cpp's rows ask,
// left the dev VM's memory idle, as did a unit's lines asked for all at once).
template <typename V, DType kT, int kPerUnit, int kS>
TESSERA_VNNI HWY_INLINE void k_streams(const uint8_t* const* g, int64_t units, const Q8KBlock* x, const int32_t* e,
                                       float* const* y) {
  constexpr int64_t kAhead = 4 * kPrefetchAhead;
  typename V::Float acc[kS][V::kHalves];
  for (auto& a : acc)
    for (auto& half : a) half = V::zero();
  for (int64_t u = 0; u < units; ++u) {
    const Q8KBlock* xt = x + u;
    const int32_t* et = e + kPerUnit * u;
    for (int s = 0; s < kS; ++s) {
      const Unit unit{g[s] + u * quant_unit_bytes(kT), kAhead};
      for (int h = 0; h < V::kHalves; ++h) V::template unit<1>(unit, h, &xt, &et, &acc[s][h]);
    }
  }
  for (int s = 0; s < kS; ++s)
    for (int h = 0; h < V::kHalves; ++h) V::store(y[s], h, acc[s][h]);
}

// The kernels of each type, and what they take from each token's unit besides its block
// (kPerUnit int32): Q4_0's bias, Q4_K's pairs of sub-block sums, Q6_K's biases.
template <DType kT>
struct Kernels;
// Q8_0's and Q4_0's kernels (V, kT as tile32's); a token's unit comes with its bias, -kOffset
// times the sum of its x.
template <typename V, DType kT, int kOffset>
struct Kernels32 {
  using Act = Q8Block;
  static constexpr int kPerUnit = 1, kTile = V::kTile, kStreams = V::kStreams;
  static void per_unit(const Q8Block& x, int32_t* out) {
    int32_t sum = 0;
    for (const int8_t q : x.qs) sum += q;
    out[0] = -kOffset * sum;
  }
  template <int kN>
  TESSERA_VNNI static void tile(const uint8_t* g, int64_t units, const Act* x, const int32_t* e, float* y,
                                int64_t ldy) {
    tile32<V, kT, kN>(g, units, x, e, y, ldy);
  }
  template <int kS>
  TESSERA_VNNI static void streams(const uint8_t* const* g, int64_t units, const Act* x, const int32_t* e,
                                   float* const* y) {
    streams32<V, kT, kS>(g, units, x, e, y);
  }
};
template <>
struct Kernels<DType::kQ8_0> : Kernels32<Q8_0Vec, DType::kQ8_0, 128> {};
template <>
struct Kernels<DType::kQ4_0> : Kernels32<Q4_0Vec, DType::kQ4_0, 8> {};
// The K types' kernels, V's unit and its tile and stream counts.
template <typename V, DType kT, int kPerUnitInts>
struct KKernels {
  using Act = Q8KBlock;
  static constexpr int kPerUnit = kPerUnitInts, kTile = V::kTile, kStreams = V::kStreams;
  template <int kN>
  TESSERA_VNNI static void tile(const uint8_t* g, int64_t units, const Act* x, const int32_t* e, float* y,
                                int64_t ldy) {
    k_tile<V, kT, kPerUnit, kN>(g, units, x, e, y, ldy);
  }
  template <int kS>
  TESSERA_VNNI static void streams(const uint8_t* const* g, int64_t units, const Act* x, const int32_t* e,
                                   float* const* y) {
    k_streams<V, kT, kPerUnit, kS>(g, units, x, e, y);
  }
};
// Q4_K (quant_dot.h): for each of a group's rows and each token, unit by unit
//   acc = fma(d_w d_x, float(P), acc), then acc = fma(-(dmin_w d_x), float(M), acc),
// P = sum over sub-blocks j of sc_j times its 32 products q x, M = sum of m_j X_j (X_j the
// token's sum of the sub-block's x: its bsums 2j and 2j + 1). A token's unit comes with its
// 4 pairs (X_2i, X_2i+1) as int16 in an int32.
template <>
struct Kernels<DType::kQ4_K> : KKernels<Q4KVec, DType::kQ4_K, 4> {
  static void per_unit(const Q8KBlock& x, int32_t* out) {
    for (int i = 0; i < 4; ++i) {
      const auto even = static_cast<uint16_t>(x.bsums[4 * i] + x.bsums[4 * i + 1]),
                 odd = static_cast<uint16_t>(x.bsums[4 * i + 2] + x.bsums[4 * i + 3]);
      out[i] = static_cast<int32_t>(uint32_t{even} | uint32_t{odd} << 16);
    }
  }
};
// Q5_K: as Q4_K, its values with a fifth bit.
template <>
struct Kernels<DType::kQ5_K> : KKernels<Q5KVec, DType::kQ5_K, 4> {
  static void per_unit(const Q8KBlock& x, int32_t* out) { Kernels<DType::kQ4_K>::per_unit(x, out); }
};
// Q6_K (quant_dot.h): for each of a group's rows and each token, unit by unit
//   acc = fma(d_w d_x, float(P), acc), P = sum over its 16 sub-blocks g of sc_g times the
// sub-block's sum of (q - 32) x. A token's unit comes with -32 times each sub-block's sum of
// x (its bsums), where that sum starts.
template <>
struct Kernels<DType::kQ6_K> : KKernels<Q6KVec, DType::kQ6_K, 16> {
  static void per_unit(const Q8KBlock& x, int32_t* out) {
    for (int g = 0; g < 16; ++g) out[g] = -32 * x.bsums[g];
  }
};

// Rows of a type (in groups, or plain: then a group at a time copied into groups first)
// against `tokens` tokens' x, group by group, in tiles of kTile tokens and then one at a
// time; one token over kStreams parts of grouped rows side by side, each read as one
// sequential stream (as quant_dot.cpp's decode), then the groups left over one at a time.
template <DType kT>
TESSERA_VNNI void rows_of(const uint8_t* w, int64_t rows, int64_t k, const typename Kernels<kT>::Act* x, int64_t tokens,
                          float* y, int64_t ldy, bool grouped) {
  using K = Kernels<kT>;
  const int64_t units = k / dtype_block_elements(kT), row_bytes = static_cast<int64_t>(dtype_bytes(kT, k));
  thread_local std::vector<int32_t> per_unit;
  per_unit.resize(static_cast<size_t>(tokens * units * K::kPerUnit));
  for (int64_t i = 0; i < tokens * units; ++i) K::per_unit(x[i], per_unit.data() + i * K::kPerUnit);
  const int32_t* e = per_unit.data();
  thread_local hwy::AlignedFreeUniquePtr<uint8_t[]> scratch;  // a group of plain rows
  thread_local int64_t capacity = 0;
  if (!grouped && units * quant_unit_bytes(kT) > capacity) {
    capacity = units * quant_unit_bytes(kT);
    scratch = hwy::AllocateAligned<uint8_t>(static_cast<size_t>(capacity));
    TS_CHECK(scratch, "[cpu] cannot allocate a ", dtype_name(kT), " group of ", units, " units");
  }
  int64_t r0 = 0;
  if constexpr (block32(kT)) {  // plain rows' decode, whole groups of 16
    // (its vectors address 16 rows by int32 offsets: rows of more bytes take the copies below)
    if (tokens == 1 && !grouped && row_bytes <= INT32_MAX / kQuantGroup)
      for (; r0 + kQuantGroup <= rows; r0 += kQuantGroup)
        plain32<kT>(w + r0 * row_bytes, row_bytes, units, x, e, y + r0);
  }
  if (tokens == 1 && grouped) {
    const int64_t part = rows / kQuantGroup / K::kStreams * kQuantGroup;
    for (; r0 < part; r0 += kQuantGroup) {
      const uint8_t* g[K::kStreams];
      float* out[K::kStreams];
      for (int s = 0; s < K::kStreams; ++s) {
        g[s] = w + (r0 + s * part) * row_bytes;
        out[s] = y + r0 + s * part;
      }
      K::template streams<K::kStreams>(g, units, x, e, out);
    }
    // The groups left over as one stream each (the streams' kernels ask for bytes ahead).
    for (r0 = K::kStreams * part; r0 < rows; r0 += kQuantGroup) {
      const uint8_t* g = w + r0 * row_bytes;
      float* out = y + r0;
      K::template streams<1>(&g, units, x, e, &out);
    }
  }
  HWY_ALIGN float few[K::kTile * kQuantGroup];  // a group of fewer than 16 rows' outputs
  for (; r0 < rows; r0 += kQuantGroup) {
    const int64_t n = std::min(kQuantGroup, rows - r0);
    const uint8_t* g = w + r0 * row_bytes;
    if (!grouped) {
      quant_group(kT, g, row_bytes, n, units, scratch.get());
      g = scratch.get();
    }
    const auto tile = [&]<int kTile>(int64_t t0) {
      float* out = n == kQuantGroup ? y + t0 * ldy + r0 : few;
      const int64_t out_step = n == kQuantGroup ? ldy : kQuantGroup;
      K::template tile<kTile>(g, units, x + t0 * units, e + t0 * units * K::kPerUnit, out, out_step);
      if (n < kQuantGroup)
        for (int t = 0; t < kTile; ++t)
          std::copy(few + t * kQuantGroup, few + t * kQuantGroup + n, y + (t0 + t) * ldy + r0);
    };
    int64_t t0 = 0;
    for (; t0 + K::kTile <= tokens; t0 += K::kTile) tile.template operator()<K::kTile>(t0);
    for (; t0 < tokens; ++t0) tile.template operator()<1>(t0);
  }
}

// Whether placed Q8_0 and Q4_0 take AMX-INT8 tiles: on the VNNI target (not where TESSERA_ISA holds
// dispatch to AVX2), where the CPU has them and TESSERA_AMX is not "0".
bool QuantTilesActive() { return TESSERA_QUANT_DOT_VNNI && amx::int8_enabled(); }

int64_t QuantDecodeRows(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0: return Kernels<DType::kQ8_0>::kStreams * kQuantGroup;
    case DType::kQ4_0: return Kernels<DType::kQ4_0>::kStreams * kQuantGroup;
    case DType::kQ4_K: return Kernels<DType::kQ4_K>::kStreams * kQuantGroup;
    case DType::kQ5_K: return Kernels<DType::kQ5_K>::kStreams * kQuantGroup;
    case DType::kQ6_K: return Kernels<DType::kQ6_K>::kStreams * kQuantGroup;
    default: return kQuantGroup;
  }
}

void QuantGroupRows(DType dtype, const void* w, int64_t rows, int64_t k, const void* xq, int64_t tokens, float* y,
                    int64_t ldy, bool grouped, const amx::PackedX* packed) {
  const auto* wb = static_cast<const uint8_t*>(w);
  // Placed Q8_0 and Q4_0 take the tiles 16 tokens at a time (the same bits), the kernels
  // below the tokens left over.
  const int64_t tiled = block32(dtype) && grouped && QuantTilesActive() ? tokens / 16 * 16 : 0;
  if (tiled > 0) {
    const int64_t units = k / dtype_block_elements(dtype);
    amx::block32_rows(dtype, wb, rows, units, xq, tiled, y, ldy, packed);
    if (tiled == tokens) return;
    xq = static_cast<const Q8Block*>(xq) + tiled * units;
    y += tiled * ldy;
    tokens -= tiled;
  }
  switch (dtype) {
    case DType::kQ8_0:
      return rows_of<DType::kQ8_0>(wb, rows, k, static_cast<const Q8Block*>(xq), tokens, y, ldy, grouped);
    case DType::kQ4_0:
      return rows_of<DType::kQ4_0>(wb, rows, k, static_cast<const Q8Block*>(xq), tokens, y, ldy, grouped);
    case DType::kQ4_K:
      return rows_of<DType::kQ4_K>(wb, rows, k, static_cast<const Q8KBlock*>(xq), tokens, y, ldy, grouped);
    case DType::kQ5_K:
      return rows_of<DType::kQ5_K>(wb, rows, k, static_cast<const Q8KBlock*>(xq), tokens, y, ldy, grouped);
    default: return rows_of<DType::kQ6_K>(wb, rows, k, static_cast<const Q8KBlock*>(xq), tokens, y, ldy, grouped);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tessera::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(QuantGroupRows);
HWY_EXPORT(QuantTilesActive);
HWY_EXPORT(QuantDecodeRows);

bool quant_tiles_active() { return HWY_DYNAMIC_DISPATCH(QuantTilesActive)(); }
int64_t quant_decode_rows(DType dtype) { return HWY_DYNAMIC_DISPATCH(QuantDecodeRows)(dtype); }

void quant_group_rows(DType dtype, const void* w, int64_t rows, int64_t k, const void* xq, int64_t tokens, float* y,
                      int64_t ldy, bool grouped, const amx::PackedX* packed) {
  TS_CHECK(takes_quant_groups(dtype), dtype_name(dtype), " rows in groups");
  TS_CHECK(!grouped || rows % kQuantGroup == 0, dtype_name(dtype), " rows (", rows, ") in groups of ", kQuantGroup);
  HWY_DYNAMIC_DISPATCH(QuantGroupRows)(dtype, w, rows, k, xq, tokens, y, ldy, grouped, packed);
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
