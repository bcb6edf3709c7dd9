// The matmul of 16-bit weights in column order: a vector holds one unit of k (a bf16
// pair, or one f16 element) of 16 weight rows (a column of weight_layout.h's kColumns
// layout) and x's unit is broadcast, so each f32 lane is one output, summed along k in
// that lane alone. Nothing is added across lanes and no partial vector waits: a
// micro-kernel's 4 columns x 6 tokens of outputs stay in 24 registers through a k block
// (AVX-512; AVX2's 16 registers hold 1 column x 6 tokens, a column being two vectors), and
// in y between blocks. Written once over an `Ops` type, as bf16_dot_kernel.h is (and with
// the same rules for what is included before it, once a file: its templates take the
// instructions of the attribute region it is included in): bf16_dot.cpp instantiates it
// with AVX-512 BF16's vdpbf16ps, f16_columns.cpp and f16_columns_avx2.cpp with AVX-512's
// and AVX2's FMAs on f16 widened by F16C, bf16_columns_avx2.cpp with AVX2 FMAs on bf16
// widened by a shift, the tests with the emulations (bf16_dot_emulated.h,
// f16_columns_emulated.h, bf16_columns_avx2_emulated.h).
//
// The order of every output's sum, whatever the number of tokens in the call or the
// layout of the weights (one-token decode and prefill's GEMM run exactly this sequence,
// so a token's row is bitwise the same alone or in a batch, at any thread count):
//   x and the weights past k padded with zeros to a whole chunk of kChunk = 32 elements;
//   acc = 0, one f32;
//   for each unit of k in order, acc = dot(acc, w's unit, x's unit), where
//     bf16 (Ops::kUnit 2; x rounded to bf16, nearest even, by the instruction): the pair
//       2p, 2p + 1 as vdpbf16ps takes it in one lane: acc += w[2p+1] * x[2p+1], then
//       acc += w[2p] * x[2p], each step rounded to nearest even, bf16 subnormals read as
//       zero, a subnormal result flushed to zero;
//     f16 (kUnit 1; x as it is, f32): acc = fma(w[i], x[i], acc), w widened exactly;
//     bf16 widened (kUnit 2, AVX2, which has no bf16 dot product; x as it is, f32):
//       acc = fma(w[2p], x[2p], acc), then acc = fma(w[2p+1], x[2p+1], acc), w widened
//       exactly: f16's step, element by element;
//   the output is acc.
// This is neither bf16_dot_kernel.h's order nor matmul.cpp's (which sum lanes of a row's
// chunks and add the lanes as a tree), so a process takes one order for every matmul of a
// dtype (matmul.cpp says which). Weights in the column layout are read in place, one
// sequential stream a column (one token's a fixed lag apart: lagged_columns); rows one
// after another or in groups of 64-byte lines are copied a k block at a time into columns
// first (16 rows' chunks transposed), the same values in the same order.
//
// Ops (all static): kUnit (elements of k a unit); kTileColumns (the columns of a tile of
// two or more tokens: kMaxColumns, or 1 where 16 registers hold 6 tokens' sums); W and X
// (a column's unit of 16 rows, and x's unit in every lane); Acc (16 f32 lanes); zero();
// load(p) (the 16 rows' unit at p: 16 kUnit elements); broadcast(u) (x's unit, as u32
// bits: a bf16 pair or an f32); dot(acc, w, x); loadu_acc(p) / storeu_acc(p, a) (16
// floats, any alignment); pack_units(x, k, out) (a token's padded_k(k) / kUnit units,
// zeros past k); transpose_chunk(src, stride, out) (16 rows' chunks of kChunk elements,
// `stride` elements apart from src, into kChunk / kUnit units of 16 rows at out).
// Optionally Wide, an Ops of kUnit 1 over f32 columns, and widen(col, n, out, ahead): then
// x is packed as f32 (padded_k(k) words a token; broadcast_unit(x) gives a unit's kUnit
// words), and a GEMM (kGemmTokens or more) widens each column's block into f32 first (n
// units into n * kUnit units of 16 floats, element by element, decode's hint as steps')
// and runs Wide's steps on it, while fewer tokens run Ops' own steps, widening as they go:
// the same sums (bf16 on AVX2 and f16 on AVX-512: the GEMM widens a block once for all its
// tokens, not once a tile, and decode does not write what it reads once). Optionally
// kDecodeAhead, decode's hint in bytes (decode_ahead).
//
// What the GEMM reads from memory it asks for ahead (the micro-kernel alone runs at nearly
// the FMA peak; its operands' misses are what it loses to): each tile the next tile's x
// (steps), a widening GEMM the next block's weights (block_tiles), and from kPairedK on two
// groups of columns take each k block in turn so that x's block is read once for both
// (matmul). None of it changes a sum's order.
#ifndef TESSERA_BACKEND_CPU_COLUMNS_KERNEL_H_
#define TESSERA_BACKEND_CPU_COLUMNS_KERNEL_H_

namespace tessera::cpu::columns {

using bf16::kChunk;
using bf16::padded_k;
inline constexpr int64_t kColumn = 16;        // weight rows a column: one vector of outputs
inline constexpr int kMaxColumns = 4;         // columns a micro-kernel (64 rows)
inline constexpr int kMaxTokens = 6;          // tokens a micro-kernel: 24 accumulators + 4 columns + x
inline constexpr int64_t kKcElements = 256;   // elements of k a block: 4 columns' block is 32 KiB, in L1
inline constexpr int64_t kGemmTokens = 16;    // calls of at least this many tokens pack x once for their threads
inline constexpr int64_t kSplitTokens = 192;  // tokens a GEMM piece is cut at and takes at most (x's block: 192 KiB)
inline constexpr int64_t kPairedK = 8192;     // k from which a GEMM takes its groups of columns in pairs (matmul)
inline constexpr int64_t kScratchElements = kMaxColumns * kColumn * kKcElements;  // copied columns of a block
static_assert(kKcElements % kChunk == 0);
static_assert(decode_rows(kColumns) == kMaxColumns * kColumn);

// A call's weights: `rows` rows of k elements in `group`'s layout (weight_layout.h).
struct Weights {
  const uint16_t* w;
  int64_t k, rows, group;

  int64_t columns() const { return (rows + kColumn - 1) / kColumn; }
};

template <typename Ops>
inline int64_t units(int64_t k) {
  return padded_k(k) / Ops::kUnit;
}

// Whether Ops widens its blocks (above), and the 32-bit words of a token's packed x.
template <typename Ops>
inline constexpr bool kWidens = requires {
  typename Ops::Wide;
};
template <typename Ops>
inline int64_t words(int64_t k) {
  return kWidens<Ops> ? padded_k(k) : units<Ops>(k);
}

// 16-bit elements of a call's scratch: the copied columns, then for Ops that widen the
// f32 block (kScratchElements floats).
template <typename Ops>
inline constexpr int64_t kScratch = kWidens<Ops> ? 3 * kScratchElements : kScratchElements;

// Column c's units [u0, u0 + n) (whole chunks, or to the last unit), 16 kUnit elements a
// unit: in place for the column layout, else copied into `scratch` (rows past the last and
// elements past k are zeros): a chunk of 16 rows transposed straight from the weights where
// the rows lie a fixed number of 32-bit words apart (one after another with k even, or one
// group of 16 lines), else through a staging copy.
template <typename Ops>
const uint16_t* column(const Weights& w, int64_t c, int64_t u0, int64_t n, uint16_t* scratch) {
  constexpr int64_t kStep = kColumn * Ops::kUnit;  // elements a unit of a column
  if (w.group == kColumns) return w.w + c * kColumn * w.k + u0 * kStep;
  const int64_t first = c * kColumn, rows = std::min(kColumn, w.rows - first);
  const uint16_t* row[kColumn];
  for (int64_t r = 0; r < rows; ++r) row[r] = layout_row(w.w, w.k, w.group, first + r);
  const bool strided = rows == kColumn && w.k % 2 == 0 && (w.group == 1 || w.group == kColumn);
  const int64_t row_stride = w.group == 1 ? w.k : kChunk, chunk_stride = line_stride<uint16_t>(w.group);
  alignas(64) uint16_t stage[kColumn][kChunk];
  for (int64_t s = 0; s < n; s += kChunk / Ops::kUnit) {
    const int64_t e0 = (u0 + s) * Ops::kUnit, chunk = e0 / kChunk, valid = std::min<int64_t>(kChunk, w.k - e0);
    uint16_t* out = scratch + s * kStep;
    if (strided && valid == kChunk) {
      Ops::transpose_chunk(row[0] + chunk * chunk_stride, row_stride, out);
      continue;
    }
    for (int64_t r = 0; r < kColumn; ++r) {
      const int64_t have = r < rows ? std::max<int64_t>(valid, 0) : 0;
      if (have > 0) std::memcpy(stage[r], row[r] + chunk * chunk_stride, static_cast<size_t>(have) * sizeof(uint16_t));
      std::memset(stage[r] + have, 0, static_cast<size_t>(kChunk - have) * sizeof(uint16_t));
    }
    Ops::transpose_chunk(stage[0], kChunk, out);
  }
  return scratch;
}

// x's unit u (x: a token's packed words), broadcast to every lane.
template <typename Ops>
inline typename Ops::X x_unit(const uint32_t* x, int64_t u) {
  if constexpr (kWidens<Ops>) {
    return Ops::broadcast_unit(x + u * Ops::kUnit);
  } else {
    return Ops::broadcast(x[u]);
  }
}

// n units of kC columns (col[c]: from the block's first unit) x kT tokens (x: token 0's
// words from the block's first unit, a token `xs` words after the last): acc[c][t] in
// order.
// ahead > 0: each step asks for each column's line `ahead` bytes on (a hint).
// Two or more tokens, where a tile holds all of a block's columns (kTileColumns > 1, so the
// next tile is the next tokens'): at every line of each token's x (16 words) it asks for
// the same line of the next kT tokens' x (past a block's last token the hint goes unused):
// a tile's x comes from L3 or memory, six short streams the prefetchers learn late (f16
// +1-6 %, bf16 0-4 %, most at k 8,192; AVX2's one-column tiles lost 1-2 % to the asks;
// docs/benchmarks.md, session 59).
template <typename Ops, int kC, int kT, typename E>
inline void step(typename Ops::Acc (&acc)[kC][kT], const E* const* col, const uint32_t* x, int64_t xs, int64_t p,
                 int64_t ahead) {
  constexpr int64_t kStep = kColumn * Ops::kUnit;
  typename Ops::W wv[kC];
  for (int c = 0; c < kC; ++c) {
    if (ahead > 0) __builtin_prefetch(reinterpret_cast<const char*>(col[c] + p * kStep) + ahead, 0, 3);
    wv[c] = Ops::load(col[c] + p * kStep);
  }
  for (int t = 0; t < kT; ++t) {
    const typename Ops::X xv = x_unit<Ops>(x + t * xs, p);
    for (int c = 0; c < kC; ++c) acc[c][t] = Ops::dot(acc[c][t], wv[c], xv);
  }
}
template <typename Ops, int kC, int kT, typename E>
inline void steps(typename Ops::Acc (&acc)[kC][kT], const E* const* col, const uint32_t* x, int64_t xs, int64_t n,
                  int64_t ahead) {
  if constexpr (kT > 1 && Ops::kTileColumns > 1) {
    constexpr int64_t kWords = kWidens<Ops> ? Ops::kUnit : 1;                   // x's words a unit
    constexpr int64_t kLine = kLineBytes / int64_t{sizeof(uint32_t)} / kWords;  // units a line of x
    for (int64_t p0 = 0; p0 < n; p0 += kLine) {
      for (int t = 0; t < kT; ++t) __builtin_prefetch(x + (kT + t) * xs + p0 * kWords, 0, 3);
      for (int64_t p = p0; p < std::min(n, p0 + kLine); ++p) step<Ops, kC, kT>(acc, col, x, xs, p, ahead);
    }
  } else {
    for (int64_t p = 0; p < n; ++p) step<Ops, kC, kT>(acc, col, x, xs, p, ahead);
  }
}

// Outputs [t][c] of kC columns x kT tokens over n units: from zero when `first`, else from
// y, where they are left (row r of column c at y[t * ldy + 16 c + r], rows < rows_left).
template <typename Ops, int kC, int kT, typename E>
void tile(const E* const* col, const uint32_t* x, int64_t xs, int64_t n, bool first, int64_t ahead, float* y,
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

// kC columns x kt tokens: one tile, or (two or more tokens, kC over Ops::kTileColumns)
// tiles of kTileColumns columns side by side.
template <typename Ops, int kC, typename E>
void tile_tokens(int kt, const E* const* col, const uint32_t* x, int64_t xs, int64_t n, bool first, int64_t ahead,
                 float* y, int64_t ldy, int64_t rows_left) {
  if constexpr (kC > Ops::kTileColumns) {
    if (kt > 1) {
      for (int c = 0; c < kC; c += Ops::kTileColumns)
        tile_tokens<Ops, Ops::kTileColumns>(kt, col + c, x, xs, n, first, ahead, y + c * kColumn, ldy,
                                            rows_left - c * kColumn);
      return;
    }
  }
  switch (kt) {
    case 1: return tile<Ops, kC, 1>(col, x, xs, n, first, ahead, y, ldy, rows_left);
    case 2: return tile<Ops, kC, 2>(col, x, xs, n, first, ahead, y, ldy, rows_left);
    case 3: return tile<Ops, kC, 3>(col, x, xs, n, first, ahead, y, ldy, rows_left);
    case 4: return tile<Ops, kC, 4>(col, x, xs, n, first, ahead, y, ldy, rows_left);
    case 5: return tile<Ops, kC, 5>(col, x, xs, n, first, ahead, y, ldy, rows_left);
    default: return tile<Ops, kC, kMaxTokens>(col, x, xs, n, first, ahead, y, ldy, rows_left);
  }
}

// The weights a GEMM widens next, in the column layout: `columns` pieces of `bytes` from
// `first`, `stride` bytes apart (none: bytes 0).
struct NextBlock {
  const char* first = nullptr;
  int64_t columns = 0, stride = 0, bytes = 0;
};

// The tiles of kc columns (col: the block's first unit) over every token of packed x (x:
// the block's first word of token 0, xs words a token), n units of T's. After each tile
// it asks for a share of `next`'s lines into L2, so that the next block's widening, one
// pass before its tiles, finds them there instead of waiting on memory (f16 +0.4-4.6 %;
// not for bf16, whose tiles read the weights as they lie: nothing measurable; session 59
// in docs/benchmarks.md).
template <typename T, typename E>
void block_tiles(int kc, const E* const* col, const uint32_t* x, int64_t xs, int64_t tokens, int64_t n, bool first,
                 int64_t ahead, float* y, int64_t ldy, int64_t rows_left, const NextBlock& next = {}) {
  const int64_t lines = next.bytes / kLineBytes, tiles = (tokens + kMaxTokens - 1) / kMaxTokens;
  const int64_t share = (lines + tiles - 1) / tiles;
  int64_t line = 0;
  for (int64_t t0 = 0; t0 < tokens; t0 += kMaxTokens) {
    for (const int64_t end = std::min(lines, line + share); line < end; ++line)
      for (int64_t c = 0; c < next.columns; ++c)
        __builtin_prefetch(next.first + c * next.stride + line * kLineBytes, 0, 2);
    const int kt = static_cast<int>(std::min<int64_t>(kMaxTokens, tokens - t0));
    const uint32_t* xt = x + t0 * xs;
    float* out = y + t0 * ldy;
    switch (kc) {
      case 1: tile_tokens<T, 1>(kt, col, xt, xs, n, first, ahead, out, ldy, rows_left); break;
      case 2: tile_tokens<T, 2>(kt, col, xt, xs, n, first, ahead, out, ldy, rows_left); break;
      case 3: tile_tokens<T, 3>(kt, col, xt, xs, n, first, ahead, out, ldy, rows_left); break;
      default: tile_tokens<T, kMaxColumns>(kt, col, xt, xs, n, first, ahead, out, ldy, rows_left);
    }
  }
}

// One token against weights in the column layout (decode): each group's kC columns summed
// as tile<Ops, kC, 1> sums them (each from zero, its units in order), but column c
// kLagBytes times c behind column 0, so that the kC streams a step reads are not a
// column's size apart: columns a power of two in size read slower side by side (the same
// DRAM banks, presumably: the 1B shape's down projection, k = 8,192, read 23-26 GB/s
// against 26-31 at k = 8,256 on the Xeon dev VM; lagged, 29-35: docs/benchmarks.md,
// session 49).
inline constexpr int64_t kLagBytes = 2048;
template <typename Ops, int kC>
void lagged_columns(const uint16_t* w, int64_t k, const uint32_t* x, float* y, int64_t rows_left, int64_t ahead) {
  constexpr int64_t kStep = kColumn * Ops::kUnit;
  const int64_t count = units<Ops>(k), lag = std::min<int64_t>(kLagBytes / (kStep * int64_t{sizeof(uint16_t)}), count);
  const uint16_t* col[kC];
  typename Ops::Acc acc[kC];
  for (int c = 0; c < kC; ++c) {
    col[c] = w + c * kColumn * k;
    acc[c] = Ops::zero();
  }
  const auto step = [&](int c, int64_t u) {
    const uint16_t* unit = col[c] + u * kStep;
    if (ahead > 0) __builtin_prefetch(reinterpret_cast<const char*>(unit) + ahead, 0, 3);
    acc[c] = Ops::dot(acc[c], Ops::load(unit), x_unit<Ops>(x, u));
  };
  const auto some = [&](int64_t p) {  // the columns whose units p reaches
    for (int c = 0; c < kC; ++c)
      if (p >= c * lag && p - c * lag < count) step(c, p - c * lag);
  };
  const int64_t all_from = (kC - 1) * lag;  // every column has a unit at p in [all_from, count)
  int64_t p = 0;
  for (; p < std::min(all_from, count); ++p) some(p);
  for (; p < count; ++p)
    for (int c = 0; c < kC; ++c) step(c, p - c * lag);
  for (; p < count + all_from; ++p) some(p);
  alignas(64) float part[kColumn];
  for (int c = 0; c < kC; ++c) {
    const int64_t valid = std::min<int64_t>(kColumn, rows_left - c * kColumn);
    Ops::storeu_acc(part, acc[c]);
    std::memcpy(y + c * kColumn, part, static_cast<size_t>(valid) * sizeof(float));
  }
}

// y[t * ldy + r] for `tokens` tokens of packed x (xp: token t's words at t * words(k))
// and every row of w: groups of up to kMaxColumns columns, each a k block at a time (copied
// into columns first unless laid out so, and widened where Ops widens: `scratch` of
// kScratch<Ops>), the tokens in tiles of kMaxTokens over each block; one token against
// the column layout by lagged_columns. ahead: as steps' (decode's hint, for weights in the
// column layout).
template <typename Ops>
void matmul(const uint32_t* xp, int64_t tokens, const Weights& w, float* y, int64_t ldy, uint16_t* scratch,
            int64_t ahead) {
  constexpr int64_t kBlock = kKcElements / Ops::kUnit;  // units a block
  const int64_t count = units<Ops>(w.k), xs = words<Ops>(w.k), columns = w.columns();
  if (tokens == 1 && w.group == kColumns) {
    for (int64_t c0 = 0; c0 < columns; c0 += kMaxColumns) {
      const uint16_t* first = w.w + c0 * kColumn * w.k;
      const int64_t rows_left = w.rows - c0 * kColumn;
      switch (std::min<int64_t>(kMaxColumns, columns - c0)) {
        case 1: lagged_columns<Ops, 1>(first, w.k, xp, y + c0 * kColumn, rows_left, ahead); break;
        case 2: lagged_columns<Ops, 2>(first, w.k, xp, y + c0 * kColumn, rows_left, ahead); break;
        case 3: lagged_columns<Ops, 3>(first, w.k, xp, y + c0 * kColumn, rows_left, ahead); break;
        default: lagged_columns<Ops, kMaxColumns>(first, w.k, xp, y + c0 * kColumn, rows_left, ahead);
      }
    }
    return;
  }
  // Groups of kMaxColumns columns, each over every k block; from kPairedK on, a GEMM takes
  // two groups over each k block in turn, so that x's block, read from memory for the
  // first, is still in L2 for the second (a call's x at 512 tokens of k 8,192 is 16 MiB:
  // f16 +2-5 % at k 8,192 and 14,336, bf16 0-3 %; nothing at k 2,048 or 4,096: session 59
  // in docs/benchmarks.md). Every output still sums its k blocks in order.
  const int64_t together = (tokens >= kGemmTokens && w.k >= kPairedK ? 2 : 1) * kMaxColumns;
  const auto next_block = [&](int64_t g0, int64_t c0, int64_t u0) -> NextBlock {  // the one after (c0, u0)
    int64_t c = c0 + kMaxColumns, u = u0;
    if (c >= std::min(columns, g0 + together)) {  // the first group's next k block
      c = g0;
      u += kBlock;
    }
    if (u >= count) {  // the next groups' first k block
      c = g0 + together;
      u = 0;
    }
    if (w.group != kColumns || c >= columns) return {};
    constexpr int64_t kStep = kColumn * Ops::kUnit, kBytes = sizeof(uint16_t);  // elements a unit of a column
    return {reinterpret_cast<const char*>(w.w + c * kColumn * w.k + u * kStep),
            std::min<int64_t>(kMaxColumns, columns - c), kColumn * w.k * kBytes,
            std::min(kBlock, count - u) * kStep * kBytes};
  };
  for (int64_t g0 = 0; g0 < columns; g0 += together)
    for (int64_t u0 = 0; u0 < count; u0 += kBlock)
      for (int64_t c0 = g0; c0 < std::min(columns, g0 + together); c0 += kMaxColumns) {
        const int kc = static_cast<int>(std::min<int64_t>(kMaxColumns, columns - c0));
        const int64_t n = std::min(kBlock, count - u0);
        const uint16_t* col[kMaxColumns];
        for (int c = 0; c < kc; ++c) col[c] = column<Ops>(w, c0 + c, u0, n, scratch + c * kColumn * kKcElements);
        float* out = y + c0 * kColumn;
        const int64_t rows_left = w.rows - c0 * kColumn;
        if constexpr (kWidens<Ops>) {
          if (tokens < kGemmTokens) {
            block_tiles<Ops>(kc, col, xp + u0 * Ops::kUnit, xs, tokens, n, u0 == 0, ahead, out, ldy, rows_left);
            continue;
          }
          float* wide = reinterpret_cast<float*>(scratch + kScratchElements);
          const float* wcol[kMaxColumns];
          for (int c = 0; c < kc; ++c) {
            wcol[c] = wide + c * kColumn * kKcElements;
            Ops::widen(col[c], n, wide + c * kColumn * kKcElements, ahead);
          }
          block_tiles<typename Ops::Wide>(kc, wcol, xp + u0 * Ops::kUnit, xs, tokens, n * Ops::kUnit, u0 == 0, 0, out,
                                          ldy, rows_left, next_block(g0, c0, u0));
        } else {
          block_tiles<Ops>(kc, col, xp + u0, xs, tokens, n, u0 == 0, ahead, out, ldy, rows_left);
        }
      }
}

// Tokens [begin, end) of x packed into xp (token t at t * words(k)).
template <typename Ops>
void pack_x(const float* x, int64_t k, int64_t begin, int64_t end, uint32_t* xp) {
  for (int64_t t = begin; t < end; ++t) Ops::pack_units(x + t * k, k, xp + t * words<Ops>(k));
}

// Decode's hint for weights in the column layout (kernels.h's decode_prefetch_bytes):
// Ops::kDecodeAhead bytes where Ops states how far, else the default.
template <typename Ops>
int64_t decode_ahead() {
  if constexpr (requires { Ops::kDecodeAhead; }) return decode_prefetch_bytes(Ops::kDecodeAhead);
  return decode_prefetch_bytes();
}

// bf16_matmul.h's interface over the kernel with `Ops`, for the file that compiles Ops to
// hand out (Interface<Ops>::matmul): x packed token by token; decode_ahead for weights in
// the column layout; each thread its own scratch.
template <typename Ops>
struct Interface {
  static uint16_t* scratch() {
    thread_local const hwy::AlignedFreeUniquePtr<uint16_t[]> columns =
        hwy::AllocateAligned<uint16_t>(static_cast<size_t>(kScratch<Ops>));
    TS_CHECK(columns, "[cpu] column scratch");
    return columns.get();
  }
  static int64_t packed_floats(int64_t tokens, int64_t k) { return tokens < kGemmTokens ? 0 : tokens * words<Ops>(k); }
  static void pack(const float* x, int64_t, int64_t k, int64_t begin, int64_t end, float* packed) {
    pack_x<Ops>(x, k, begin, end, reinterpret_cast<uint32_t*>(packed));
  }
  static void rows_packed(const float* packed, int64_t tokens, int64_t begin, int64_t end, int64_t k, const uint16_t* w,
                          int64_t rows, float* y, int64_t ldy, int64_t group) {
    TS_CHECK(begin % kSplitTokens == 0 && begin < end && (end == tokens || end % kSplitTokens == 0),
             "[cpu] column GEMM tokens [", begin, ", ", end, ") of ", tokens);
    columns::matmul<Ops>(reinterpret_cast<const uint32_t*>(packed) + begin * words<Ops>(k), end - begin,
                         {w, k, rows, group}, y + begin * ldy, ldy, scratch(), 0);
  }
  static void rows(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t count, float* y, int64_t ldy,
                   int64_t group) {
    thread_local std::vector<uint32_t> packed;
    packed.resize(static_cast<size_t>(tokens * words<Ops>(k)));
    pack_x<Ops>(x, k, 0, tokens, packed.data());
    columns::matmul<Ops>(packed.data(), tokens, {w, k, count, group}, y, ldy, scratch(),
                         group == kColumns ? decode_ahead<Ops>() : 0);
  }
  static int64_t row_group() { return kColumns; }
  static constexpr bf16::Matmul matmul{rows,         packed_floats,        pack,        rows_packed, row_group,
                                       kSplitTokens, kMaxColumns* kColumn, kSplitTokens};
};

}  // namespace tessera::cpu::columns

#endif  // TESSERA_BACKEND_CPU_COLUMNS_KERNEL_H_
