// A quantized block's values unpacked as bytes, in element order, for the per-target
// kernel files (quant_matmul.cpp dequantizes them, quant_dot.cpp multiplies them as
// integers). Highway's per-target header pattern (as widen-inl.h): included once per
// target from inside foreach_target.h's loop, after hwy/highway.h.
//
// Block layouts: ggml-common.h (quant_matmul.cpp's header comment restates them).
#if defined(TESSERA_BACKEND_CPU_QUANT_UNPACK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TESSERA_BACKEND_CPU_QUANT_UNPACK_INL_H_
#undef TESSERA_BACKEND_CPU_QUANT_UNPACK_INL_H_
#else
#define TESSERA_BACKEND_CPU_QUANT_UNPACK_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Q4_0's 16 bytes of nibbles at qs as q - 8 in [-8, 7]: element i is the low nibble of
// qs[i], element 16 + i the high one.
HWY_INLINE void unpack_q4_0(const uint8_t* HWY_RESTRICT qs, int8_t* HWY_RESTRICT q) {
  const hn::CappedTag<uint8_t, 16> d8;
  auto* out = reinterpret_cast<uint8_t*>(q);
  for (size_t i = 0; i < 16; i += hn::Lanes(d8)) {
    const auto v = hn::LoadU(d8, qs + i);
    hn::StoreU(hn::Sub(hn::And(v, hn::Set(d8, 0xf)), hn::Set(d8, 8)), d8, out + i);  // wraps to q - 8 as int8
    hn::StoreU(hn::Sub(hn::ShiftRight<4>(v), hn::Set(d8, 8)), d8, out + 16 + i);
  }
}

// Q4_K's (kFive false) or Q5_K's block b as its 256 unsigned values (0..15 or 0..31):
// sub-block j of 32 takes the low (even j) or high (odd j) nibbles of qs[32 (j / 2) ..];
// Q5_K's bit 4 is bit j of qh[l].
template <bool kFive>
HWY_INLINE void unpack_qk(const uint8_t* HWY_RESTRICT b, uint8_t* HWY_RESTRICT q) {
  const uint8_t* qh = b + 16;
  const uint8_t* qs = kFive ? b + 48 : b + 16;
  const hn::CappedTag<uint8_t, 32> d8;
  for (int j = 0; j < 8; ++j) {
    for (size_t l = 0; l < 32; l += hn::Lanes(d8)) {
      auto v = hn::And(hn::ShiftRightSame(hn::LoadU(d8, qs + 32 * (j / 2) + l), 4 * (j % 2)), hn::Set(d8, 0xf));
      if constexpr (kFive)
        v = hn::Or(v, hn::ShiftLeft<4>(hn::And(hn::ShiftRightSame(hn::LoadU(d8, qh + l), j), hn::Set(d8, 1))));
      hn::StoreU(v, d8, q + 32 * j + l);
    }
  }
}

// Q6_K's block b as its 256 values q - 32 in [-32, 31]: element e = 128 g + r takes
// its low 4 bits from nibble r / 64 of ql[64 g + r % 64] and its high 2 bits from bits
// 2 (r / 32) of qh[32 g + r % 32].
HWY_INLINE void unpack_q6_k(const uint8_t* HWY_RESTRICT b, int8_t* HWY_RESTRICT q) {
  const hn::CappedTag<uint8_t, 32> d8;
  const auto n = static_cast<int64_t>(hn::Lanes(d8));
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  for (int64_t g = 0; g < 2; ++g) {
    for (int64_t r = 0; r < 128; r += n) {
      const auto lo = hn::And(hn::ShiftRightSame(hn::LoadU(d8, ql + 64 * g + r % 64), static_cast<int>(4 * (r / 64))),
                              hn::Set(d8, 0xf));
      const auto hi = hn::And(hn::ShiftRightSame(hn::LoadU(d8, qh + 32 * g + r % 32), static_cast<int>(2 * (r / 32))),
                              hn::Set(d8, 3));
      const auto values = hn::Sub(hn::Or(lo, hn::ShiftLeft<4>(hi)), hn::Set(d8, 32));  // wraps to q - 32 as int8
      hn::StoreU(values, d8, reinterpret_cast<uint8_t*>(q) + 128 * g + r);
    }
  }
}

// The 8 six-bit scales and mins of Q4_K and Q5_K, packed in 12 bytes.
HWY_INLINE void scale_min(const uint8_t* s, int* sc, int* m) {
  for (int j = 0; j < 4; ++j) {
    sc[j] = s[j] & 0x3f;
    m[j] = s[4 + j] & 0x3f;
    sc[4 + j] = (s[8 + j] & 0x0f) | ((s[j] >> 2) & 0x30);
    m[4 + j] = (s[8 + j] >> 4) | ((s[4 + j] >> 2) & 0x30);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tessera::cpu
HWY_AFTER_NAMESPACE();

#endif  // TESSERA_BACKEND_CPU_QUANT_UNPACK_INL_H_
