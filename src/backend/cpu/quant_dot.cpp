// Integer dot products of quantized weights with 8-bit activations (quant_dot.h),
// compiled once per target ISA (Highway's foreach_target.h re-includes this file) and
// dispatched at run time. The x86 targets with AVX2 (AVX2 and the AVX-512 ones) use
// its byte instructions directly, as ggml does (vpsignb, vpmaddubsw, vpmaddwd); the
// other targets compute the same integers with plain loops. Both then do the same
// f32 operations in the order quant_dot.h states, so they give the same bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/quant_dot.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "backend/cpu/quant_act.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_unpack-inl.h"
#include "core/check.h"

#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {

#undef TESSERA_QUANT_DOT_AVX2
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#define TESSERA_QUANT_DOT_AVX2 1
#else
#define TESSERA_QUANT_DOT_AVX2 0
#endif

// The activation block that weights of kT meet, and the elements of one unit.
template <DType kT>
constexpr bool kBlock32 = kT == DType::kQ8_0 || kT == DType::kQ4_0;
template <DType kT>
using Act = std::conditional_t<kBlock32<kT>, Q8Block, Q8KBlock>;
template <DType kT>
constexpr int kGroups = kBlock32<kT> ? 1 : 8;  // groups of 32 elements in a unit
template <DType kT>
constexpr bool kMins = kT == DType::kQ4_K || kT == DType::kQ5_K;

HWY_INLINE float f16_at(const uint8_t* p) {
  const auto bits = static_cast<uint16_t>(p[0] | p[1] << 8);
#if TESSERA_QUANT_DOT_AVX2
  return _cvtsh_ss(bits);  // F16C: exact, as f16_to_f32
#else
  return f16_to_f32(bits);
#endif
}

// The mins' integer M of quant_dot.h (Q4_K/Q5_K).
template <typename W>
HWY_INLINE int32_t mins_sum(const W& w, const Q8KBlock& x) {
  int32_t sum = 0;
  for (int j = 0; j < 8; ++j) sum += w.m[j] * (int32_t{x.bsums[2 * j]} + x.bsums[2 * j + 1]);
  return sum;
}

#if TESSERA_QUANT_DOT_AVX2

// One unit of a weight row as integers, unpacked from the block straight into
// registers (each group of 32 values one vector; no byte array between, so no store
// forwarding stalls), with its sub-scale vectors: the 16-bit sub-scale of each 4
// elements' lane, as vpmaddwd multiplies them.
template <DType kT>
struct Unit;

template <>
struct Unit<DType::kQ8_0> {
  __m256i q[1];
  float d;
  HWY_INLINE void load(const uint8_t* b) {
    d = f16_at(b);
    q[0] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
  }
  HWY_INLINE __m256i scale(int) const { return _mm256_set1_epi16(1); }
};

template <>
struct Unit<DType::kQ4_0> {
  __m256i q[1];
  float d;
  HWY_INLINE void load(const uint8_t* b) {
    d = f16_at(b);
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
    const __m128i m4 = _mm_set1_epi8(0x0f);
    const __m256i nibbles = _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m4), _mm_and_si128(v, m4));
    q[0] = _mm256_sub_epi8(nibbles, _mm256_set1_epi8(8));
  }
  HWY_INLINE __m256i scale(int) const { return _mm256_set1_epi16(1); }
};

// Q4_K and Q5_K: sub-block g's values are the low (even g) or high (odd g) nibbles of
// qs[32 (g / 2) ..], plus (Q5_K) bit g of qh[l] as bit 4.
template <DType kT>
struct Unit {
  static constexpr bool kFive = kT == DType::kQ5_K;
  static_assert(kT == DType::kQ4_K || kFive);
  __m256i q[8];
  int16_t sc[8];
  int m[8];
  float d, dmin;
  HWY_INLINE void load(const uint8_t* b) {
    d = f16_at(b);
    dmin = f16_at(b + 2);
    int s[8];
    scale_min(b + 4, s, m);
    for (int j = 0; j < 8; ++j) sc[j] = static_cast<int16_t>(s[j]);
    const uint8_t* qs = kFive ? b + 48 : b + 16;
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    for (int i = 0; i < 4; ++i) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * i));
      q[2 * i] = _mm256_and_si256(v, m4);
      q[2 * i + 1] = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
    }
    if constexpr (kFive) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 16));
      const __m256i one = _mm256_set1_epi8(1);
      for (int g = 0; g < 8; ++g) {
        const __m256i bit = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(g)), one);
        q[g] = _mm256_or_si256(q[g], _mm256_slli_epi16(bit, 4));
      }
    }
  }
  HWY_INLINE __m256i scale(int g) const { return _mm256_set1_epi16(sc[g]); }
};

// Q6_K: group g = 4 h + i (h the half of 128) takes its low 4 bits from nibble i / 2 of
// ql[64 h + 32 (i % 2) ..] and its high 2 bits from bits 2 i of qh[32 h ..]; minus 32.
template <>
struct Unit<DType::kQ6_K> {
  __m256i q[8];
  int16_t sc[16];
  float d;
  HWY_INLINE void load(const uint8_t* b) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
    for (int h = 0; h < 2; ++h) {
      const __m256i l0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h));
      const __m256i l1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 64 * h + 32));
      const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 128 + 32 * h));
      const __m256i lo[4] = {_mm256_and_si256(l0, m4), _mm256_and_si256(l1, m4),
                             _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                             _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4)};
      const __m256i hi[4] = {_mm256_and_si256(hb, m2), _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2),
                             _mm256_and_si256(_mm256_srli_epi16(hb, 4), m2),
                             _mm256_and_si256(_mm256_srli_epi16(hb, 6), m2)};
      for (int i = 0; i < 4; ++i)
        q[4 * h + i] = _mm256_sub_epi8(_mm256_or_si256(lo[i], _mm256_slli_epi16(hi[i], 4)), bias);
    }
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    for (int s = 0; s < 16; ++s) sc[s] = scales[s];
    d = f16_at(b + 208);
  }
  HWY_INLINE __m256i scale(int g) const {
    return _mm256_set_m128i(_mm_set1_epi16(sc[2 * g + 1]), _mm_set1_epi16(sc[2 * g]));
  }
};

// The eight lane accumulators in one register, and the mins' accumulator. (No
// default member initializers: an implicit constructor would lack the target's ISA.)
struct Acc {
  __m256 lane;
  float m;
};

HWY_INLINE Acc zero_acc() { return Acc{_mm256_setzero_ps(), 0.0f}; }

template <DType kT>
HWY_INLINE void dot_unit(const Unit<kT>& w, const Act<kT>& x, Acc& acc) {
  __m256i p = _mm256_setzero_si256();
  for (int g = 0; g < kGroups<kT>; ++g) {
    const __m256i wv = w.q[g];
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * g));
    // |w| (unsigned) times x * sign(w): pairs of products, at most 2 * 128 * 127 (no
    // saturation, as x is in [-127, 127]); then pairs of pairs times the sub-scale.
    const __m256i pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
    p = _mm256_add_epi32(p, _mm256_madd_epi16(pairs, w.scale(g)));
  }
  acc.lane = _mm256_fmadd_ps(_mm256_set1_ps(w.d * x.d), _mm256_cvtepi32_ps(p), acc.lane);
  if constexpr (kMins<kT>) acc.m = std::fma(w.dmin * x.d, static_cast<float>(mins_sum(w, x)), acc.m);
}

HWY_INLINE float finish(const Acc& acc) {
  HWY_ALIGN float lane[8];
  _mm256_store_ps(lane, acc.lane);
  for (int h = 4; h >= 1; h /= 2)
    for (int i = 0; i < h; ++i) lane[i] = lane[i] + lane[i + h];
  return lane[0] - acc.m;
}

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
struct Unit<DType::kQ8_0> {
  const int8_t* q;
  float d;
  HWY_INLINE void load(const uint8_t* b) {
    d = f16_at(b);
    q = reinterpret_cast<const int8_t*>(b + 2);
  }
  HWY_INLINE int scale16(int, int) const { return 1; }
};

template <>
struct Unit<DType::kQ4_0> {
  HWY_ALIGN int8_t q[32];
  float d;
  HWY_INLINE void load(const uint8_t* b) {
    d = f16_at(b);
    unpack_q4_0(b + 2, q);
  }
  HWY_INLINE int scale16(int, int) const { return 1; }
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

struct Acc {
  float lane[8] = {};
  float m = 0.0f;
};

HWY_INLINE Acc zero_acc() { return Acc{}; }

template <DType kT>
HWY_INLINE void dot_unit(const Unit<kT>& w, const Act<kT>& x, Acc& acc) {
  int32_t p[8] = {};
  for (int g = 0; g < kGroups<kT>; ++g) {
    for (int l = 0; l < 8; ++l) {
      int32_t sum = 0;
      for (int i = 0; i < 4; ++i) sum += int32_t{w.q[32 * g + 4 * l + i]} * x.qs[32 * g + 4 * l + i];
      p[l] += w.scale16(g, l / 4) * sum;
    }
  }
  const float d = w.d * x.d;
  for (int l = 0; l < 8; ++l) acc.lane[l] = std::fma(d, static_cast<float>(p[l]), acc.lane[l]);
  if constexpr (kMins<kT>) acc.m = std::fma(w.dmin * x.d, static_cast<float>(mins_sum(w, x)), acc.m);
}

HWY_INLINE float finish(Acc acc) {
  for (int h = 4; h >= 1; h /= 2)
    for (int i = 0; i < h; ++i) acc.lane[i] = acc.lane[i] + acc.lane[i + h];
  return acc.lane[0] - acc.m;
}

#endif

// kRows rows (row_bytes apart) against `tokens` (at most kTile) tokens' activations
// (`units` blocks apart): each unit of each row is unpacked once for all the tokens.
template <DType kT, int kRows, int kTile>
HWY_INLINE void dot_block(const uint8_t* w, size_t row_bytes, int64_t units, const Act<kT>* x, int64_t tokens, float* y,
                          int64_t ldy) {
  constexpr size_t kBytes = dtype_block_bytes(kT);
  Acc acc[kTile][kRows];
  for (auto& row : acc)
    for (Acc& a : row) a = zero_acc();
  Unit<kT> unit[kRows];
  const int64_t nt = kTile == 1 ? 1 : tokens;
  for (int64_t u = 0; u < units; ++u) {
    for (int r = 0; r < kRows; ++r) unit[r].load(w + r * row_bytes + static_cast<size_t>(u) * kBytes);
    for (int64_t t = 0; t < nt; ++t)
      for (int r = 0; r < kRows; ++r) dot_unit<kT>(unit[r], x[t * units + u], acc[t][r]);
  }
  for (int64_t t = 0; t < nt; ++t)
    for (int r = 0; r < kRows; ++r) y[t * ldy + r] = finish(acc[t][r]);
}

// Rows in blocks of kRowBlock (their weights stay in cache across the token tiles),
// tokens in tiles of kTokenTile (their activations stay in L1 across 4 rows).
constexpr int64_t kRowBlock = 16;
constexpr int kTokenTile = 8;

template <DType kT>
void dot_rows_typed(const uint8_t* w, int64_t rows, int64_t k, const Act<kT>* x, int64_t tokens, float* y,
                    int64_t ldy) {
  const int64_t units = k / dtype_block_elements(kT);
  const size_t row_bytes = dtype_bytes(kT, k);
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t r_end = std::min(rows, r0 + kRowBlock);
    for (int64_t t0 = 0; t0 < tokens; t0 += kTokenTile) {
      const int64_t nt = std::min<int64_t>(kTokenTile, tokens - t0);
      const Act<kT>* xt = x + t0 * units;
      for (int64_t r = r0; r < r_end;) {
        const uint8_t* wr = w + static_cast<size_t>(r) * row_bytes;
        float* yr = y + t0 * ldy + r;
        if (r + 4 <= r_end) {
          if (nt == 1) {
            dot_block<kT, 4, 1>(wr, row_bytes, units, xt, nt, yr, ldy);
          } else {
            dot_block<kT, 4, kTokenTile>(wr, row_bytes, units, xt, nt, yr, ldy);
          }
          r += 4;
        } else {
          if (nt == 1) {
            dot_block<kT, 1, 1>(wr, row_bytes, units, xt, nt, yr, ldy);
          } else {
            dot_block<kT, 1, kTokenTile>(wr, row_bytes, units, xt, nt, yr, ldy);
          }
          r += 1;
        }
      }
    }
  }
}

void QuantDotRows(DType dtype, const void* w, int64_t rows, int64_t k, const void* xq, int64_t tokens, float* y,
                  int64_t ldy) {
  const auto* wb = static_cast<const uint8_t*>(w);
  switch (dtype) {
    case DType::kQ8_0:
      return dot_rows_typed<DType::kQ8_0>(wb, rows, k, static_cast<const Q8Block*>(xq), tokens, y, ldy);
    case DType::kQ4_0:
      return dot_rows_typed<DType::kQ4_0>(wb, rows, k, static_cast<const Q8Block*>(xq), tokens, y, ldy);
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

namespace {
bool block32(DType dtype) { return dtype == DType::kQ8_0 || dtype == DType::kQ4_0; }
}  // namespace

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
      quantize_q8_0(x + t * k, k, reinterpret_cast<Q8Block*>(out + static_cast<size_t>(t) * bytes));
    } else {
      quantize_q8_K(x + t * k, k, reinterpret_cast<Q8KBlock*>(out + static_cast<size_t>(t) * bytes));
    }
  }
}

void quant_dot_rows(DType dtype, const void* w, int64_t rows, int64_t k, const void* xq, int64_t tokens, float* y,
                    int64_t ldy) {
  TS_CHECK(dtype_is_quantized(dtype) && k % dtype_block_elements(dtype) == 0, dtype_name(dtype), " k=", k);
  HWY_DYNAMIC_DISPATCH(QuantDotRows)(dtype, w, rows, k, xq, tokens, y, ldy);
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
