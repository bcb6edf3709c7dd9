// Quantized-weight matmul (quant_matmul.h), compiled once per target ISA (Highway's
// foreach_target.h re-includes this file) and dispatched at run time.
//
// Block layouts (ggml-common.h) and the dequantizing arithmetic (gguf-py's
// quants.py, as io/gguf_quant.cpp follows it):
//   Q8_0  f16 d | i8 qs[32]:                      x = float(q) * d
//   Q4_0  f16 d | u8 qs[16] (element i: low nibble of qs[i], 16 + i: high): x = d * float(q - 8)
//   Q4_K  f16 d | f16 dmin | u8 scales[12] | u8 qs[128]; sub-block j of 32 (8 of them)
//         takes the low (even j) or high (odd j) nibbles of qs[32 (j / 2) ..]:
//         x = (d * sc[j]) * float(q) - dmin * m[j]  (the product is exact: 22 bits)
//   Q5_K  as Q4_K, with u8 qh[32] before qs: bit j of qh[l] is bit 4 of q
//   Q6_K  u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d; element e = 128 g + r: low 4
//         bits from nibble r / 64 of ql[64 g + r % 64], high 2 bits from bits 2 (r / 32)
//         of qh[32 g + r % 32]: x = (d * scales[e / 16]) * float(q - 32)
// Each step is one f32 operation with the reference's operands, so SIMD and scalar
// give the same bits. A vector of L lanes (L = 1, 4, 8 or 16 divides 16) never
// straddles a sub-block, a scale group or a nibble half.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/quant_matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <atomic>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/widen-inl.h"
#include "core/check.h"
#include "hwy/aligned_allocator.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DI = hn::RebindToSigned<DF>;
using VI = hn::Vec<DI>;

// Decode: rows whose blocks are in flight together (more reads outstanding; matvec_typed
// unrolls exactly this many).
constexpr int kDecodeRows = 4;

HWY_INLINE float f16_at(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8)); }

// L bytes from p, each widened to an i32 lane (unsigned).
HWY_INLINE VI bytes_u(const uint8_t* p) { return hn::PromoteTo(DI(), hn::LoadU(hn::Rebind<uint8_t, DI>(), p)); }
HWY_INLINE VI bytes_i(const uint8_t* p) {
  return hn::PromoteTo(DI(), hn::LoadU(hn::Rebind<int8_t, DI>(), reinterpret_cast<const int8_t*>(p)));
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

// One block's elements as f32 vectors: Block<kT>(b) reads the block's scales once,
// at(e) gives elements [e, e + L) (e a multiple of L), computed in registers.
// The primary template is Q4_K and Q5_K's (below); the other types specialize it.
template <DType kT>
struct Block;

template <>
struct Block<DType::kQ8_0> {
  const uint8_t* HWY_RESTRICT b;
  VF d;
  HWY_INLINE explicit Block(const uint8_t* p) : b(p), d(hn::Set(DF(), f16_at(p))) {}
  HWY_INLINE VF at(int64_t e) const { return hn::Mul(hn::ConvertTo(DF(), bytes_i(b + 2 + e)), d); }
};

template <>
struct Block<DType::kQ4_0> {
  HWY_ALIGN int8_t q[32];  // q - 8, unpacked as bytes once (see Q6_K's)
  VF d;
  HWY_INLINE explicit Block(const uint8_t* p) : d(hn::Set(DF(), f16_at(p))) {
    const hn::CappedTag<uint8_t, 16> d8;
    for (size_t i = 0; i < 16; i += hn::Lanes(d8)) {
      const auto v = hn::LoadU(d8, p + 2 + i);
      hn::StoreU(hn::Sub(hn::And(v, hn::Set(d8, 0xf)), hn::Set(d8, 8)), d8, reinterpret_cast<uint8_t*>(q) + i);
      hn::StoreU(hn::Sub(hn::ShiftRight<4>(v), hn::Set(d8, 8)), d8, reinterpret_cast<uint8_t*>(q) + 16 + i);
    }
  }
  HWY_INLINE VF at(int64_t e) const {
    const VI values = hn::PromoteTo(DI(), hn::LoadU(hn::Rebind<int8_t, DI>(), q + e));
    return hn::Mul(d, hn::ConvertTo(DF(), values));
  }
};

// Q4_K and Q5_K: dl[j] = d * sc[j], ml[j] = dmin * m[j] per sub-block of 32; the
// values unpacked as bytes once (see Q6_K's).
template <DType kT>
struct Block {
  static constexpr bool kFive = kT == DType::kQ5_K;
  static_assert(kT == DType::kQ4_K || kFive);
  HWY_ALIGN uint8_t q[256];
  float dl[8], ml[8];
  HWY_INLINE explicit Block(const uint8_t* b) {
    const float d = f16_at(b), dmin = f16_at(b + 2);
    int sc[8], m[8];
    scale_min(b + 4, sc, m);
    for (int j = 0; j < 8; ++j) {
      dl[j] = d * static_cast<float>(sc[j]);
      ml[j] = dmin * static_cast<float>(m[j]);
    }
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
  HWY_INLINE VF at(int64_t e) const {
    const DF df;
    const VI values = hn::PromoteTo(DI(), hn::LoadU(hn::Rebind<uint8_t, DI>(), q + e));
    return hn::Sub(hn::Mul(hn::Set(df, dl[e / 32]), hn::ConvertTo(df, values)), hn::Set(df, ml[e / 32]));
  }
};

// Q6_K: the block's 256 six-bit values minus 32 are unpacked once as bytes (32 at a
// time), then at(e) widens 8 of them: far fewer operations than unpacking each vector
// from ql and qh (the same integers, so the same f32 products).
template <>
struct Block<DType::kQ6_K> {
  HWY_ALIGN int8_t q[256];
  float ds[16];
  HWY_INLINE explicit Block(const uint8_t* b) {
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
    const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
    const float d = f16_at(b + 208);
    for (int s = 0; s < 16; ++s) ds[s] = d * static_cast<float>(scales[s]);
  }
  HWY_INLINE VF at(int64_t e) const {
    const DF df;
    const VI values = hn::PromoteTo(DI(), hn::LoadU(hn::Rebind<int8_t, DI>(), q + e));
    return hn::Mul(hn::Set(df, ds[e / 16]), hn::ConvertTo(df, values));
  }
};

// One block at b dequantized into out (dtype_block_elements floats).
template <DType kT>
HWY_INLINE void dequantize_block(const uint8_t* HWY_RESTRICT b, float* HWY_RESTRICT out) {
  const DF df;
  const Block<kT> block(b);
  for (int64_t e = 0; e < dtype_block_elements(kT); e += static_cast<int64_t>(hn::Lanes(df)))
    hn::StoreU(block.at(e), df, out + e);
}

// The lanes of acc added as matmul.cpp's halving tree: lane i + L/2 onto lane i, then
// i + L/4 onto i, ..., then lane 1 onto lane 0.
HWY_INLINE float tree_sum(DF df, VF acc) {
  HWY_ALIGN float lane[hn::MaxLanes(DF())];
  hn::Store(acc, df, lane);
  for (size_t h = hn::Lanes(df) / 2; h >= 1; h /= 2)
    for (size_t i = 0; i < h; ++i) lane[i] = lane[i] + lane[i + h];
  return lane[0];
}

template <DType kT>
void dequantize_rows_typed(const uint8_t* w, int64_t rows, int64_t k, float* out) {
  constexpr int64_t kB = dtype_block_elements(kT);
  constexpr size_t kBytes = dtype_block_bytes(kT);
  const int64_t blocks = rows * (k / kB);
  for (int64_t i = 0; i < blocks; ++i) dequantize_block<kT>(w + static_cast<size_t>(i) * kBytes, out + i * kB);
}

// Decode: kDecodeRows rows at a time; each block's elements are made in registers and
// multiplied at once into their row's accumulator, in the f32 matmul's order.
template <DType kT>
void matvec_typed(const float* HWY_RESTRICT x, int64_t k, const uint8_t* HWY_RESTRICT w, int64_t rows,
                  float* HWY_RESTRICT y) {
  constexpr int64_t kB = dtype_block_elements(kT);
  constexpr size_t kBytes = dtype_block_bytes(kT);
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t blocks = k / kB;
  const size_t row_bytes = static_cast<size_t>(blocks) * kBytes;
  int64_t r0 = 0;
  for (; r0 + kDecodeRows <= rows; r0 += kDecodeRows) {
    const uint8_t* base = w + static_cast<size_t>(r0) * row_bytes;
    VF acc[kDecodeRows];
    for (int r = 0; r < kDecodeRows; ++r) acc[r] = hn::Zero(df);
    for (int64_t b = 0; b < blocks; ++b) {
      const size_t at = static_cast<size_t>(b) * kBytes;
      const Block<kT> b0(base + at), b1(base + row_bytes + at), b2(base + 2 * row_bytes + at),
          b3(base + 3 * row_bytes + at);
      const float* xb = x + b * kB;
      for (int64_t e = 0; e < kB; e += lanes) {
        const VF xv = hn::LoadU(df, xb + e);
        acc[0] = hn::MulAdd(b0.at(e), xv, acc[0]);
        acc[1] = hn::MulAdd(b1.at(e), xv, acc[1]);
        acc[2] = hn::MulAdd(b2.at(e), xv, acc[2]);
        acc[3] = hn::MulAdd(b3.at(e), xv, acc[3]);
      }
    }
    for (int r = 0; r < kDecodeRows; ++r) y[r0 + r] = tree_sum(df, acc[r]);
  }
  for (; r0 < rows; ++r0) {
    const uint8_t* row = w + static_cast<size_t>(r0) * row_bytes;
    VF acc = hn::Zero(df);
    for (int64_t b = 0; b < blocks; ++b) {
      const Block<kT> block(row + static_cast<size_t>(b) * kBytes);
      for (int64_t e = 0; e < kB; e += lanes) acc = hn::MulAdd(block.at(e), hn::LoadU(df, x + b * kB + e), acc);
    }
    y[r0] = tree_sum(df, acc);
  }
}

// Calls fn with the quantized type as a template argument.
template <typename Fn>
HWY_INLINE void with_quant_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kQ8_0: return fn.template operator()<DType::kQ8_0>();
    case DType::kQ4_0: return fn.template operator()<DType::kQ4_0>();
    case DType::kQ4_K: return fn.template operator()<DType::kQ4_K>();
    case DType::kQ5_K: return fn.template operator()<DType::kQ5_K>();
    case DType::kQ6_K: return fn.template operator()<DType::kQ6_K>();
    default: TS_CHECK(false, "quantized matmul of dtype ", dtype_name(dtype));
  }
}

void DequantizeRows(const void* w, DType dtype, int64_t rows, int64_t k, float* out) {
  with_quant_type(dtype, [&]<DType kT>() { dequantize_rows_typed<kT>(static_cast<const uint8_t*>(w), rows, k, out); });
}

void QuantMatvec(const float* x, int64_t k, const void* w, DType dtype, int64_t rows, float* y) {
  with_quant_type(dtype, [&]<DType kT>() { matvec_typed<kT>(x, k, static_cast<const uint8_t*>(w), rows, y); });
}

}  // namespace HWY_NAMESPACE
}  // namespace tessera::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(DequantizeRows);
HWY_EXPORT(QuantMatvec);

void dequantize_rows(const void* w, DType dtype, int64_t rows, int64_t k, float* out) {
  TS_CHECK(dtype_is_quantized(dtype) && k % dtype_block_elements(dtype) == 0, dtype_name(dtype), " k=", k);
  HWY_DYNAMIC_DISPATCH(DequantizeRows)(w, dtype, rows, k, out);
}

void quant_matvec(const float* x, int64_t k, const void* w, DType dtype, int64_t rows, float* y) {
  TS_CHECK(dtype_is_quantized(dtype) && k % dtype_block_elements(dtype) == 0, dtype_name(dtype), " k=", k);
  HWY_DYNAMIC_DISPATCH(QuantMatvec)(x, k, w, dtype, rows, y);
}

namespace {

// Rows dequantized to f32 at a time for matmul_rows(_packed): a multiple of 16 (whole
// GEMM panels), about 128 KiB of f32 so they stay in L2.
int64_t scratch_rows(int64_t k) { return std::max<int64_t>(16, (32768 / k) / 16 * 16); }

}  // namespace

void quant_matmul(ThreadPool& pool, const float* x, int64_t tokens, const TensorView& w, float* y) {
  TS_CHECK(w.shape.size() == 2 && dtype_is_quantized(w.dtype), "quantized matmul weight ", dtype_name(w.dtype), " ",
           shape_string(w.shape));
  const int64_t n = w.dim(0), k = w.dim(1);
  TS_CHECK(k % dtype_block_elements(w.dtype) == 0, dtype_name(w.dtype), " rows of ", k, " elements");
  const size_t row_bytes = dtype_bytes(w.dtype, k);
  const auto* base = static_cast<const uint8_t*>(w.data);

  // Prefill: x packed once for the f32 GEMM, shared by the threads. Kept between calls
  // (the one inference thread calls this), grown to the largest call.
  thread_local hwy::AlignedFreeUniquePtr<float[]> packed;
  thread_local int64_t packed_capacity = 0;
  const int64_t packed_floats = matmul_packed_floats(tokens, k, DType::kF32);
  if (packed_floats > packed_capacity) {
    packed = hwy::AllocateAligned<float>(static_cast<size_t>(packed_floats));
    TS_CHECK(packed, "[cpu] cannot allocate ", packed_floats, " floats for a quantized matmul");
    packed_capacity = packed_floats;
  }
  float* xp = packed.get();  // not `packed` in the lambdas: each thread has its own
  if (packed_floats > 0) {
    pool.parallel_for(static_cast<size_t>(tokens), 1, [&](size_t begin, size_t end) {
      matmul_pack_x(x, tokens, k, DType::kF32, static_cast<int64_t>(begin), static_cast<int64_t>(end), xp);
    });
  }

  // Chunks of a multiple of 16 rows, about 8 a thread, taken by whichever thread is
  // free next; a row is computed by one call in the one order, so no result depends on
  // which thread took it (as CpuDevice::matmul splits 16-bit weights).
  const size_t rows = static_cast<size_t>(n);
  const size_t chunk = std::max<size_t>(16, (rows / (pool.size() * 8) + 15) / 16 * 16);
  std::atomic<size_t> next{0};
  pool.parallel_for(pool.size(), 1, [&](size_t, size_t) {
    thread_local std::vector<float> scratch;
    for (size_t begin = next.fetch_add(chunk); begin < rows; begin = next.fetch_add(chunk)) {
      const auto r0 = static_cast<int64_t>(begin), r1 = static_cast<int64_t>(std::min(rows, begin + chunk));
      if (tokens == 1) {
        quant_matvec(x, k, base + begin * row_bytes, w.dtype, r1 - r0, y + r0);
        continue;
      }
      const int64_t step = scratch_rows(k);
      scratch.resize(static_cast<size_t>(step * k));
      for (int64_t r = r0; r < r1; r += step) {
        const int64_t count = std::min(step, r1 - r);
        dequantize_rows(base + static_cast<size_t>(r) * row_bytes, w.dtype, count, k, scratch.data());
        if (packed_floats > 0) {
          matmul_rows_packed(xp, x, tokens, k, scratch.data(), DType::kF32, count, y + r, n);
        } else {
          matmul_rows(x, tokens, k, scratch.data(), DType::kF32, count, y + r, n);
        }
      }
    }
  });
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
