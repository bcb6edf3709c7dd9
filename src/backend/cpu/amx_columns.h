// One token's matmul of bf16 weights in the column layout (weight_layout.h's kColumns) by
// vector steps that give the bits of amx_kernel.h's tile products (the order it states), so
// that decode on a CPU with AMX streams its weights at the memory's pace rather than the
// tile loads' (docs/benchmarks.md, session 52). Written once over amx_kernel.h's `Ops`
// (its Lanes, below): amx.cpp includes it in an AVX-512F region with the instructions, the
// tests with the emulation (amx_emulated.h). Include it after amx_kernel.h.
#ifndef TESSERA_BACKEND_CPU_AMX_COLUMNS_H_
#define TESSERA_BACKEND_CPU_AMX_COLUMNS_H_

namespace tessera::cpu::amx::kernel {

// kC columns of 16 rows (a column's pair of k is its 16 rows' pairs side by side, 64 bytes,
// and its pairs lie one after another) in the instruction's order: each lane one row, each
// column its own sequential stream, column c kColumnLag chunks behind column c - 1 (streams
// a power of two apart read slower side by side: columns_kernel.h's lagged_columns), each
// chunk's lines asked for `ahead` bytes on (a hint) as the chunk starts.
// xe, xo: x's even and odd elements (k / 2 each), rounded to bf16 and widened.
// Ops::Lanes (all static): V (16 f32 lanes); zero(); split(p, even, odd) (16 rows' pair
// at p, each element widened: even from the low half of a 32-bit word, odd from the high);
// mul(w, x) (w times x in every lane) and add(a, b), each rounded on its own; store(p, v).
// The caller runs them under the instruction's treatment of subnormals (Ops::Lanes::Flush).
inline constexpr int64_t kColumnLag = 2;  // chunks: 2 KiB of a column
template <typename Ops, int kC>
void decode_column_group(const uint16_t* w, int64_t k, const float* xe, const float* xo, float* y, int64_t ahead) {
  using L = typename Ops::Lanes;
  using V = typename L::V;
  constexpr int64_t kPairs = kChunk / 2;  // of a chunk
  const int64_t chunks = k / kChunk;
  const uint32_t* col[kC];
  V acc[kC];
  for (int c = 0; c < kC; ++c) {
    col[c] = reinterpret_cast<const uint32_t*>(w + c * kTileRows * k);
    acc[c] = L::zero();
  }
  for (int64_t step = 0; step < chunks + (kC - 1) * kColumnLag; ++step) {
    int64_t chunk[kC];  // column c's chunk this step, if 0 <= chunk[c] < chunks
    bool live[kC];
    for (int c = 0; c < kC; ++c) {
      chunk[c] = step - c * kColumnLag;
      live[c] = chunk[c] >= 0 && chunk[c] < chunks;
      if (live[c] && ahead > 0)
        for (int64_t line = 0; line < kTileRows; ++line)
          __builtin_prefetch(reinterpret_cast<const char*>(col[c] + chunk[c] * kPairs * kTileRows) + ahead + 64 * line,
                             0, 3);
    }
    V even[kC], odd[kC];
    for (int c = 0; c < kC; ++c) even[c] = odd[c] = L::zero();
    for (int64_t p = 0; p < kPairs; ++p)
      for (int c = 0; c < kC; ++c) {
        if (!live[c]) continue;
        const int64_t u = chunk[c] * kPairs + p;
        V we, wo;
        L::split(col[c] + u * kTileRows, we, wo);
        even[c] = L::add(even[c], L::mul(we, xe[u]));
        odd[c] = L::add(odd[c], L::mul(wo, xo[u]));
      }
    for (int c = 0; c < kC; ++c)
      if (live[c]) acc[c] = L::add(acc[c], L::add(even[c], odd[c]));
  }
  for (int c = 0; c < kC; ++c) L::store(y + c * kTileRows, acc[c]);
}

// y[r] for `rows` rows (a multiple of 16) of w in the column layout (k a multiple of
// kChunk): decode_column_group over four columns (64 rows) at a time. xb: x rounded
// (round_row); xs: scratch of k floats; ahead: decode_column_group's hint (0: none).
inline constexpr int kDecodeColumns = 4;
template <typename Ops>
void decode_columns(const uint16_t* xb, int64_t k, const uint16_t* w, int64_t rows, float* y, float* xs,
                    int64_t ahead) {
  using L = typename Ops::Lanes;
  float* xe = xs;
  float* xo = xs + k / 2;
  for (int64_t u = 0; u < k / 2; ++u) {
    xe[u] = L::widen(xb[2 * u]);
    xo[u] = L::widen(xb[2 * u + 1]);
  }
  [[maybe_unused]] const typename L::Flush flush;  // subnormals as the instruction treats them, for this call
  const int64_t columns = rows / kTileRows;
  for (int64_t c0 = 0; c0 < columns; c0 += kDecodeColumns) {
    const uint16_t* first = w + c0 * kTileRows * k;
    float* out = y + c0 * kTileRows;
    switch (std::min<int64_t>(kDecodeColumns, columns - c0)) {
      case 1: decode_column_group<Ops, 1>(first, k, xe, xo, out, ahead); break;
      case 2: decode_column_group<Ops, 2>(first, k, xe, xo, out, ahead); break;
      case 3: decode_column_group<Ops, 3>(first, k, xe, xo, out, ahead); break;
      default: decode_column_group<Ops, kDecodeColumns>(first, k, xe, xo, out, ahead);
    }
  }
}

}  // namespace tessera::cpu::amx::kernel

#endif  // TESSERA_BACKEND_CPU_AMX_COLUMNS_H_
