// The matmul of bf16 weights by bf16 dot products (vdpbf16ps) in column order: a vector
// holds one k-pair of 16 weight rows (a column of weight_layout.h's kPairColumns layout)
// and x's pair is broadcast, so each f32 lane is one output, summed along k in that lane
// alone. Nothing is added across lanes and no partial vector waits: a micro-kernel's 4
// columns x 6 tokens of outputs stay in 24 registers through a k block, and in y between
// blocks. Written once over an `Ops` type, as bf16_dot_kernel.h is (and with the same
// rules for what is included before it): bf16_dot.cpp instantiates it with the
// instructions, the tests with bf16_dot_emulated.h.
//
// The order of every output's sum, whatever the number of tokens in the call or the
// layout of the weights (one-token decode and prefill's GEMM run exactly this sequence,
// so a token's row is bitwise the same alone or in a batch, at any thread count):
//   x is rounded to bf16 (nearest even; the instruction's conversion), past k padded
//   with zeros to a whole chunk of kChunk = 32 elements (the weights likewise);
//   acc = 0, one f32;
//   for each pair p of k in order: acc += w[2p+1] * x[2p+1], then acc += w[2p] * x[2p]
//   (vdpbf16ps in one lane: each step rounded to nearest even, bf16 subnormals read as
//   zero, a subnormal result flushed to zero);
//   the output is acc.
// This is not bf16_dot_kernel.h's order (which sums 16 lanes of pairs and adds them as a
// tree), so a process takes one of the two for every bf16 matmul (bf16_dot.h says which).
// Weights in the column layout are read in place, one sequential stream a column; rows
// one after another or in groups of 64-byte lines are copied a k block at a time into
// columns first (16 rows' 64-byte chunks transposed as 32-bit pairs), the same values
// in the same order.
//
// Ops: bf16_dot_kernel.h's zero(), load(p) and dot(acc, w, x), and broadcast(pair) (one
// u32 of two bf16 in every lane), loadu_acc(p) / storeu_acc(p, a) (16 floats, any
// alignment), round_x(x, n, out), transpose16(src, ss, dst, ds) (dst[j * ds + i] =
// src[i * ss + j] for i, j < 16, 32-bit elements moved as bits).
#ifndef TESSERA_BACKEND_CPU_BF16_COLUMNS_KERNEL_H_
#define TESSERA_BACKEND_CPU_BF16_COLUMNS_KERNEL_H_

namespace tessera::cpu::bf16_dot::column_kernel {

using bf16::kChunk;
using bf16::padded_k;
using bf16::round_row;
inline constexpr int64_t kColumn = 16;        // weight rows a column: one vector of outputs
inline constexpr int kMaxColumns = 4;         // columns a micro-kernel (64 rows)
inline constexpr int kMaxTokens = 6;          // tokens a micro-kernel: 24 accumulators + 4 columns + x
inline constexpr int64_t kKcPairs = 128;      // pairs of k a block: 4 columns' block is 32 KiB, in L1
inline constexpr int64_t kGemmTokens = 16;    // calls of at least this many tokens pack x once for their threads
inline constexpr int64_t kSplitTokens = 192;  // tokens a GEMM piece is cut at (x of a block: 96 KiB, in L2)
static_assert(kKcPairs % (kChunk / 2) == 0);

// A call's weights: `rows` rows of k elements in `group`'s layout (weight_layout.h).
struct Weights {
  const uint16_t* w;
  int64_t k, rows, group;

  int64_t pairs() const { return padded_k(k) / 2; }
  int64_t columns() const { return (rows + kColumn - 1) / kColumn; }
};

// Column c's pairs [p0, p0 + n) (p0 and n whole chunks of 16 pairs, or n to the last
// pair), 16 u32 a pair: in place for the column layout, else copied into `scratch` (n x
// 16 u32; rows past the last and elements past k are zeros): a chunk of 16 rows
// transposed as 32-bit pairs straight from the weights where the rows lie a fixed number
// of pairs apart (one after another with k even, or one group of 16 lines), else through
// a staging copy.
template <typename Ops>
const uint32_t* column(const Weights& w, int64_t c, int64_t p0, int64_t n, uint32_t* scratch) {
  if (w.group == kPairColumns) return reinterpret_cast<const uint32_t*>(w.w + c * kColumn * w.k) + p0 * kColumn;
  const int64_t first = c * kColumn, rows = std::min(kColumn, w.rows - first);
  const uint16_t* row[kColumn];
  for (int64_t r = 0; r < rows; ++r) row[r] = layout_row(w.w, w.k, w.group, first + r);
  const bool strided = rows == kColumn && w.k % 2 == 0 && (w.group == 1 || w.group == kColumn);
  const int64_t row_stride = w.group == 1 ? w.k : kChunk, chunk_stride = line_stride<uint16_t>(w.group);
  alignas(64) uint16_t stage[kColumn][kChunk];
  for (int64_t s = 0; s < n; s += kChunk / 2) {
    const int64_t e0 = 2 * (p0 + s), chunk = e0 / kChunk, valid = std::min<int64_t>(kChunk, w.k - e0);
    auto* out = reinterpret_cast<float*>(scratch + s * kColumn);
    if (strided && valid == kChunk) {
      Ops::transpose16(reinterpret_cast<const float*>(row[0] + chunk * chunk_stride), row_stride / 2, out, kColumn);
      continue;
    }
    for (int64_t r = 0; r < kColumn; ++r) {
      const int64_t have = r < rows ? std::max<int64_t>(valid, 0) : 0;
      if (have > 0) std::memcpy(stage[r], row[r] + chunk * chunk_stride, static_cast<size_t>(have) * sizeof(uint16_t));
      std::memset(stage[r] + have, 0, static_cast<size_t>(kChunk - have) * sizeof(uint16_t));
    }
    Ops::transpose16(reinterpret_cast<const float*>(stage), kChunk / 2, out, kColumn);
  }
  return scratch;
}

// n pairs of kC columns (col[c]: from the block's first pair) x kT tokens (x: token 0's
// pairs from the block's first, a token `xs` u32 after the last): acc[c][t] in order.
// ahead > 0: each step asks for each column's line `ahead` bytes on (a hint).
template <typename Ops, int kC, int kT>
inline void steps(typename Ops::Acc (&acc)[kC][kT], const uint32_t* const* col, const uint32_t* x, int64_t xs,
                  int64_t n, int64_t ahead) {
  for (int64_t p = 0; p < n; ++p) {
    typename Ops::Chunk wv[kC];
    for (int c = 0; c < kC; ++c) {
      if (ahead > 0) __builtin_prefetch(reinterpret_cast<const char*>(col[c] + p * kColumn) + ahead, 0, 3);
      wv[c] = Ops::load(reinterpret_cast<const uint16_t*>(col[c] + p * kColumn));
    }
    for (int t = 0; t < kT; ++t) {
      const typename Ops::Chunk xv = Ops::broadcast(x[t * xs + p]);
      for (int c = 0; c < kC; ++c) acc[c][t] = Ops::dot(acc[c][t], wv[c], xv);
    }
  }
}

// Outputs [t][c] of kC columns from column c0 x kT tokens over pairs [p0, p0 + n): from
// zero when `first`, else from y, where they are left (row r of column c at y[t * ldy +
// 16 (c - c0) + r], only rows < `rows` of the call).
template <typename Ops, int kC, int kT>
void tile(const uint32_t* const* col, const uint32_t* x, int64_t xs, int64_t n, bool first, int64_t ahead, float* y,
          int64_t ldy, int64_t rows_left) {
  using Acc = typename Ops::Acc;
  Acc acc[kC][kT];
  alignas(64) float part[kColumn];
  for (int c = 0; c < kC; ++c)
    for (int t = 0; t < kT; ++t) {
      float* out = y + t * ldy + c * kColumn;
      const int64_t valid = std::min<int64_t>(kColumn, rows_left - c * kColumn);
      if (first) {
        acc[c][t] = Ops::zero();
      } else if (valid == kColumn) {
        acc[c][t] = Ops::loadu_acc(out);
      } else {
        std::memcpy(part, out, static_cast<size_t>(valid) * sizeof(float));
        acc[c][t] = Ops::loadu_acc(part);
      }
    }
  steps<Ops, kC, kT>(acc, col, x, xs, n, ahead);
  for (int c = 0; c < kC; ++c)
    for (int t = 0; t < kT; ++t) {
      float* out = y + t * ldy + c * kColumn;
      const int64_t valid = std::min<int64_t>(kColumn, rows_left - c * kColumn);
      if (valid == kColumn) {
        Ops::storeu_acc(out, acc[c][t]);
      } else {
        Ops::storeu_acc(part, acc[c][t]);
        std::memcpy(out, part, static_cast<size_t>(valid) * sizeof(float));
      }
    }
}

template <typename Ops, int kC>
void tile_tokens(int kt, const uint32_t* const* col, const uint32_t* x, int64_t xs, int64_t n, bool first,
                 int64_t ahead, float* y, int64_t ldy, int64_t rows_left) {
  switch (kt) {
    case 1: return tile<Ops, kC, 1>(col, x, xs, n, first, ahead, y, ldy, rows_left);
    case 2: return tile<Ops, kC, 2>(col, x, xs, n, first, ahead, y, ldy, rows_left);
    case 3: return tile<Ops, kC, 3>(col, x, xs, n, first, ahead, y, ldy, rows_left);
    case 4: return tile<Ops, kC, 4>(col, x, xs, n, first, ahead, y, ldy, rows_left);
    case 5: return tile<Ops, kC, 5>(col, x, xs, n, first, ahead, y, ldy, rows_left);
    default: return tile<Ops, kC, kMaxTokens>(col, x, xs, n, first, ahead, y, ldy, rows_left);
  }
}

// y[t * ldy + r] for `tokens` tokens of rounded x (xp: token t's pairs at t * pairs) and
// every row of w: groups of up to kMaxColumns columns, each a k block at a time (copied
// into columns first unless laid out so: `scratch` of kMaxColumns x kKcPairs x 16 u32),
// the tokens in tiles of kMaxTokens over each block. ahead: as steps' (decode's hint).
template <typename Ops>
void matmul(const uint32_t* xp, int64_t tokens, const Weights& w, float* y, int64_t ldy, uint32_t* scratch,
            int64_t ahead) {
  const int64_t pairs = w.pairs(), columns = w.columns();
  for (int64_t c0 = 0; c0 < columns; c0 += kMaxColumns) {
    const int kc = static_cast<int>(std::min<int64_t>(kMaxColumns, columns - c0));
    for (int64_t p0 = 0; p0 < pairs; p0 += kKcPairs) {
      const int64_t n = std::min(kKcPairs, pairs - p0);
      const uint32_t* col[kMaxColumns];
      for (int c = 0; c < kc; ++c) col[c] = column<Ops>(w, c0 + c, p0, n, scratch + c * kKcPairs * kColumn);
      for (int64_t t0 = 0; t0 < tokens; t0 += kMaxTokens) {
        const int kt = static_cast<int>(std::min<int64_t>(kMaxTokens, tokens - t0));
        const uint32_t* x = xp + t0 * pairs + p0;
        float* out = y + t0 * ldy + c0 * kColumn;
        const int64_t rows_left = w.rows - c0 * kColumn;
        switch (kc) {
          case 1: tile_tokens<Ops, 1>(kt, col, x, pairs, n, p0 == 0, ahead, out, ldy, rows_left); break;
          case 2: tile_tokens<Ops, 2>(kt, col, x, pairs, n, p0 == 0, ahead, out, ldy, rows_left); break;
          case 3: tile_tokens<Ops, 3>(kt, col, x, pairs, n, p0 == 0, ahead, out, ldy, rows_left); break;
          default: tile_tokens<Ops, kMaxColumns>(kt, col, x, pairs, n, p0 == 0, ahead, out, ldy, rows_left);
        }
      }
    }
  }
}

// x of tokens [begin, end) rounded into xp (token t at t * padded_k(k) bf16 elements).
template <typename Ops>
void pack_x(const float* x, int64_t k, int64_t begin, int64_t end, uint16_t* xp) {
  for (int64_t t = begin; t < end; ++t) round_row<Ops>(x + t * k, k, xp + t * padded_k(k));
}

}  // namespace tessera::cpu::bf16_dot::column_kernel

#endif  // TESSERA_BACKEND_CPU_BF16_COLUMNS_KERNEL_H_
