// A few tokens' matmul of bf16 weights in the column layout (weight_layout.h's kColumns) by
// vector steps that give the bits of amx_kernel.h's tile products (the order it states), so
// that decode on a CPU with AMX streams its weights at the memory's pace rather than the
// tile loads', and a few sequences' step does not pay for 16 tokens' tiles
// (docs/benchmarks.md, session 52). Written once over amx_kernel.h's `Ops`
// (its Lanes, below): amx.cpp includes it in an AVX-512F region with the instructions, the
// tests with the emulation (amx_emulated.h). Include it after amx_kernel.h and core/check.h.
#ifndef TESSERA_BACKEND_CPU_AMX_COLUMNS_H_
#define TESSERA_BACKEND_CPU_AMX_COLUMNS_H_

namespace tessera::cpu::amx::kernel {

// kC columns of 16 rows (a column's pair of k is its 16 rows' pairs side by side, 64 bytes,
// and its pairs lie one after another) against kT tokens in the instruction's order: each
// lane one row, each column its own sequential stream, column c kColumnLag chunks behind
// column c - 1 (streams a power of two apart read slower side by side: columns_kernel.h's
// lagged_columns), each line asked for `ahead` bytes on (a hint) as it is read: one request a
// line read, as columns_kernel.h's steps ask, where a chunk's 16 lines asked for at once as it
// started ran a lone token's decode 5-16 % slower on the dev VM (docs/benchmarks.md, session 56).
// xe, xo: the tokens' even and odd elements (k / 2 each, token t's from t * k / 2),
// rounded to bf16 and widened. y: token t's outputs at t * ldy.
// Ops::Lanes (all static): V (16 f32 lanes); zero(); split(p, even, odd) (16 rows' pair
// at p, each element widened: even from the low half of a 32-bit word, odd from the high);
// widen_pairs(x, pairs, even, odd) (x's pairs so, into arrays); mul(w, x) (w times x in
// every lane) and add(a, b), each rounded on its own; store(p, v).
// The caller runs them under the instruction's treatment of subnormals (Ops::Lanes::Flush).
inline constexpr int64_t kColumnLag = 2;  // chunks: 2 KiB of a column
template <typename Ops, int kC, int kT>
void decode_column_group(const uint16_t* w, int64_t k, const float* xe, const float* xo, float* y, int64_t ldy,
                         int64_t ahead) {
  using L = typename Ops::Lanes;
  using V = typename L::V;
  constexpr int64_t kPairs = kChunk / 2;  // of a chunk
  const int64_t chunks = k / kChunk, half = k / 2;
  const uint32_t* col[kC];
  V acc[kC][kT];
  for (int c = 0; c < kC; ++c) {
    col[c] = reinterpret_cast<const uint32_t*>(w + c * kTileRows * k);
    for (int t = 0; t < kT; ++t) acc[c][t] = L::zero();
  }
  for (int64_t step = 0; step < chunks + (kC - 1) * kColumnLag; ++step) {
    int64_t chunk[kC];  // column c's chunk this step, if 0 <= chunk[c] < chunks
    bool live[kC];
    for (int c = 0; c < kC; ++c) {
      chunk[c] = step - c * kColumnLag;
      live[c] = chunk[c] >= 0 && chunk[c] < chunks;
    }
    V even[kC][kT], odd[kC][kT];
    for (int c = 0; c < kC; ++c)
      for (int t = 0; t < kT; ++t) even[c][t] = odd[c][t] = L::zero();
    for (int64_t p = 0; p < kPairs; ++p)
      for (int c = 0; c < kC; ++c) {
        if (!live[c]) continue;
        const int64_t u = chunk[c] * kPairs + p;
        if (ahead > 0) __builtin_prefetch(reinterpret_cast<const char*>(col[c] + u * kTileRows) + ahead, 0, 3);
        V we, wo;
        L::split(col[c] + u * kTileRows, we, wo);
        for (int t = 0; t < kT; ++t) {
          even[c][t] = L::add(even[c][t], L::mul(we, xe[t * half + u]));
          odd[c][t] = L::add(odd[c][t], L::mul(wo, xo[t * half + u]));
        }
      }
    for (int c = 0; c < kC; ++c)
      if (live[c])
        for (int t = 0; t < kT; ++t) acc[c][t] = L::add(acc[c][t], L::add(even[c][t], odd[c][t]));
  }
  for (int c = 0; c < kC; ++c)
    for (int t = 0; t < kT; ++t) L::store(y + t * ldy + c * kTileRows, acc[c][t]);
}

// Every column of w (`columns` of them from its first) against kT tokens: kC at a time,
// then one at a time.
template <typename Ops, int kC, int kT>
void decode_column_groups(const uint16_t* w, int64_t k, int64_t columns, const float* xe, const float* xo, float* y,
                          int64_t ldy, int64_t ahead) {
  int64_t c0 = 0;
  for (; c0 + kC <= columns; c0 += kC)
    decode_column_group<Ops, kC, kT>(w + c0 * kTileRows * k, k, xe, xo, y + c0 * kTileRows, ldy, ahead);
  for (; c0 < columns; ++c0)
    decode_column_group<Ops, 1, kT>(w + c0 * kTileRows * k, k, xe, xo, y + c0 * kTileRows, ldy, ahead);
}

// y[t * ldy + r] for `tokens` tokens (1 to kColumnTokens) and `rows` rows (a multiple of
// 16) of w in the column layout (k a multiple of kChunk), by decode_column_group: four
// columns (64 rows) at a time for one or two tokens, two for three or four, one for five
// to eight (the sums in 24 registers at most). xb: the tokens' x rounded (round_row),
// padded_k(k) apart; xs: scratch of tokens x k floats; ahead: decode_column_group's hint
// (0: none). Up to 8 tokens: a step of 2 to 8 sequences on the dev VM's 2 threads ran
// 1.2-1.7 times as fast as through the tiles (which take 16 tokens a tile), 8 about as fast
// (docs/benchmarks.md, session 52).
inline constexpr int64_t kColumnTokens = 8;
template <typename Ops>
void decode_columns(const uint16_t* xb, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y,
                    int64_t ldy, float* xs, int64_t ahead) {
  using L = typename Ops::Lanes;
  const int64_t half = k / 2, kp = padded_k(k);
  float* xe = xs;
  float* xo = xs + tokens * half;
  for (int64_t t = 0; t < tokens; ++t) L::widen_pairs(xb + t * kp, half, xe + t * half, xo + t * half);
  [[maybe_unused]] const typename L::Flush flush;  // subnormals as the instruction treats them, for this call
  const int64_t columns = rows / kTileRows;
  switch (tokens) {
    case 1: return decode_column_groups<Ops, 4, 1>(w, k, columns, xe, xo, y, ldy, ahead);
    case 2: return decode_column_groups<Ops, 4, 2>(w, k, columns, xe, xo, y, ldy, ahead);
    case 3: return decode_column_groups<Ops, 2, 3>(w, k, columns, xe, xo, y, ldy, ahead);
    case 4: return decode_column_groups<Ops, 2, 4>(w, k, columns, xe, xo, y, ldy, ahead);
    case 5: return decode_column_groups<Ops, 1, 5>(w, k, columns, xe, xo, y, ldy, ahead);
    case 6: return decode_column_groups<Ops, 1, 6>(w, k, columns, xe, xo, y, ldy, ahead);
    case 7: return decode_column_groups<Ops, 1, 7>(w, k, columns, xe, xo, y, ldy, ahead);
    case 8: return decode_column_groups<Ops, 1, 8>(w, k, columns, xe, xo, y, ldy, ahead);
    default: TS_CHECK(false, "[cpu] AMX column decode of ", tokens, " tokens (1 to ", kColumnTokens, ")");
  }
}

}  // namespace tessera::cpu::amx::kernel

#endif  // TESSERA_BACKEND_CPU_AMX_COLUMNS_H_
