// Quantized-weight matmul (quant_matmul.h) and the dequantizer, compiled once per
// target ISA (Highway's foreach_target.h re-includes this file) and dispatched at run
// time. The products themselves are quant_dot.cpp's; this file deals rows to threads (a
// decode's in whole parts of the kernels' streams: quant_decode_rows) and rounds x.
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
#include <span>
#include <vector>

#include "backend/cpu/quant_dot.h"
#include "backend/cpu/quant_groups.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/cpu/quant_unpack-inl.h"
#include "backend/cpu/weight_layout.h"
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

namespace {

// A quantized matmul weight's rows and their bytes, checked.
struct QuantRows {
  const uint8_t* base;
  int64_t n, k;
  size_t row_bytes;
  int64_t group;  // TensorView::row_group: 1, or kQuantGroup (quant_dot.h)
};

QuantRows quant_rows(const TensorView& w) {
  TS_CHECK(w.shape.size() == 2 && dtype_is_quantized(w.dtype), "quantized matmul weight ", dtype_name(w.dtype), " ",
           shape_string(w.shape));
  const int64_t n = w.dim(0), k = w.dim(1);
  TS_CHECK(k % dtype_block_elements(w.dtype) == 0, dtype_name(w.dtype), " rows of ", k, " elements");
  return {static_cast<const uint8_t*>(w.data), n, k, dtype_bytes(w.dtype, k), w.row_group};
}

// Each token's activations rounded to 8 bits for weights of `dtype` (quant_dot.h),
// shared by the threads. One buffer for each kind of activations, kept between calls
// (the one inference thread calls this) and grown to the largest call.
const uint8_t* round_x(ThreadPool& pool, DType dtype, const float* x, int64_t tokens, int64_t k) {
  thread_local hwy::AlignedFreeUniquePtr<uint8_t[]> rounded[2];
  thread_local size_t capacity[2] = {0, 0};
  const auto kind = static_cast<size_t>(quant_act_of(dtype));
  const size_t act_bytes = quant_act_bytes(dtype, k);
  const size_t needed = act_bytes * static_cast<size_t>(tokens);
  if (needed > capacity[kind]) {
    rounded[kind] = hwy::AllocateAligned<uint8_t>(needed);
    TS_CHECK(rounded[kind], "[cpu] cannot allocate ", needed, " bytes for a quantized matmul");
    capacity[kind] = needed;
  }
  uint8_t* xq = rounded[kind].get();  // not `rounded` in the lambda: each thread has its own
  // A few tokens take a few microseconds: less than waking the pool (decode rounds x
  // about 80 times a token). Each token is rounded by the same function either way.
  constexpr int64_t kRoundAlone = 4;
  if (tokens <= kRoundAlone) {
    quantize_activations(dtype, x, tokens, k, xq);
  } else {
    pool.parallel_for(static_cast<size_t>(tokens), 1, [&](size_t begin, size_t end) {
      quantize_activations(dtype, x + static_cast<int64_t>(begin) * k, static_cast<int64_t>(end - begin), k,
                           xq + begin * act_bytes);
    });
  }
  return xq;
}

// Placed Q8_0 and Q4_0 take AMX-INT8 tiles from 16 tokens on where the CPU has them
// (quant_groups.h): their x (Q8_0 blocks for both) packed for them once here, for every
// thread's calls, where each call packed its own. nullptr where w does not take them.
const amx::PackedX* packed_for_tiles(const QuantRows& w, DType dtype, const uint8_t* xq, int64_t tokens,
                                     amx::PackedX& packed) {
  if (!block32(dtype) || w.group == 1 || tokens < 16 || !quant_tiles_active()) return nullptr;
  packed = amx::pack_x8(xq, tokens / 16 * 16, w.k / dtype_block_elements(dtype));
  return &packed;
}

// Rows of 16 (whole decode tiles) are the unit the threads take.
constexpr int64_t kUnit = 16;
static_assert(kUnit % kQuantGroup == 0, "a unit of rows holds whole groups of quantized rows");

// Units (kUnit rows each) that every chunk the threads take holds a whole number of: for
// one token against placed weights, the rows their kernels read side by side
// (quant_decode_rows, where every weight has the same), so that no chunk ends in groups
// read a stream at a time; else one.
size_t units_per_chunk(int64_t tokens, std::span<const QuantRows> weights, std::span<const DType> dtypes) {
  if (tokens != 1) return 1;
  int64_t rows = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    const int64_t each = weights[i].group == 1 ? kUnit : quant_decode_rows(dtypes[i]);
    if (rows != 0 && each != rows) return 1;
    rows = each;
  }
  return static_cast<size_t>(std::max<int64_t>(1, rows / kUnit));
}

}  // namespace

void quant_matmul(ThreadPool& pool, const float* x, int64_t tokens, const TensorView& w, float* y) {
  const QuantProjection out{&w, y};
  quant_matmuls(pool, x, tokens, {&out, 1});
}

void quant_matmuls(ThreadPool& pool, const float* x, int64_t tokens, std::span<const QuantProjection> outs) {
  if (outs.empty()) return;
  std::vector<QuantRows> rows;
  std::vector<DType> dtypes;
  std::vector<const uint8_t*> xq;
  std::vector<const amx::PackedX*> packs;
  amx::PackedX packed;  // placed Q8_0 and Q4_0 weights here share one x (one kind of activations)
  const amx::PackedX* shared = nullptr;
  // Weight i's rows are units [first[i], first[i + 1]).
  std::vector<int64_t> first{0};
  for (size_t i = 0; i < outs.size(); ++i) {
    rows.push_back(quant_rows(*outs[i].w));
    dtypes.push_back(outs[i].w->dtype);
    TS_CHECK(rows[i].k == rows[0].k, "weights of ", rows[0].k, " and ", rows[i].k, " columns for one x");
    const DType dtype = outs[i].w->dtype;
    size_t same = 0;  // an earlier weight that takes the same activations
    while (same < i && quant_act_of(outs[same].w->dtype) != quant_act_of(dtype)) ++same;
    xq.push_back(same < i ? xq[same] : round_x(pool, dtype, x, tokens, rows[i].k));
    if (shared == nullptr) shared = packed_for_tiles(rows[i], dtype, xq[i], tokens, packed);
    packs.push_back(quant_act_of(dtype) == QuantAct::kQ8_0 ? shared : nullptr);
    first.push_back(first.back() + (rows[i].n + kUnit - 1) / kUnit);
  }
  // Chunks of units shrinking as they run out (for_chunks), taken by whichever thread is
  // free next; a chunk may span weights. A row is computed by one call in the one order,
  // so no result depends on which thread took it or on the chunk it fell in (as
  // CpuDevice::matmul splits 16-bit weights).
  const size_t per_chunk = units_per_chunk(tokens, rows, dtypes);
  for_chunks(pool, static_cast<size_t>(first.back()), per_chunk, [&](size_t begin, size_t end) {
    auto i = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), static_cast<int64_t>(begin)) -
                                 first.begin() - 1);
    for (auto unit = static_cast<int64_t>(begin); unit < static_cast<int64_t>(end); ++i) {
      const QuantRows& w = rows[i];
      const int64_t stop = std::min(static_cast<int64_t>(end), first[i + 1]);
      const int64_t r0 = (unit - first[i]) * kUnit, r1 = std::min(w.n, (stop - first[i]) * kUnit);
      quant_dot_rows(outs[i].w->dtype, w.base + static_cast<size_t>(r0) * w.row_bytes, r1 - r0, w.k, xq[i], tokens,
                     outs[i].y + r0, w.n, w.group, packs[i]);
      unit = stop;
    }
  });
}

void quant_gate_up(ThreadPool& pool, const float* x, int64_t tokens, const TensorView& w_gate, const TensorView& w_up,
                   float* up, float* out, const RowsCombine& combine) {
  const QuantRows g = quant_rows(w_gate), u = quant_rows(w_up);
  TS_CHECK(g.n == u.n && g.k == u.k, "gate ", shape_string(w_gate.shape), " and up ", shape_string(w_up.shape));
  const uint8_t* xq_gate = round_x(pool, w_gate.dtype, x, tokens, g.k);
  const uint8_t* xq_up =
      quant_act_of(w_up.dtype) == quant_act_of(w_gate.dtype) ? xq_gate : round_x(pool, w_up.dtype, x, tokens, u.k);
  amx::PackedX packed;
  const amx::PackedX* gate_packed = packed_for_tiles(g, w_gate.dtype, xq_gate, tokens, packed);
  // Gate and up both Q8_0 or Q4_0: one x (one kind of activations), packed once.
  const amx::PackedX* up_packed =
      xq_up == xq_gate && gate_packed != nullptr ? gate_packed : packed_for_tiles(u, w_up.dtype, xq_up, tokens, packed);
  const QuantRows both[] = {g, u};
  const DType dtypes[] = {w_gate.dtype, w_up.dtype};
  const size_t chunk_rows = kUnit * units_per_chunk(tokens, both, dtypes);
  for_chunks(pool, static_cast<size_t>(g.n), chunk_rows, [&](size_t begin, size_t end) {
    const auto r0 = static_cast<int64_t>(begin), rows = static_cast<int64_t>(end - begin);
    quant_dot_rows(w_gate.dtype, g.base + begin * g.row_bytes, rows, g.k, xq_gate, tokens, out + r0, g.n, g.group,
                   gate_packed);
    quant_dot_rows(w_up.dtype, u.base + begin * u.row_bytes, rows, u.k, xq_up, tokens, up + r0, u.n, u.group,
                   up_packed);
    for (int64_t t = 0; t < tokens; ++t) combine(out + t * g.n, up + t * g.n, r0, r0 + rows, out + t * g.n);
  });
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
