// Quantized-weight matmul (quant_matmul.h) and the dequantizer, compiled once per
// target ISA (Highway's foreach_target.h re-includes this file) and dispatched at run
// time. The products themselves are quant_dot.cpp's.
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

#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/quant_unpack-inl.h"
#include "backend/cpu/widen-inl.h"
#include "backend/quant_types.h"
#include "core/check.h"
#include "hwy/aligned_allocator.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DI = hn::RebindToSigned<DF>;
using VI = hn::Vec<DI>;

HWY_INLINE float f16_at(const uint8_t* p) { return f16_to_f32(static_cast<uint16_t>(p[0] | p[1] << 8)); }

// L bytes from p, each widened to an i32 lane (unsigned).
HWY_INLINE VI bytes_u(const uint8_t* p) { return hn::PromoteTo(DI(), hn::LoadU(hn::Rebind<uint8_t, DI>(), p)); }
HWY_INLINE VI bytes_i(const uint8_t* p) {
  return hn::PromoteTo(DI(), hn::LoadU(hn::Rebind<int8_t, DI>(), reinterpret_cast<const int8_t*>(p)));
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
  HWY_INLINE explicit Block(const uint8_t* p) : d(hn::Set(DF(), f16_at(p))) { unpack_q4_0(p + 2, q); }
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
    unpack_qk<kFive>(b, q);
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
    unpack_q6_k(b, q);
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

template <DType kT>
void dequantize_rows_typed(const uint8_t* w, int64_t rows, int64_t k, float* out) {
  constexpr int64_t kB = dtype_block_elements(kT);
  constexpr size_t kBytes = dtype_block_bytes(kT);
  const int64_t blocks = rows * (k / kB);
  for (int64_t i = 0; i < blocks; ++i) dequantize_block<kT>(w + static_cast<size_t>(i) * kBytes, out + i * kB);
}

void DequantizeRows(const void* w, DType dtype, int64_t rows, int64_t k, float* out) {
  with_quant_type(dtype, [&]<DType kT>() { dequantize_rows_typed<kT>(static_cast<const uint8_t*>(w), rows, k, out); });
}

}  // namespace HWY_NAMESPACE
}  // namespace tessera::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(DequantizeRows);

void dequantize_rows(const void* w, DType dtype, int64_t rows, int64_t k, float* out) {
  TS_CHECK(dtype_is_quantized(dtype) && k % dtype_block_elements(dtype) == 0, dtype_name(dtype), " k=", k);
  HWY_DYNAMIC_DISPATCH(DequantizeRows)(w, dtype, rows, k, out);
}

void quant_matmul(ThreadPool& pool, const float* x, int64_t tokens, const TensorView& w, float* y) {
  TS_CHECK(w.shape.size() == 2 && dtype_is_quantized(w.dtype), "quantized matmul weight ", dtype_name(w.dtype), " ",
           shape_string(w.shape));
  const int64_t n = w.dim(0), k = w.dim(1);
  TS_CHECK(k % dtype_block_elements(w.dtype) == 0, dtype_name(w.dtype), " rows of ", k, " elements");
  const size_t row_bytes = dtype_bytes(w.dtype, k);
  const auto* base = static_cast<const uint8_t*>(w.data);

  // Each token's activations rounded to 8 bits once (quant_dot.h), shared by the threads.
  // Kept between calls (the one inference thread calls this), grown to the largest call.
  thread_local hwy::AlignedFreeUniquePtr<uint8_t[]> rounded;
  thread_local size_t rounded_capacity = 0;
  const size_t act_bytes = quant_act_bytes(w.dtype, k);
  const size_t needed = act_bytes * static_cast<size_t>(tokens);
  if (needed > rounded_capacity) {
    rounded = hwy::AllocateAligned<uint8_t>(needed);
    TS_CHECK(rounded, "[cpu] cannot allocate ", needed, " bytes for a quantized matmul");
    rounded_capacity = needed;
  }
  uint8_t* xq = rounded.get();  // not `rounded` in the lambdas: each thread has its own
  // A few tokens take a few microseconds: less than waking the pool (decode calls this
  // about 110 times a token). Each token is rounded by the same function either way.
  constexpr int64_t kRoundAlone = 4;
  if (tokens <= kRoundAlone) {
    quantize_activations(w.dtype, x, tokens, k, xq);
  } else {
    pool.parallel_for(static_cast<size_t>(tokens), 1, [&](size_t begin, size_t end) {
      quantize_activations(w.dtype, x + static_cast<int64_t>(begin) * k, static_cast<int64_t>(end - begin), k,
                           xq + begin * act_bytes);
    });
  }

  // Chunks of 16 rows or a multiple, shrinking as the rows run out (for_chunks), taken
  // by whichever thread is free next; a row is computed by one call in the one order,
  // so no result depends on which thread took it (as CpuDevice::matmul splits 16-bit
  // weights).
  for_chunks(pool, static_cast<size_t>(n), 16, [&](size_t begin, size_t end) {
    quant_dot_rows(w.dtype, base + begin * row_bytes, static_cast<int64_t>(end - begin), k, xq, tokens, y + begin, n);
  });
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
