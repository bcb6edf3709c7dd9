// Integer dot products of K-quant weights with 8-bit activations (quant_dot.h),
// compiled once per target ISA (Highway's foreach_target.h re-includes this file) and
// dispatched at run time. The x86 targets with AVX2 (AVX2 and the AVX-512 ones) use
// its byte instructions directly, as ggml does (vpsignb, vpmaddubsw, vpmaddwd); the
// other targets compute the same integers with plain loops. Both then do the same
// f32 operations in the order quant_dot.h states, so they give the same bits.
// Where each case goes: dot_unit (a row's unit against a tile of tokens) and dot_block
// serve every target; AVX2 without VNNI adds the 4-row tiles dot_rows_k (prefill) and
// decode_quads (one token, the 4 streams' rows side by side); AVX-512 with VNNI takes 2
// rows a 512-bit register: decode_pairs (one token) and prefill_pairs_k (tiles of tokens).
// Each row keeps one accumulator (quant_dot.h), as quant_groups.cpp's kernels, which take
// the rows from 16 or 32 tokens on (quant_dot_rows); Q8_0 and Q4_0 have only those.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/quant_dot.cpp"
// AVX3_DL (AVX-512 with VNNI, VBMI2, ...) is compiled only on request in Highway 1.0:
// its vpdpbusd halves the decode kernels' instructions (below).
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL
#endif
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/quant_act.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_groups.h"
#include "backend/cpu/quant_isa-inl.h"
#include "backend/cpu/quant_unpack-inl.h"
#include "backend/cpu/weight_layout.h"
#include "core/check.h"
#include "hwy/aligned_allocator.h"
#include "hwy/cache_control.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {

// Every type here meets Q8_K activations; a unit is 8 groups of 32 elements. A row keeps
// one f32 accumulator (quant_dot.h, as quant_groups.cpp's kernels): a unit's lanes P[l] are
// added first (exact), then one fma, and for Q4_K and Q5_K (kMins) a second with their mins.
constexpr int kGroups = 8;
template <DType kT>
constexpr bool kMins = kT == DType::kQ4_K || kT == DType::kQ5_K;

// A unit's mins term (Q4_K, Q5_K): acc.one = fma(-(dmin_w * d_x), float(M), acc.one).
// (Acc: each target's.)
template <typename Acc>
HWY_INLINE void add_mins(float dmin_dx, float mins, Acc& acc) {
  acc.one = std::fma(-dmin_dx, mins, acc.one);
}

#if TESSERA_QUANT_DOT_AVX2

// Each unit is unpacked from its bytes straight into registers, one vector per group of
// 32 values, and multiplied at once (no array between: storing halves and reloading
// whole vectors stalls store forwarding, and arrays of 8 vectors a row spill).

HWY_INLINE uint64_t u16_at(const uint8_t* p) { return uint64_t{p[0]} | uint64_t{p[1]} << 8; }
// The f16 at offset `at` of 4 units as 4 words.
HWY_INLINE uint64_t f16x4(const uint8_t* const* b, size_t at) {
  return u16_at(b[0] + at) | u16_at(b[1] + at) << 16 | u16_at(b[2] + at) << 32 | u16_at(b[3] + at) << 48;
}

// The products of one group as 16 int16 pairs (elements 2 j, 2 j + 1), for weights w in
// [0, 63] (unsigned) and x in [-127, 127]: at most 2 * 63 * 127, no saturation.
HWY_INLINE __m256i pairs_u(__m256i w, __m256i x) { return _mm256_maddubs_epi16(w, x); }

// acc + each int32 lane's 4 products of unsigned w and signed x (at most 2 * 128 * 127
// a pair, so vpmaddubsw does not saturate): one vpdpbusd with VNNI.
TESSERA_VNNI HWY_INLINE __m256i dot4_add(__m256i acc, __m256i w, __m256i x) {
#if TESSERA_QUANT_DOT_VNNI
  return _mm256_dpbusd_epi32(acc, w, x);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs_u(w, x), _mm256_set1_epi16(1)));
#endif
}
// acc + the int16 pairs of a times b, summed in pairs: one vpdpwssd with VNNI.
TESSERA_VNNI HWY_INLINE __m256i madd_add(__m256i acc, __m256i a, __m256i b) {
#if TESSERA_QUANT_DOT_VNNI
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// A row's accumulator.
struct Acc {
  float one;
};

HWY_INLINE Acc zero_acc() { return Acc{0.0f}; }

// The 8 int32 lanes of p added (exact).
HWY_INLINE int32_t lanes_sum(__m256i p) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(p), _mm256_extracti128_si256(p, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}
// Each of 4 rows' 8 int32 lanes added: [P0, P1, P2, P3] (exact).
HWY_INLINE __m128i lanes_sums(__m256i p0, __m256i p1, __m256i p2, __m256i p3) {
  const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(p0, p1), _mm256_hadd_epi32(p2, p3));
  return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// acc.one = fma(d_w * d_x, float(P[0] + .. + P[7]), acc.one), P the unit's 8 int32 lanes.
HWY_INLINE void add_unit(float dw, float dx, __m256i p, Acc& acc) {
  acc.one = std::fma(dw * dx, static_cast<float>(lanes_sum(p)), acc.one);
}

// Byte patterns for vpshufb that repeat int16 element `lo` of each 128-bit half over the
// low half and element `hi` over the high half: one sub-scale per lane group for madd.
struct alignas(32) Pick {
  uint8_t bytes[32];
};
constexpr Pick repeat16(int lo, int hi) {
  Pick p{};
  for (int j = 0; j < 16; ++j) {
    p.bytes[j] = static_cast<uint8_t>(2 * lo + j % 2);
    p.bytes[16 + j] = static_cast<uint8_t>(2 * hi + j % 2);
  }
  return p;
}
// Q4_K/Q5_K group g: sub-scale g on all 8 lanes (the 8 scales in both halves).
constexpr Pick kPickK[8] = {repeat16(0, 0), repeat16(1, 1), repeat16(2, 2), repeat16(3, 3),
                            repeat16(4, 4), repeat16(5, 5), repeat16(6, 6), repeat16(7, 7)};
// Q6_K group i of a half: scale 2 i on lanes 0-3, 2 i + 1 on lanes 4-7 (that half's
// 8 scales in both halves).
constexpr Pick kPick6[4] = {repeat16(0, 1), repeat16(2, 3), repeat16(4, 5), repeat16(6, 7)};
// For vpackssdw's halves (pair_k, pair_q6_k): int16 element w[q] on words 4 q .. 4 q + 3 of
// the 32 bytes (words 0-3 and 4-7 of the low 128-bit half, then of the high one).
constexpr Pick quarters16(int w0, int w1, int w2, int w3) {
  const int w[4] = {w0, w1, w2, w3};
  Pick p{};
  for (int j = 0; j < 32; ++j) p.bytes[j] = static_cast<uint8_t>(2 * w[j / 8] + j % 2);
  return p;
}
// Q4_K/Q5_K sub-blocks 2 i and 2 i + 1: scale 2 i on words 0-3 of each 128-bit lane, 2 i + 1 on
// words 4-7.
constexpr Pick kPickKPairs[4] = {quarters16(0, 1, 0, 1), quarters16(2, 3, 2, 3), quarters16(4, 5, 4, 5),
                                 quarters16(6, 7, 6, 7)};
// Q6_K groups i and i + 1 of a half (i even): scales 2 i and 2 i + 2 on words 0-3 and 4-7 of
// the low 128-bit lane, 2 i + 1 and 2 i + 3 on those of the high one.
constexpr Pick kPick6Pairs[2] = {quarters16(0, 2, 1, 3), quarters16(4, 6, 5, 7)};

HWY_INLINE __m256i pick(__m256i scales, const Pick& p) {
  return _mm256_shuffle_epi8(scales, _mm256_load_si256(reinterpret_cast<const __m256i*>(p.bytes)));
}

// dot_unit<kT, kTile>(b, x, x_step, acc) (below): the unit at b against kTile tokens'
// activation blocks (token t's at x + t * x_step) into acc[t]. Each group's weight
// vector is made once and meets every token.

// Q4_K and Q5_K: sub-block g's values are the low (even g) or high (odd g) nibbles of
// qs[32 (g / 2) ..], plus (Q5_K) bit g of qh[l] as bit 4; the 12 bytes at b + 4 hold
// the 6-bit scales and mins (scale_min's layout), unpacked here 4 at a time into a
// byte each: sc the 8 scales, mn the 8 mins.
HWY_INLINE void k_scales_mins(const uint8_t* b, uint64_t& sc, uint64_t& mn) {
  uint32_t u[3];
  std::memcpy(u, b + 4, sizeof u);
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, kHigh = 0x30303030;
  sc = (u[0] & k6) | uint64_t{(u[2] & k4) | ((u[0] >> 2) & kHigh)} << 32;
  mn = (u[1] & k6) | uint64_t{((u[2] >> 4) & k4) | ((u[1] >> 2) & kHigh)} << 32;
}

// The lanes P of a Q4_K/Q5_K unit (its scales sc) against kTile tokens into p[t]; each
// group's weight vector is made once and meets every token.
template <DType kT, int kTile>
TESSERA_VNNI HWY_INLINE void k_lanes(const uint8_t* b, uint64_t sc, const Q8KBlock* x, int64_t x_step, __m256i* p) {
  constexpr bool kFive = kT == DType::kQ5_K;
  const __m256i scales = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc))));
  const uint8_t* qs = kFive ? b + 48 : b + 16;
  const __m256i m4 = _mm256_set1_epi8(0x0f);
  [[maybe_unused]] const __m256i bit4 = _mm256_set1_epi8(0x10);
  [[maybe_unused]] __m256i qh = kFive ? load32(b + 16) : __m256i{};
  for (int t = 0; t < kTile; ++t) p[t] = _mm256_setzero_si256();
  for (int i = 0; i < 4; ++i) {
    const __m256i v = load32(qs + 32 * i);
    __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    if constexpr (kFive) {  // bits 2 i and 2 i + 1 of qh (shifted down by 2 i) to bit 4
      lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), bit4));
      hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), bit4));
      qh = _mm256_srli_epi16(qh, 2);
    }
    const __m256i scale_lo = pick(scales, kPickK[2 * i]), scale_hi = pick(scales, kPickK[2 * i + 1]);
    for (int t = 0; t < kTile; ++t) {
      const int8_t* xq = x[t * x_step].qs + 64 * i;
      p[t] = madd_add(p[t], pairs_u(lo, load32(xq)), scale_lo);
      p[t] = madd_add(p[t], pairs_u(hi, load32(xq + 32)), scale_hi);
    }
  }
}

// The token's 8 sums of bsums in pairs (bsums[2 j] + bsums[2 j + 1]) as int16.
HWY_INLINE __m128i bsum_pairs(const Q8KBlock& x) {
  return _mm_hadd_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums)),
                        _mm_loadu_si128(reinterpret_cast<const __m128i*>(x.bsums + 8)));
}

template <DType kT, int kTile>
TESSERA_VNNI HWY_INLINE void dot_unit_k(const uint8_t* b, const Q8KBlock* x, int64_t x_step, Acc* acc) {
  uint64_t sc, mn;
  k_scales_mins(b, sc, mn);
  __m256i p[kTile];
  k_lanes<kT, kTile>(b, sc, x, x_step, p);
  const float d = f16_at(b), dmin = f16_at(b + 2);
  const __m128i mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(mn)));
  for (int t = 0; t < kTile; ++t) {
    const Q8KBlock& xt = x[t * x_step];
    add_unit(d, xt.d, p[t], acc[t]);
    // M = sum_j min[j] * (bsums[2 j] + bsums[2 j + 1]), exact in int32.
    __m128i m = _mm_madd_epi16(mins, bsum_pairs(xt));
    m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0x4e));
    m = _mm_add_epi32(m, _mm_shuffle_epi32(m, 0xb1));
    add_mins(dmin * xt.d, static_cast<float>(_mm_cvtsi128_si32(m)), acc[t]);
  }
}

// Q6_K: group g = 4 h + i (h the half of 128) takes its low 4 bits from nibble i / 2 of
// ql[64 h + 32 (i % 2) ..] and its high 2 bits from bits 2 i of qh[32 h ..]. Group g's
// first 16 elements (lanes 0-3) take scale 2 g, its last 16 (lanes 4-7) scale 2 g + 1.
// Each q's -32 is not taken from its product: the lanes start at -32 sum_j sc_j bsums[j]
// (the token's 16 sums of 16 x) and the products are of q as stored: the lanes' sum P is
// the same integer.
template <int kTile>
TESSERA_VNNI HWY_INLINE void dot_unit_q6_k(const uint8_t* b, const Q8KBlock* x, int64_t x_step, Acc* acc) {
  const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
  // int16 scales 0-7 in both halves (for h = 0), then 8-15 in both halves (h = 1).
  const __m256i sc_lo = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(sc8));
  const __m256i sc_hi = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_srli_si128(sc8, 8)));
  const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
  // -32 sc_j, at most 4096 in magnitude: int16.
  const __m256i minus32 = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(_mm256_cvtepi8_epi16(sc8), 5));
  __m256i p[kTile];
  for (int t = 0; t < kTile; ++t) p[t] = madd_add(_mm256_setzero_si256(), minus32, load32(x[t * x_step].bsums));
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = load32(b + 64 * h), l1 = load32(b + 64 * h + 32), hb = load32(b + 128 + 32 * h);
    const __m256i q[4] = {_mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2)),
                          _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2)),
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(hb, m2)),
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                                          _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2))};
    for (int i = 0; i < 4; ++i) {
      const __m256i scale = pick(h ? sc_hi : sc_lo, kPick6[i]);
      for (int t = 0; t < kTile; ++t) {
        p[t] = madd_add(p[t], pairs_u(q[i], load32(x[t * x_step].qs + 32 * (4 * h + i))), scale);
      }
    }
  }
  const float d = f16_at(b + 208);
  for (int t = 0; t < kTile; ++t) add_unit(d, x[t * x_step].d, p[t], acc[t]);
}

// Q4_K's and Q5_K's mins terms M of 4 rows (their 8 mins a byte each in mn[r]) against a
// token: [M0, M1, M2, M3], each dot_unit_k's exact int32. Rows 0 and 1 go in the halves of
// one vector, 2 and 3 in another; each half's 4 sums are then added (any order: integers).
HWY_INLINE __m128i mins_of_4_rows(const uint64_t* mn, const Q8KBlock& x) {
  const __m256i pair_sums = _mm256_broadcastsi128_si256(bsum_pairs(x));
  const auto mins2 = [&](int r) {
    return _mm256_madd_epi16(
        _mm256_cvtepu8_epi16(_mm_set_epi64x(static_cast<int64_t>(mn[r + 1]), static_cast<int64_t>(mn[r]))), pair_sums);
  };
  __m256i h = _mm256_hadd_epi32(mins2(0), mins2(2));  // per half: rows 0, 2 (low) or 1, 3 (high), 2 sums each
  h = _mm256_hadd_epi32(h, h);
  return _mm_unpacklo_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}

// Q4_K and Q5_K for 4 rows at once (prefill where the target lacks VNNI): each row's
// lanes and D as dot_unit_k makes them, and the mins terms M of the 4 rows for a token
// in one set of vectors (exact integers in any order; then dot_unit_k's scalar steps),
// where each row made its own. The same integers and f32 steps, so the same bits.
template <DType kT, int kTile>
TESSERA_VNNI HWY_INLINE void dot_rows_k(const uint8_t* b, size_t row_step, const Q8KBlock* x, int64_t x_step,
                                        Acc (*acc)[kTile]) {
  constexpr int kRows = 4;
  const uint8_t* br[kRows];
  uint64_t mn[kRows];
  for (int r = 0; r < kRows; ++r) {
    br[r] = b + r * row_step;
    uint64_t sc;
    k_scales_mins(br[r], sc, mn[r]);
    __m256i p[kTile];
    k_lanes<kT, kTile>(br[r], sc, x, x_step, p);
    const float d = f16_at(br[r]);
    for (int t = 0; t < kTile; ++t) add_unit(d, x[t * x_step].d, p[t], acc[r][t]);
  }
  const __m128 dmin = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(f16x4(br, 2))));
  for (int t = 0; t < kTile; ++t) {
    const Q8KBlock& xt = x[t * x_step];
    HWY_ALIGN float m[kRows], dm[kRows];
    _mm_store_ps(m, _mm_cvtepi32_ps(mins_of_4_rows(mn, xt)));
    _mm_store_ps(dm, _mm_mul_ps(dmin, _mm_set1_ps(xt.d)));
    for (int r = 0; r < kRows; ++r) add_mins(dm[r], m[r], acc[r][t]);
  }
}

template <DType kT, int kTile>
TESSERA_VNNI HWY_INLINE void dot_unit(const uint8_t* b, const Q8KBlock* x, int64_t x_step, Acc* acc) {
  if constexpr (kT == DType::kQ4_K || kT == DType::kQ5_K) return dot_unit_k<kT, kTile>(b, x, x_step, acc);
  if constexpr (kT == DType::kQ6_K) return dot_unit_q6_k<kTile>(b, x, x_step, acc);
}

HWY_INLINE float finish(const Acc& acc) { return acc.one; }

#else  // the same integers and f32 operations, without x86 byte instructions

// One unit of a weight row as integers: q (element order), the sub-scale of each
// 16 elements (scale16), d and, for Q4_K/Q5_K, dmin and the 8 mins.
template <DType kT>
struct Unit {
  static constexpr bool kFive = kT == DType::kQ5_K;
  static_assert(kT == DType::kQ4_K || kFive);
  HWY_ALIGN int8_t q[256];
  int16_t sc[8];
  int m[8];
  float d, dmin;
  HWY_INLINE void load(const uint8_t* b) {
    d = f16_at(b);
    dmin = f16_at(b + 2);
    int s[8];
    scale_min(b + 4, s, m);
    for (int j = 0; j < 8; ++j) sc[j] = static_cast<int16_t>(s[j]);
    unpack_qk<kFive>(b, reinterpret_cast<uint8_t*>(q));
  }
  HWY_INLINE int scale16(int g, int half) const { return (void)half, sc[g]; }
};

template <>
struct Unit<DType::kQ6_K> {
  HWY_ALIGN int8_t q[256];
  int16_t sc[16];
  float d;
  HWY_INLINE void load(const uint8_t* b) {
    unpack_q6_k(b, q);
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    for (int s = 0; s < 16; ++s) sc[s] = scales[s];
    d = f16_at(b + 208);
  }
  HWY_INLINE int scale16(int g, int half) const { return sc[2 * g + half]; }
};

// The mins' integer M of quant_dot.h (Q4_K/Q5_K).
template <typename W>
HWY_INLINE int32_t mins_sum(const W& w, const Q8KBlock& x) {
  int32_t sum = 0;
  for (int j = 0; j < 8; ++j) sum += w.m[j] * (int32_t{x.bsums[2 * j]} + x.bsums[2 * j + 1]);
  return sum;
}

struct Acc {
  float one = 0.0f;
};

HWY_INLINE Acc zero_acc() { return Acc{}; }

template <DType kT, int kTile>
HWY_INLINE void dot_unit(const uint8_t* b, const Q8KBlock* x, int64_t x_step, Acc* acc) {
  Unit<kT> w;
  w.load(b);
  for (int t = 0; t < kTile; ++t) {
    const Q8KBlock& xt = x[t * x_step];
    int32_t p[8] = {};
    for (int g = 0; g < kGroups; ++g) {
      for (int l = 0; l < 8; ++l) {
        int32_t sum = 0;
        for (int i = 0; i < 4; ++i) sum += int32_t{w.q[32 * g + 4 * l + i]} * xt.qs[32 * g + 4 * l + i];
        p[l] += w.scale16(g, l / 4) * sum;
      }
    }
    int32_t sum = 0;
    for (const int32_t pl : p) sum += pl;
    acc[t].one = std::fma(w.d * xt.d, static_cast<float>(sum), acc[t].one);
    if constexpr (kMins<kT>) add_mins(w.dmin * xt.d, static_cast<float>(mins_sum(w, xt)), acc[t]);
  }
}

HWY_INLINE float finish(const Acc& acc) { return acc.one; }

#endif

#if TESSERA_QUANT_DOT_VNNI
// Decode (one token) on AVX-512 with VNNI. The kernels above were short of instructions,
// not of memory, at 2 threads (docs/benchmarks.md). Here the 4 streams' rows go in 2
// pairs, one row in each 256-bit half of a 512-bit register, so that each instruction
// serves 2 rows, and vpdpbusd / vpdpwssd fuse the products with their sums. A half's
// int32 lane l still gets quant_dot.h's P[l] exactly, and the f32 steps are the same
// ones on the same values, so the bits are the same as on the other targets.
// GCC 12's AVX-512 intrinsics start from its own _mm512_undefined_*(), which its
// -Wuninitialized reports at every inlined call (GCC bug 105593; as bf16_dot.cpp).
#if HWY_COMPILER_GCC_ACTUAL
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// The unit sums P of 4 rows, each its 8 int32 lanes added (exact): rows 0 and 1 in the
// halves of p01, 2 and 3 in p23's.
TESSERA_VNNI HWY_INLINE __m128i row_sums(__m512i p01, __m512i p23) {
  return lanes_sums(_mm512_castsi512_si256(p01), _mm512_extracti64x4_epi64(p01, 1), _mm512_castsi512_si256(p23),
                    _mm512_extracti64x4_epi64(p23, 1));
}

// The 32 bytes at a in the low half, those at b in the high half.
TESSERA_VNNI HWY_INLINE __m512i pair32(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(load32(a)), load32(b), 1);
}
// The 16 bytes at a in both 128-bit lanes of the low half, those at b in the high half.
TESSERA_VNNI HWY_INLINE __m512i pair16(const uint8_t* a, const uint8_t* b) {
  const __m256i lo = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a)));
  const __m256i hi = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b)));
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}
// 32 activation bytes in both halves.
TESSERA_VNNI HWY_INLINE __m512i both32(const int8_t* x) { return _mm512_broadcast_i64x4(load32(x)); }
// A 32-byte vpshufb pattern (Pick) in both halves.
TESSERA_VNNI HWY_INLINE __m512i both_pick(const Pick& p) { return both32(reinterpret_cast<const int8_t*>(p.bytes)); }

// The kernels below are short of vector instructions. Where the CPU has GFNI (kGfni),
// one vgf2p8affineqb moves bits within each byte and clears the others, where a shift
// and a mask took two: output bit i is the parity of the byte's bits set in byte 7 - i
// of the bit matrix (one a 64-bit lane). The same bytes, so the same bits.
constexpr int64_t kGfLow = 0x0102040800000000;   // bits 0-3 kept
constexpr int64_t kGfHigh = 0x1020408000000000;  // bits 4-7 to 0-3
TESSERA_VNNI_GFNI HWY_INLINE __m512i gf_bits(__m512i v, __m512i matrix) {
  return _mm512_gf2p8affine_epi64_epi8(v, matrix, 0);
}
TESSERA_VNNI_GFNI HWY_INLINE __m512i gf_bits(__m512i v, int64_t matrix) {
  return gf_bits(v, _mm512_set1_epi64(matrix));
}

// Q4_K and Q5_K (layout in dot_unit_k): the lanes P of rows a and b against kTile
// tokens (token t's block at x[t * x_step]) into p[t]; sc the rows' 8 scales as int16,
// a's in both 128-bit lanes of the low half, b's in the high half. Each group's weights
// are made once and meet every token. Sub-blocks 2 i and 2 i + 1 are summed 4 products at a
// time by vpdpbusd (at most 4 x 31 x 128 = 15,872: int16), packed side by side into int16 by
// vpackssdw and met with their scales by one vpdpwssd: one vpshufb for the two scales where
// vpmaddubsw took one each; 10-15 % faster in L2 on the Xeon of docs/benchmarks.md (session
// 50). The lanes move, their sum (P, an exact integer) does not.
template <bool kFive, bool kGfni, int kTile>
TESSERA_VNNI_GFNI HWY_INLINE void pair_k(const uint8_t* a, const uint8_t* b, __m512i sc, const Q8KBlock* x,
                                         int64_t x_step, __m512i* p) {
  const size_t qs = kFive ? 48 : 16;
  const __m512i m4 = _mm512_set1_epi8(0x0f);
  [[maybe_unused]] const __m512i bit4 = _mm512_set1_epi8(0x10);
  [[maybe_unused]] __m512i qh = kFive ? pair32(a + 16, b + 16) : __m512i{};
  for (int t = 0; t < kTile; ++t) p[t] = _mm512_setzero_si512();
  for (int i = 0; i < 4; ++i) {
    const __m512i v = pair32(a + qs + 32 * i, b + qs + 32 * i);
    __m512i lo = _mm512_and_si512(v, m4),
            hi = kGfni ? gf_bits(v, kGfHigh) : _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    if constexpr (kFive) {
      lo = _mm512_or_si512(lo, _mm512_and_si512(_mm512_slli_epi16(qh, 4), bit4));
      hi = _mm512_or_si512(hi, _mm512_and_si512(_mm512_slli_epi16(qh, 3), bit4));
      qh = _mm512_srli_epi16(qh, 2);
    }
    const __m512i scale = _mm512_shuffle_epi8(sc, both_pick(kPickKPairs[i]));
    for (int t = 0; t < kTile; ++t) {
      const int8_t* xq = x[t * x_step].qs + 64 * i;
      const __m512i sums_lo = _mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, both32(xq));
      const __m512i sums_hi = _mm512_dpbusd_epi32(_mm512_setzero_si512(), hi, both32(xq + 32));
      p[t] = _mm512_dpwssd_epi32(p[t], _mm512_packs_epi32(sums_lo, sums_hi), scale);
    }
  }
}

// Q6_K (layout in dot_unit_q6_k), likewise. Each q's -32 is not taken from its product:
// the lanes start at -32 sum_g sc_g bsums[g] instead (the token's 16 sums of 16 x), and
// the products are of q as stored, two groups' at a time as pair_k's (vpdpbusd's sums of 4 at
// most 4 x 63 x 128 = 32,256: int16); 4-12 % faster in L2 at one thread (session 50). Lanes
// move, their sum (P, an exact integer) does not.
template <int kTile>
TESSERA_VNNI HWY_INLINE void pair_q6_k(const uint8_t* a, const uint8_t* b, const Q8KBlock* x, int64_t x_step,
                                       __m512i* p) {
  const __m256i sc8 =
      _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a + 192))),
                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192)), 1);
  const __m512i sc16 = _mm512_cvtepi8_epi16(sc8);  // lanes: a's scales 0-7, 8-15, b's 0-7, 8-15
  const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
  // -32 sc, at most 4096 in magnitude: int16, as dpwssd takes it.
  const __m512i minus32 = _mm512_sub_epi16(_mm512_setzero_si512(), _mm512_slli_epi16(sc16, 5));
  for (int t = 0; t < kTile; ++t)
    p[t] = _mm512_dpwssd_epi32(_mm512_setzero_si512(), minus32,
                               both32(reinterpret_cast<const int8_t*>(x[t * x_step].bsums)));
  for (int h = 0; h < 2; ++h) {
    // lanes h, h, 2 + h, 2 + h (an immediate each way: unoptimized builds do not fold h)
    const __m512i sc = h ? _mm512_shuffle_i64x2(sc16, sc16, 0xf5) : _mm512_shuffle_i64x2(sc16, sc16, 0xa0);
    const __m512i l0 = pair32(a + 64 * h, b + 64 * h), l1 = pair32(a + 64 * h + 32, b + 64 * h + 32);
    const __m512i hb = pair32(a + 128 + 32 * h, b + 128 + 32 * h);
    const __m512i q[4] = {_mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 4), m2)),
                          _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(_mm512_slli_epi16(hb, 2), m2)),
                          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_and_si512(hb, m2)),
                          _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                                          _mm512_and_si512(_mm512_srli_epi16(hb, 2), m2))};
    for (int i = 0; i < 4; i += 2) {
      const int g = 4 * h + i;
      const __m512i scale = _mm512_shuffle_epi8(sc, both_pick(kPick6Pairs[i / 2]));
      for (int t = 0; t < kTile; ++t) {
        const int8_t* xq = x[t * x_step].qs + 32 * g;
        const __m512i sums0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[i], both32(xq));
        const __m512i sums1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[i + 1], both32(xq + 32));
        p[t] = _mm512_dpwssd_epi32(p[t], _mm512_packs_epi32(sums0, sums1), scale);
      }
    }
  }
}

// The 8 scales and 8 mins of 4 Q4_K/Q5_K units (scale_min's 12 bytes at b[s] + 4), as
// dot_unit_k unpacks them: scales of unit s in 128-bit lane s of the low 256 bits as
// int16, mins likewise in the high 256 bits.
TESSERA_VNNI HWY_INLINE __m512i scales_mins4(const uint8_t* const* b) {
  const auto load16 = [](const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); };
  __m512i v = _mm512_castsi128_si512(load16(b[0] + 4));
  v = _mm512_inserti32x4(v, load16(b[1] + 4), 1);  // lane numbers as immediates, for unoptimized builds too
  v = _mm512_inserti32x4(v, load16(b[2] + 4), 2);
  v = _mm512_inserti32x4(v, load16(b[3] + 4), 3);
  // In each lane, dwords u0, u1, u2 to scales (dwords 0, 1) and mins (dwords 2, 3).
  constexpr int k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, kHigh = 0x30303030;
  const __m512i low =
      _mm512_and_si512(_mm512_srlv_epi32(_mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(0x98)),  // u0, u2, u1, u2
                                         _mm512_set_epi32(4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0)),
                       _mm512_set_epi32(k4, k6, k4, k6, k4, k6, k4, k6, k4, k6, k4, k6, k4, k6, k4, k6));
  const __m512i high = _mm512_and_si512(
      _mm512_srli_epi32(_mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(0x50)), 2),  // u0, u0, u1, u1
      _mm512_set_epi32(kHigh, 0, kHigh, 0, kHigh, 0, kHigh, 0, kHigh, 0, kHigh, 0, kHigh, 0, kHigh, 0));
  return _mm512_permutexvar_epi64(_mm512_set_epi64(7, 5, 3, 1, 6, 4, 2, 0), _mm512_or_si512(low, high));
}

// Q4_K/Q5_K's mins: M of 4 rows (their 8 mins as int16 in 128-bit lane s) against the
// token's 8 pair sums of bsums, the same int32 as dot_unit_k's.
TESSERA_VNNI HWY_INLINE __m128i mins4(__m512i mins, __m128i pair_sums) {
  __m512i m = _mm512_madd_epi16(mins, _mm512_broadcast_i32x4(pair_sums));
  m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, _MM_PERM_BADC));
  m = _mm512_add_epi32(m, _mm512_shuffle_epi32(m, _MM_PERM_CDAB));
  return _mm512_castsi512_si128(
      _mm512_permutexvar_epi32(_mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 12, 8, 4, 0), m));
}

// Rows r, r + part, r + 2 part, r + 3 part (of `part` rows row_bytes apart), for r < part,
// against one token: y[r + s part] as dot_block<kT, 4, 1> gives it.
template <DType kT, bool kGfni>
TESSERA_VNNI_GFNI HWY_NOINLINE void decode_pairs(const uint8_t* w, int64_t part, size_t row_bytes, int64_t units,
                                                 const Q8KBlock* x, float* y) {
  constexpr size_t kBytes = dtype_block_bytes(kT);
  constexpr size_t kScaleAt = kT == DType::kQ6_K ? 208 : 0;  // d_w's offset; Q4_K/Q5_K's dmin follows it
  const size_t step = static_cast<size_t>(part) * row_bytes;
  for (int64_t r = 0; r < part; ++r) {
    const uint8_t* b[4] = {w + static_cast<size_t>(r) * row_bytes};
    for (int s = 1; s < 4; ++s) b[s] = b[s - 1] + step;
    __m128 one = _mm_setzero_ps();  // the 4 rows' accumulators
    for (int64_t u = 0; u < units; ++u) {
      const Q8KBlock& xt = x[u];
      for (const uint8_t* br : b)
        for (size_t off = 0; off < kBytes; off += 64) hwy::Prefetch(br + kPrefetchAhead + off);
      __m512i p01, p23;
      [[maybe_unused]] __m128 dmin;
      [[maybe_unused]] __m128i mins;  // Q4_K/Q5_K's M of the 4 rows
      if constexpr (kT == DType::kQ6_K) {
        pair_q6_k<1>(b[0], b[1], &xt, 0, &p01);
        pair_q6_k<1>(b[2], b[3], &xt, 0, &p23);
      } else {
        const __m512i bytes = scales_mins4(b);
        const __m512i sc = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(bytes));
        pair_k<kT == DType::kQ5_K, kGfni, 1>(b[0], b[1], _mm512_shuffle_i64x2(sc, sc, 0x50), &xt, 0,
                                             &p01);  // lanes 0, 0, 1, 1
        pair_k<kT == DType::kQ5_K, kGfni, 1>(b[2], b[3], _mm512_shuffle_i64x2(sc, sc, 0xfa), &xt, 0,
                                             &p23);  // lanes 2, 2, 3, 3
        dmin = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(f16x4(b, 2))));
        mins = mins4(_mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(bytes, 1)), bsum_pairs(xt));
      }
      const __m128 dx = _mm_set1_ps(xt.d);
      const __m128 d4 = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(f16x4(b, kScaleAt)))), dx);
      one = _mm_fmadd_ps(d4, _mm_cvtepi32_ps(row_sums(p01, p23)), one);
      if constexpr (kMins<kT>) one = _mm_fnmadd_ps(_mm_mul_ps(dmin, dx), _mm_cvtepi32_ps(mins), one);
      for (const uint8_t*& br : b) br += kBytes;
    }
    HWY_ALIGN float out[4];
    _mm_store_ps(out, one);
    for (int s = 0; s < 4; ++s) y[r + s * part] = out[s];
  }
}

// Prefill of the K types on AVX-512 with VNNI: 4 neighbouring rows (row_bytes apart) as
// decode_pairs' 2 pairs against kTile tokens (`units` blocks apart in x, outputs ldy
// apart in y), each group's weights made once for the tile (pair_k, pair_q6_k) and each
// instruction serving 2 rows, where dot_block's 256-bit kernel took one. The same
// integers and f32 steps as decode_pairs, token by token, so the same bits.
template <DType kT, bool kGfni, int kTile>
TESSERA_VNNI_GFNI HWY_INLINE void prefill_pairs_k(const uint8_t* w, size_t row_bytes, int64_t units, const Q8KBlock* x,
                                                  float* y, int64_t ldy) {
  constexpr size_t kBytes = dtype_block_bytes(kT);
  constexpr size_t kScaleAt = kT == DType::kQ6_K ? 208 : 0;  // d_w's offset; Q4_K/Q5_K's dmin follows it
  __m128 one[kTile];                                         // each token's 4 rows' accumulators
  for (__m128& a : one) a = _mm_setzero_ps();
  for (int64_t u = 0; u < units; ++u) {
    const size_t off = static_cast<size_t>(u) * kBytes;
    const uint8_t* b[4] = {w + off, w + row_bytes + off, w + 2 * row_bytes + off, w + 3 * row_bytes + off};
    const Q8KBlock* xu = x + u;
    __m512i p01[kTile], p23[kTile];
    if constexpr (kT == DType::kQ6_K) {
      pair_q6_k<kTile>(b[0], b[1], xu, units, p01);
      pair_q6_k<kTile>(b[2], b[3], xu, units, p23);
    } else {
      const __m512i bytes = scales_mins4(b);
      const __m512i sc = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(bytes));
      pair_k<kT == DType::kQ5_K, kGfni, kTile>(b[0], b[1], _mm512_shuffle_i64x2(sc, sc, 0x50), xu, units, p01);
      pair_k<kT == DType::kQ5_K, kGfni, kTile>(b[2], b[3], _mm512_shuffle_i64x2(sc, sc, 0xfa), xu, units, p23);
      const __m512i mins = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(bytes, 1));
      const __m128 dmin = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(f16x4(b, 2))));
      const __m128 dw4 = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(f16x4(b, 0))));
      for (int t = 0; t < kTile; ++t) {
        const Q8KBlock& xt = xu[t * units];
        const __m128 dx = _mm_set1_ps(xt.d);
        one[t] = _mm_fmadd_ps(_mm_mul_ps(dw4, dx), _mm_cvtepi32_ps(row_sums(p01[t], p23[t])), one[t]);
        one[t] = _mm_fnmadd_ps(_mm_mul_ps(dmin, dx), _mm_cvtepi32_ps(mins4(mins, bsum_pairs(xt))), one[t]);
      }
    }
    if constexpr (kT == DType::kQ6_K) {
      const __m128 dw4 = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(f16x4(b, kScaleAt))));
      for (int t = 0; t < kTile; ++t)
        one[t] = _mm_fmadd_ps(_mm_mul_ps(dw4, _mm_set1_ps(xu[t * units].d)), _mm_cvtepi32_ps(row_sums(p01[t], p23[t])),
                              one[t]);
    }
  }
  for (int t = 0; t < kTile; ++t) {
    HWY_ALIGN float out[4];
    _mm_store_ps(out, one[t]);
    for (int r = 0; r < 4; ++r) y[t * ldy + r] = out[r];
  }
}
#if HWY_COMPILER_GCC_ACTUAL
#pragma GCC diagnostic pop
#endif
#endif

#if TESSERA_QUANT_DOT_AVX2 && !TESSERA_QUANT_DOT_VNNI
// Decode (one token) on AVX2 without VNNI of Q4_K and Q5_K: rows r, r + part, r + 2 part
// and r + 3 part (as dot_rows_one_token deals them) side by side, one a 256-bit register,
// as decode_pairs takes them with VNNI. dot_block
// spent as many instructions on each unit's scales as on its products, and the kernel
// was short of instructions, not of memory (docs/benchmarks.md): here the 4 rows' d_w
// are one conversion and d_w * d_x one multiply (each row's D then one permute), the
// token's x is loaded once for the 4 rows, and Q4_K/Q5_K's mins term M of
// the 4 rows is one set of vectors (exact integers in any order, then the f32 steps of
// dot_unit_k lane by lane). The same integers and f32 steps, so the same bits as
// dot_block<kT, 4, 1>. Q6_K's rows the same way ran 4-12 % slower than dot_block's: its
// unpacked groups spill AVX2's 16 registers.
template <DType kT>
HWY_NOINLINE void decode_quads(const uint8_t* w, int64_t part, size_t row_bytes, int64_t units, const Q8KBlock* x,
                               float* y) {
  static_assert(kMins<kT>);
  constexpr size_t kBytes = dtype_block_bytes(kT);
  const size_t step = static_cast<size_t>(part) * row_bytes;
  for (int64_t i = 0; i < part; ++i) {
    const uint8_t* r[4] = {w + static_cast<size_t>(i) * row_bytes};
    for (int s = 1; s < 4; ++s) r[s] = r[s - 1] + step;
    __m128 one = _mm_setzero_ps();  // the 4 rows' accumulators
    for (int64_t u = 0; u < units; ++u) {
      const size_t off = static_cast<size_t>(u) * kBytes;
      const uint8_t* b[4] = {r[0] + off, r[1] + off, r[2] + off, r[3] + off};
      // Each unit's bytes kPrefetchAhead on, as in dot_block.
      for (const uint8_t* bs : b)
        for (size_t line = 0; line < kBytes; line += 64) hwy::Prefetch(bs + kPrefetchAhead + line);
      const Q8KBlock& xt = x[u];
      const __m128 dx = _mm_set1_ps(xt.d);
      const __m128 d4 = _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(f16x4(b, 0)))), dx);
      uint64_t mn[4];
      __m256i p[4];
      for (int r4 = 0; r4 < 4; ++r4) {
        uint64_t sc;
        k_scales_mins(b[r4], sc, mn[r4]);
        k_lanes<kT, 1>(b[r4], sc, &xt, 0, &p[r4]);
      }
      one = _mm_fmadd_ps(d4, _mm_cvtepi32_ps(lanes_sums(p[0], p[1], p[2], p[3])), one);
      const __m128 dmin = _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<int64_t>(f16x4(b, 2))));
      one = _mm_fnmadd_ps(_mm_mul_ps(dmin, dx), _mm_cvtepi32_ps(mins_of_4_rows(mn, xt)), one);
    }
    HWY_ALIGN float out[4];
    _mm_store_ps(out, one);
    for (int s = 0; s < 4; ++s) y[i + s * part] = out[s];
  }
}
#endif

// kRows rows (row_step bytes apart, their outputs y_step apart) against `tokens` (at
// most kTile) tokens' activations (`units` blocks apart, outputs ldy apart), unit by
// unit: each unit's weights are unpacked once for a whole tile; a partial tile takes
// its tokens one at a time (a token's operations are the same either way).
template <DType kT, int kRows, int kTile>
TESSERA_VNNI HWY_INLINE void dot_block(const uint8_t* w, size_t row_step, int64_t units, const Q8KBlock* x,
                                       int64_t tokens, float* y, int64_t y_step, int64_t ldy) {
  constexpr size_t kBytes = dtype_block_bytes(kT);
  Acc acc[kRows][kTile];
  for (auto& row : acc)
    for (Acc& a : row) a = zero_acc();
  for (int64_t u = 0; u < units; ++u) {
    const uint8_t* wu = w + static_cast<size_t>(u) * kBytes;
    if (tokens == kTile) {
#if TESSERA_QUANT_DOT_AVX2
      if constexpr (kMins<kT> && kRows == 4) {
        dot_rows_k<kT, kTile>(wu, row_step, x + u, units, acc);
        continue;
      }
#endif
      if constexpr (kTile == 1) {
        for (int r = 0; r < kRows; ++r)
          for (size_t off = 0; off < kBytes; off += 64) hwy::Prefetch(wu + r * row_step + kPrefetchAhead + off);
      }
      for (int r = 0; r < kRows; ++r) dot_unit<kT, kTile>(wu + r * row_step, x + u, units, acc[r]);
    } else {
      for (int r = 0; r < kRows; ++r) {
        for (int64_t t = 0; t < tokens; ++t) dot_unit<kT, 1>(wu + r * row_step, x + t * units + u, 0, acc[r] + t);
      }
    }
  }
  for (int64_t t = 0; t < tokens; ++t)
    for (int r = 0; r < kRows; ++r) y[t * ldy + r * y_step] = finish(acc[r][t]);
}

// One token (decode) streams the rows from memory once. It takes kStreams rows a step,
// one from each of kStreams contiguous parts of the rows, so that each part is one long
// sequential read: the hardware prefetchers follow a few long streams well, and many
// short ones (4 neighbouring rows, then a jump) poorly.
constexpr int kStreams = 4;

template <DType kT>
TESSERA_VNNI void dot_rows_one_token(const uint8_t* w, int64_t rows, size_t row_bytes, int64_t units, const Q8KBlock* x,
                                     float* y) {
  const int64_t part = rows / kStreams;
#if TESSERA_QUANT_DOT_VNNI
  // GFNI unpacks the K types' nibbles (pair_k); Q6_K's bits gained nothing.
  static const bool gfni = (kT == DType::kQ4_K || kT == DType::kQ5_K) && __builtin_cpu_supports("gfni");
  if (gfni) {
    decode_pairs<kT, true>(w, part, row_bytes, units, x, y);
  } else {
    decode_pairs<kT, false>(w, part, row_bytes, units, x, y);
  }
#else
  bool done = false;  // by decode_quads
#if TESSERA_QUANT_DOT_AVX2
  if constexpr (kMins<kT>) {
    decode_quads<kT>(w, part, row_bytes, units, x, y);
    done = true;
  }
#endif
  for (int64_t r = 0; r < part && !done; ++r)
    dot_block<kT, kStreams, 1>(w + static_cast<size_t>(r) * row_bytes, static_cast<size_t>(part) * row_bytes, units, x,
                               1, y + r, part, 0);
#endif
  for (int64_t r = kStreams * part; r < rows; ++r)
    dot_block<kT, 1, 1>(w + static_cast<size_t>(r) * row_bytes, row_bytes, units, x, 1, y + r, 1, 0);
}

// Several tokens: rows in blocks of kRowBlock (their weights stay in cache across the
// token tiles), tokens in tiles of kTokenTile (their activations stay in L1 across 4
// rows).
constexpr int64_t kRowBlock = 16;
constexpr int kTokenTile = 8;

#if TESSERA_QUANT_DOT_VNNI
// 4 rows against nt (at most kTokenTile) tokens on AVX-512 with VNNI: prefill_pairs_k over
// whole tiles of kPrefillTile tokens (4 keep their sums in registers), the rest a token at
// a time (the same operations either way).
constexpr int kPrefillTile = 4;

template <DType kT>
TESSERA_VNNI_GFNI void prefill_quad(const uint8_t* w, size_t row_bytes, int64_t units, const Q8KBlock* x, int64_t nt,
                                    float* y, int64_t ldy) {
  static const bool gfni = (kT == DType::kQ4_K || kT == DType::kQ5_K) && __builtin_cpu_supports("gfni");
  const auto tiles = [&](auto tile, int64_t t0) {
    constexpr int kTile = decltype(tile)::value;
    for (; t0 + kTile <= nt; t0 += kTile) {
      const Q8KBlock* xt = x + t0 * units;
      float* yt = y + t0 * ldy;
      gfni ? prefill_pairs_k<kT, true, kTile>(w, row_bytes, units, xt, yt, ldy)
           : prefill_pairs_k<kT, false, kTile>(w, row_bytes, units, xt, yt, ldy);
    }
    return t0;
  };
  tiles(std::integral_constant<int, 1>{}, tiles(std::integral_constant<int, kPrefillTile>{}, 0));
}
#endif

template <DType kT>
TESSERA_VNNI void dot_rows_typed(const uint8_t* w, int64_t rows, int64_t k, const Q8KBlock* x, int64_t tokens, float* y,
                                 int64_t ldy) {
  const int64_t units = k / dtype_block_elements(kT);
  const size_t row_bytes = dtype_bytes(kT, k);
  if (tokens == 1) return dot_rows_one_token<kT>(w, rows, row_bytes, units, x, y);
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t r_end = std::min(rows, r0 + kRowBlock);
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokenTile) {
      const int64_t nt = std::min<int64_t>(kTokenTile, tokens - t0);
      const Q8KBlock* xt = x + t0 * units;
      for (int64_t r = r0; r < r_end;) {
        const uint8_t* wr = w + static_cast<size_t>(r) * row_bytes;
        float* yr = y + t0 * ldy + r;
        if (r + 4 <= r_end) {
#if TESSERA_QUANT_DOT_VNNI
          prefill_quad<kT>(wr, row_bytes, units, xt, nt, yr, ldy);
#else
          dot_block<kT, 4, kTokenTile>(wr, row_bytes, units, xt, nt, yr, 1, ldy);
#endif
          r += 4;
        } else {
          dot_block<kT, 1, kTokenTile>(wr, row_bytes, units, xt, nt, yr, 1, ldy);
          r += 1;
        }
      }
    }
  }
}

#if TESSERA_QUANT_DOT_AVX2
// The largest |x| of the n floats at x (n a multiple of 8): exact in any order. False
// where one of them is an infinity or a NaN (all exponent bits set).
HWY_INLINE bool largest_abs(const float* x, int n, float& largest) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i exponent = _mm256_set1_epi32(0x7f800000);
  __m256 amax = _mm256_setzero_ps();
  __m256i special = _mm256_setzero_si256();
  for (int i = 0; i < n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v));
    special =
        _mm256_or_si256(special, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), exponent), exponent));
  }
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  largest = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
  return _mm256_testz_si256(special, special);
}

// 4 vectors of int32 in [-128, 127] as their 32 bytes in order.
HWY_INLINE __m256i bytes_of(const __m256i* q) {
  // packs works per 128-bit half: dwords q0[0-3], q1[0-3], q2[0-3], q3[0-3], q0[4-7], ...
  const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
  return _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
#endif

// One token's k activations rounded to Q8_0 blocks, the bytes quantize_q8_0 (quant_act.h)
// writes, in 256-bit vectors where the target has AVX2: the same f32 operations on each
// element (a block's largest |x| is exact in any order). A block holding an infinity or
// a NaN, or whose 1 / d overflows, takes quantize_q8_0 itself. A decode rounds x before
// every matmul on one thread, so the scalar loops were on its critical path.
void RoundQ8_0(const float* x, int64_t k, Q8Block* out) {
#if TESSERA_QUANT_DOT_AVX2
  const __m256 half = _mm256_set1_ps(0.5f), minus_half = _mm256_set1_ps(-0.5f);
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    float largest = 0.0f;
    const bool finite = largest_abs(x, 32, largest);
    const float d = largest / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    if (!finite || !std::isfinite(id)) {
      quantize_q8_0(x, 32, out + b);
      continue;
    }
    out[b].d = f16_to_f32(f32_to_f16(d));
    __m256i q[4];
    for (int i = 0; i < 4; ++i) {  // quant_act.cpp's round_away: t + (fraction >= 0.5) - (fraction <= -0.5)
      const __m256 s = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * i), _mm256_set1_ps(id));
      const __m256i t = _mm256_cvttps_epi32(s);
      const __m256 fraction = _mm256_sub_ps(s, _mm256_cvtepi32_ps(t));
      q[i] = _mm256_add_epi32(_mm256_sub_epi32(t, _mm256_castps_si256(_mm256_cmp_ps(fraction, half, _CMP_GE_OQ))),
                              _mm256_castps_si256(_mm256_cmp_ps(fraction, minus_half, _CMP_LE_OQ)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].qs), bytes_of(q));
  }
#else
  quantize_q8_0(x, k, out);
#endif
}

// The same for Q8_K blocks (the K types' activations): quantize_q8_K's bytes, in vectors
// where the target has AVX2. The scale comes from the first element of the largest |x|
// (found again by comparing |x| with the exact largest), each q is ggml's nearest_int of
// the same f32 product, capped at 127, and bsums are the exact sums of 16 q. A block
// holding an infinity or a NaN, all zeros, or whose scale overflows takes quantize_q8_K
// itself.
void RoundQ8_K(const float* x, int64_t k, Q8KBlock* out) {
#if TESSERA_QUANT_DOT_AVX2
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < k / 256; ++b, x += 256) {
    float largest = 0.0f;
    if (!largest_abs(x, 256, largest) || largest == 0.0f) {
      quantize_q8_K(x, 256, out + b);
      continue;
    }
    const __m256 target = _mm256_set1_ps(largest);
    int first = 0;
    for (int i = 0; i < 32; ++i) {
      const int hits =
          _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + 8 * i)), target, _CMP_EQ_OQ));
      if (hits != 0) {
        first = 8 * i + __builtin_ctz(static_cast<unsigned>(hits));
        break;
      }
    }
    const float iscale = -127.0f / x[first];
    if (!std::isfinite(iscale)) {  // a subnormal largest: quantize_q8_K takes its products as 0
      quantize_q8_K(x, 256, out + b);
      continue;
    }
    Q8KBlock& y = out[b];
    const __m256 scale = _mm256_set1_ps(iscale), magic = _mm256_set1_ps(12582912.f);
    const __m256i mantissa = _mm256_set1_epi32(0x007fffff), offset = _mm256_set1_epi32(0x00400000),
                  cap = _mm256_set1_epi32(127);
    for (int g = 0; g < 8; ++g) {  // 32 q a group, then their 2 bsums
      __m256i q[4];
      for (int i = 0; i < 4; ++i) {  // quant_act.cpp's nearest_int, capped at 127
        const __m256 shifted = _mm256_add_ps(_mm256_mul_ps(scale, _mm256_loadu_ps(x + 32 * g + 8 * i)), magic);
        q[i] =
            _mm256_min_epi32(_mm256_sub_epi32(_mm256_and_si256(_mm256_castps_si256(shifted), mantissa), offset), cap);
      }
      const __m256i bytes = bytes_of(q);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y.qs + 32 * g), bytes);
      // Each 128-bit half is 16 consecutive q: their sum, exact in int32.
      __m256i sums = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), bytes), _mm256_set1_epi16(1));
      sums = _mm256_hadd_epi32(sums, sums);
      sums = _mm256_hadd_epi32(sums, sums);
      y.bsums[2 * g] = static_cast<int16_t>(_mm256_cvtsi256_si32(sums));
      y.bsums[2 * g + 1] = static_cast<int16_t>(_mm256_extract_epi32(sums, 4));
    }
    y.d = 1.0f / iscale;
  }
#else
  quantize_q8_K(x, k, out);
#endif
}

void QuantDotRows(DType dtype, const void* w, int64_t rows, int64_t k, const void* xq, int64_t tokens, float* y,
                  int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (dtype) {
    case DType::kQ4_K:
      return dot_rows_typed<DType::kQ4_K>(wb, rows, k, static_cast<const Q8KBlock*>(xq), tokens, y, ldy);
    case DType::kQ5_K:
      return dot_rows_typed<DType::kQ5_K>(wb, rows, k, static_cast<const Q8KBlock*>(xq), tokens, y, ldy);
    case DType::kQ6_K:
      return dot_rows_typed<DType::kQ6_K>(wb, rows, k, static_cast<const Q8KBlock*>(xq), tokens, y, ldy);
    default: TS_CHECK(false, "quantized dot product of dtype ", dtype_name(dtype));
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tessera::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(QuantDotRows);
HWY_EXPORT(RoundQ8_0);
HWY_EXPORT(RoundQ8_K);

namespace {
// Tokens from which the K types' plain rows go through quant_groups.cpp's kernels: a group
// copied a call costs about what 16 tokens' products of Q4_K or Q5_K gain there, 32 of Q6_K
// (docs/benchmarks.md, session 45).
int64_t group_from(DType dtype) { return dtype == DType::kQ6_K ? 32 : 16; }
}  // namespace

QuantAct quant_act_of(DType dtype) {
  TS_CHECK(dtype_is_quantized(dtype), dtype_name(dtype), " is not a quantized dtype");
  return block32(dtype) ? QuantAct::kQ8_0 : QuantAct::kQ8_K;
}

size_t quant_act_bytes(DType dtype, int64_t k) {
  TS_CHECK(dtype_is_quantized(dtype) && k % dtype_block_elements(dtype) == 0, dtype_name(dtype), " k=", k);
  return block32(dtype) ? static_cast<size_t>(k / 32) * sizeof(Q8Block)
                        : static_cast<size_t>(k / 256) * sizeof(Q8KBlock);
}

void quantize_activations(DType dtype, const float* x, int64_t tokens, int64_t k, void* xq) {
  const size_t bytes = quant_act_bytes(dtype, k);
  auto* out = static_cast<uint8_t*>(xq);
  for (int64_t t = 0; t < tokens; ++t) {
    if (block32(dtype)) {
      HWY_DYNAMIC_DISPATCH(RoundQ8_0)(x + t * k, k, reinterpret_cast<Q8Block*>(out + static_cast<size_t>(t) * bytes));
    } else {
      HWY_DYNAMIC_DISPATCH(RoundQ8_K)(x + t * k, k, reinterpret_cast<Q8KBlock*>(out + static_cast<size_t>(t) * bytes));
    }
  }
}

void quant_dot_rows(DType dtype, const void* w, int64_t rows, int64_t k, const void* xq, int64_t tokens, float* y,
                    int64_t ldy, int64_t group, const amx::PackedX* packed) {
  TS_CHECK(dtype_is_quantized(dtype) && k % dtype_block_elements(dtype) == 0, dtype_name(dtype), " k=", k);
  TS_CHECK(group == 1 || (takes_quant_groups(dtype) && group == kQuantGroup && rows % group == 0), dtype_name(dtype),
           " rows (", rows, ") in groups of ", group);
  // Q8_0 and Q4_0 have only quant_groups.cpp's kernels; the K types' plain rows take this
  // file's row kernels (the same bits) for fewer tokens than group_from's, a group copied at
  // a time being dearer than what it gains there.
  const bool row_kernels = !block32(dtype) && tokens < group_from(dtype);
  if (group != 1 || !row_kernels) return quant_group_rows(dtype, w, rows, k, xq, tokens, y, ldy, group != 1, packed);
  HWY_DYNAMIC_DISPATCH(QuantDotRows)(dtype, w, rows, k, xq, tokens, y, ldy);
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
