// The CPU matmul, y[t, n] = sum_i x[t, i] * w[n, i], compiled once per target ISA
// (Highway's foreach_target.h re-includes this file) and dispatched at run time.
//
// The order of every output's sum is fixed, and it is what makes a token's row bitwise
// the same alone (decode) or among any number of tokens (prefill), at any thread count:
//   acc = 0, an f32 vector of L = Lanes(f32) lanes;
//   for each whole chunk along k, in order, for each vector v of the chunk in turn:
//     acc = w[v] * x[v] + acc (weights widened to f32 exactly; one fused multiply-add
//     where the target has FMA, as AVX2 and AVX-512 do, else a multiply then an add);
//   sum = the lanes of acc added as a halving tree: lane i + L/2 onto lane i for i < L/2,
//   then i + L/4 onto i, ..., then lane 1 onto lane 0 (Highway's SumOfLanes adds in this
//   order on AVX2 and AVX-512, but not on every target, so the order is stated here and
//   kept by sum_lanes); then the elements after the last whole chunk, one by one, each
//   by a fused multiply-add (std::fma).
// A chunk is L consecutive elements, one vector, for f32 and f16 weights; for bf16 it is
// 2L consecutive elements, two vectors: the even-indexed ones, then the odd-indexed
// ones (a pair of bf16 read as one u32 widens with a shift and a mask; a contiguous
// vector would need a shuffle, and decode ran slower in bf16 than in f16 with it).
// Two paths compute exactly that sequence, over weight rows one after another or
// interleaved in groups (weight_layout.h: each element read from its place in either):
//   - a few tokens (decode): tiles of weight rows read straight from their 16-bit rows,
//     so decode streams the weights once with nothing packed (one token over interleaved
//     rows: a group's lines in memory order);
//   - many tokens (prefill): a cache-blocked GEMM. A block of kNc weight rows x kKc
//     elements along k is widened into a packed f32 panel (kPanelRows rows interleaved
//     vector by vector, so a micro-kernel reads one stream that stays in L1); x is
//     packed likewise once per call (shared by the threads, which split the rows and
//     the token blocks), in blocks of kMc tokens (fewer for long rows) and panels of
//     kPanelTokens; the partial vectors of kMc x kNc
//     outputs wait in a buffer between k blocks. Blocking moves where a partial sum
//     lives, never the order in which it is summed.
// This file's order is every target's for f32 weights, and for 16-bit weights except
// on an AVX-512 or AVX2 target, where instruction kernels take them (in decode and prefill
// alike, so that a row stays bitwise the same alone or in a batch; Highway 1.0.3, Debian
// 12's, has no target for AVX-512 BF16, hence the separate files):
//   - f16 weights (AVX-512 and AVX2): f16_columns.h's FMAs in column order
//     (columns_kernel.h: each output one f32 lane along k, no lane tree), unless
//     TESSERA_F16_COLUMNS=0;
//   - bf16 weights on AVX2: bf16_columns_avx2.h's FMAs on them widened, in column order,
//     unless TESSERA_BF16_COLUMNS=0;
//   - bf16 weights where the CPU has AVX-512 BF16: amx.h's tile products where it also
//     has AMX-BF16 (and the OS grants the tiles; amx_kernel.h states the order), else
//     bf16_dot.h's dot products in column order (columns_kernel.h), or in row order
//     (bf16_dot_kernel.h) with TESSERA_BF16_COLUMNS=0; x is rounded to bf16 in each.
// Pure functions over caller-owned memory; thread-safe.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/matmul.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/bf16_columns_avx2.h"
#include "backend/cpu/bf16_dot.h"
#include "backend/cpu/f16_columns.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/weight_layout.h"
#include "backend/cpu/widen-inl.h"
#include "core/check.h"
#include "hwy/aligned_allocator.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Calls at or above this many tokens take the GEMM; fewer take the decode tiles.
constexpr int64_t kGemmTokens = 16;
// GEMM blocking (elements along k, weight rows, tokens). kKc is a multiple of every
// chunk; kNc of kPanelRows; kMc of every kPanelTokens. The x of one k block (kMc * kKc
// * 4 = 384 KiB) and the partial sums (kMc * kNc * L * 4 = 96 KiB with AVX2, 192 KiB
// with AVX-512) stay in L2 (512 KiB on Zen 3, 2 MiB on Sapphire Rapids), the panel a
// micro-kernel reads in L1. The best on Zen 3 of kKc 256-1024 and kMc 96-384 (within
// the noise of a shared VM); weights are read tokens / kMc times per call. Long rows take
// smaller token blocks (token_block below).
constexpr int64_t kKc = 512;
constexpr int64_t kNc = 16;
constexpr int64_t kMc = 192;
// A micro-kernel keeps kPanelRows x kPanelTokens accumulators in registers: 12 of the
// 16 registers of AVX2, 24 of the 32 of AVX-512.
constexpr int kPanelRows = 4;
constexpr int kPanelTokens = HWY_MAX_BYTES >= 64 ? 6 : 3;
// Decode tiles: at most this many weight rows in flight per thread (decode_tile_rows says
// how many), as many as the registers hold without spilling.
constexpr int kMaxDecodeRows = HWY_MAX_BYTES >= 64 ? 16 : 8;
static_assert(kNc % kPanelRows == 0 && kMc % kPanelTokens == 0 && kKc % 32 == 0);  // 32: a bf16 chunk of AVX-512

// Tokens of a GEMM token block for rows of k_vec chunked elements: kMc, or fewer for long
// rows, so that a block's packed x (its tokens x k_vec floats, read again for every kNc
// weight rows) stays within about 3 MiB, in L3 and not memory: with kMc at k = 8192 it
// was 6 MiB, and the GEMM ran 8-32 % slower on that shape than at k = 2048 on Zen 3 and
// 30 % on the Xeon. At least 48 tokens (the weights are read once per block); a multiple
// of every kPanelTokens. Only where a partial sum waits changes, never its order.
HWY_INLINE int64_t token_block(int64_t k_vec) {
  constexpr int64_t kBlockFloats = int64_t{3} << 18;  // 3 MiB
  constexpr int64_t kMultiple = 6;                    // of 3 (AVX2) and 6 (AVX-512)
  static_assert(kMc % kMultiple == 0 && kMultiple % kPanelTokens == 0);
  return std::clamp<int64_t>(kBlockFloats / std::max<int64_t>(k_vec, 1) / kMultiple * kMultiple, 48, kMc);
}

// Vectors per chunk (see the top of this file).
template <typename WT>
constexpr int64_t kChunkVectors = std::is_same_v<WT, hwy::bfloat16_t> ? 2 : 1;

// Chunk of a weight row starting at element i, as kChunkVectors<WT> f32 vectors.
template <typename WT>
HWY_INLINE void load_chunk(DF df, const WT* HWY_RESTRICT row, int64_t i, VF* out) {
  if constexpr (kChunkVectors<WT> == 2) {
    // Little-endian: element 2j is the low half of u32 lane j, element 2j + 1 the high.
    const hn::RebindToUnsigned<DF> du;
    const auto pairs = hn::LoadU(du, reinterpret_cast<const uint32_t*>(row + i));
    out[0] = hn::BitCast(df, hn::ShiftLeft<16>(pairs));
    out[1] = hn::BitCast(df, hn::And(pairs, hn::Set(du, 0xFFFF0000u)));
  } else {
    out[0] = load_w(df, row, i);
  }
}

// x[0, k_vec) of one token in chunk order (for bf16 weights: each chunk's even-indexed
// elements, then its odd-indexed ones), so that vector v of the chunk at i is
// out[i + v * L, ...).
template <typename WT>
void order_x(DF df, const float* HWY_RESTRICT x, int64_t k_vec, float* HWY_RESTRICT out) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  if constexpr (kChunkVectors<WT> == 1) {
    std::memcpy(out, x, static_cast<size_t>(k_vec) * sizeof(float));
  } else {
#if HWY_TARGET == HWY_SCALAR  // one lane: the order is x's own
    (void)lanes;
    std::memcpy(out, x, static_cast<size_t>(k_vec) * sizeof(float));
#else
    // Every decode tile call orders its x (each thread, each chunk of rows), so in vectors.
    for (int64_t c = 0; c < k_vec; c += 2 * lanes) {
      const VF lo = hn::LoadU(df, x + c);
      const VF hi = hn::LoadU(df, x + c + lanes);
      hn::StoreU(hn::ConcatEven(df, hi, lo), df, out + c);
      hn::StoreU(hn::ConcatOdd(df, hi, lo), df, out + c + lanes);
    }
#endif
  }
}

// The elements the chunks cover: [0, k_vec); [k_vec, k) is each sum's tail.
template <typename WT>
HWY_INLINE int64_t chunked(DF df, int64_t k) {
  const int64_t chunk = kChunkVectors<WT> * static_cast<int64_t>(hn::Lanes(df));
  return k / chunk * chunk;
}

// ------------------------------------------------------------------ the lanes' sum

constexpr size_t kLanes = hn::MaxLanes(DF());

#if HWY_TARGET != HWY_SCALAR  // one lane: no tree
// One level of the halving tree for two vectors at once: lane i + h onto lane i (and, the
// sum being the same either way round, lane i onto lane i + h), keeping a's sums in the
// h-lane groups of even index and b's in the odd ones.
template <size_t kH>
HWY_INLINE VF tree_level(DF df, VF a, VF b) {
  if constexpr (2 * kH == kLanes) {
    return hn::Add(hn::ConcatLowerLower(df, b, a), hn::ConcatUpperUpper(df, b, a));
  } else if constexpr (kH == 4) {  // 128-bit blocks within 256-bit halves (AVX-512)
    return hn::Add(hn::OddEvenBlocks(hn::SwapAdjacentBlocks(b), a), hn::OddEvenBlocks(b, hn::SwapAdjacentBlocks(a)));
  } else if constexpr (kH == 2) {
    const hn::Repartition<double, DF> dd;
    return hn::Add(hn::BitCast(df, hn::OddEven(hn::BitCast(dd, hn::Shuffle1032(b)), hn::BitCast(dd, a))),
                   hn::BitCast(df, hn::OddEven(hn::BitCast(dd, b), hn::BitCast(dd, hn::Shuffle1032(a)))));
  } else {
    static_assert(kH == 1);
    return hn::Add(hn::OddEven(hn::Shuffle2301(b), a), hn::OddEven(b, hn::Shuffle2301(a)));
  }
}

// The same level for one vector, whose lane 0 is all that is kept.
template <size_t kH>
HWY_INLINE VF tree_level(DF df, VF a) {
  if constexpr (2 * kH == kLanes) {
    return hn::Add(a, hn::ConcatLowerUpper(df, a, a));
  } else if constexpr (kH == 4) {
    return hn::Add(a, hn::SwapAdjacentBlocks(a));
  } else if constexpr (kH == 2) {
    return hn::Add(a, hn::Shuffle1032(a));
  } else {
    return hn::Add(a, hn::Shuffle2301(a));
  }
}

// Levels kH, kH / 2, ..., 1 over the 2 * kH vectors at level[0, 2 * kH) (the first
// kH of them hold the result of each level). Vector j of the first level ends in lane
// bit_reverse(j) of level[0] (each level sends a pair's first vector to the even groups).
template <size_t kH>
HWY_INLINE void tree_levels(DF df, VF* level) {
  if constexpr (kH >= 1) {
    for (size_t m = 0; m < kH; ++m) level[m] = tree_level<kH>(df, level[2 * m], level[2 * m + 1]);
    tree_levels<kH / 2>(df, level);
  }
}
template <size_t kH>
HWY_INLINE VF tree_levels(DF df, VF a) {
  if constexpr (kH >= 1) return tree_levels<kH / 2>(df, tree_level<kH>(df, a));
  return a;
}

#endif

// j's bits in reverse order, over log2(kLanes) bits.
constexpr size_t bit_reverse(size_t j) {
  size_t r = 0;
  for (size_t bit = 1; bit < kLanes; bit <<= 1) r = r << 1 | ((j & bit) != 0);
  return r;
}

// out[j] = the halving-tree sum of v[j]'s lanes (the order at the top of this file), for
// j < n <= kLanes: n sums for about the work of one at a time when n is kLanes.
HWY_INLINE void sum_lanes(DF df, const VF* HWY_RESTRICT v, size_t n, float* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR
  (void)df;
  for (size_t j = 0; j < n; ++j) out[j] = hn::GetLane(v[j]);
#else
  if (n == 1) {
    out[0] = hn::GetLane(tree_levels<kLanes / 2>(df, v[0]));
    return;
  }
  VF level[kLanes];
  for (size_t j = 0; j < kLanes; ++j) level[j] = bit_reverse(j) < n ? v[bit_reverse(j)] : hn::Zero(df);
  tree_levels<kLanes / 2>(df, level);
  if (n == kLanes) {
    hn::StoreU(level[0], df, out);
  } else {
    HWY_ALIGN float sums[kLanes];
    hn::Store(level[0], df, sums);
    std::copy(sums, sums + n, out);
  }
#endif
}

// The end of `n` outputs' sums that share one x, rows w, w + k, ...: the lanes of each
// acc[j] (sum_lanes), then the tail elements [k_vec, k) in order; out[j] for row j.
template <typename WT>
HWY_INLINE void finish(DF df, const VF* HWY_RESTRICT acc, size_t n, const float* HWY_RESTRICT x,
                       const WT* HWY_RESTRICT w, int64_t k_vec, int64_t k, float* HWY_RESTRICT out) {
  for (size_t j0 = 0; j0 < n; j0 += kLanes) sum_lanes(df, acc + j0, std::min(kLanes, n - j0), out + j0);
  if (k_vec == k) return;
  for (size_t j = 0; j < n; ++j) {
    const WT* row = w + static_cast<int64_t>(j) * k;
    for (int64_t i = k_vec; i < k; ++i) out[j] = std::fma(w_scalar(row, i), x[i], out[j]);
  }
}

// ------------------------------------------------------------------ decode tiles

// Where a tile's rows lie (weight_layout.h): row r's element i at w + r * row_stride +
// layout_at(i, group), the tile's rows inside one group.
struct TileRows {
  int64_t row_stride;
  int64_t group;
};

// The TileRows of a call's weights (rows of k elements, in groups of `group`) for a tile
// that starts at its row layout_row(w, k, group, r) and stays inside its group.
template <typename WT>
HWY_INLINE TileRows tile_rows(int64_t k, int64_t group) {
  return {group == 1 ? k : kLineElements<WT>, group};
}

// kChunks chunks from element i of kRows weight rows x kTok tokens, in order, into acc.
template <int kRows, int kTok, int kChunks, typename WT>
HWY_INLINE void tile_step(DF df, const float* HWY_RESTRICT xo, int64_t k, const WT* HWY_RESTRICT w, TileRows rows,
                          int64_t i, VF (&acc)[kRows][kTok]) {
  constexpr int64_t kV = kChunkVectors<WT> * kChunks;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  VF xv[kTok][kV];
  for (int t = 0; t < kTok; ++t)
    for (int64_t v = 0; v < kV; ++v) xv[t][v] = hn::LoadU(df, xo + t * k + i + v * lanes);
  int64_t at[kChunks];
  for (int c = 0; c < kChunks; ++c) at[c] = layout_at<WT>(i + c * kChunkVectors<WT> * lanes, rows.group);
  for (int r = 0; r < kRows; ++r) {
    VF wv[kV];
    for (int c = 0; c < kChunks; ++c) load_chunk(df, w + r * rows.row_stride, at[c], wv + c * kChunkVectors<WT>);
    for (int64_t v = 0; v < kV; ++v)
      for (int t = 0; t < kTok; ++t) acc[r][t] = hn::MulAdd(wv[v], xv[t][v], acc[r][t]);
  }
}

// A tile's share of a call's Ahead (dot_tiles' in_cache tiles, the call's rows [0, rows),
// the tile's from row r): asked for in step with the tile's reads.
struct TileAsk {
  const Ahead* ahead = nullptr;
  size_t* asked = nullptr;
  int64_t r = 0, rows = 1;

  // Before a tile of kRows rows reads their elements up to i of k.
  void upto(int64_t i, int64_t tile_rows, int64_t k) const {
    if (ahead != nullptr) ask_ahead(*ahead, *asked, r * k + tile_rows * i, rows * k);
  }
};

// kRows weight rows x kTok tokens, over the whole of k, accumulators in registers.
// w: the tile's first row, its rows as `rows` says (row-major: a stride of k, and the
// tails after the chunks; interleaved rows have none). xo: the tokens' x in chunk order
// (order_x), x: as given (for the tails); both with a stride of k. One token with f32 or
// f16 weights (a chunk of one vector) takes two chunks a step, in order into the same
// accumulators (so the same sums): each row's reads a whole 64-byte line a step with
// AVX-512 f16, and half the loop's overhead. `ahead` > 0 (one token): each step first
// asks for the tile's next kRows steps' bytes `ahead` bytes further on, in memory order,
// so that the tile asks for the bytes past its own as one sequential stream (a hint);
// `ask` asks for its share of a call's Ahead step by step.
template <int kRows, int kTok, typename WT>
HWY_INLINE void dot_tile(const float* HWY_RESTRICT xo, const float* HWY_RESTRICT x, int64_t k, const WT* HWY_RESTRICT w,
                         TileRows rows, float* HWY_RESTRICT y, int64_t ldy, int64_t ahead = 0,
                         const TileAsk& ask = {}) {
  constexpr int64_t kChunk = kChunkVectors<WT>;
  constexpr int kChunks = kTok == 1 && kChunk == 1 ? 2 : 1;
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t k_vec = chunked<WT>(df, k);
  VF acc[kRows][kTok];
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = hn::Zero(df);
  int64_t i = 0;
  if (ahead > 0) {
    const auto tile_step_bytes = static_cast<int64_t>(kRows * kChunks * kChunk * lanes * sizeof(WT));
    const char* next = reinterpret_cast<const char*>(w) + ahead;
    for (; i + kChunks * kChunk * lanes <= k_vec; i += kChunks * kChunk * lanes) {
      const char* line = next + i * static_cast<int64_t>(sizeof(WT)) * kRows;
      for (int64_t b = 0; b < tile_step_bytes; b += 64) __builtin_prefetch(line + b, 0, 3);
      tile_step<kRows, kTok, kChunks>(df, xo, k, w, rows, i, acc);
    }
  }
  for (; i + kChunks * kChunk * lanes <= k_vec; i += kChunks * kChunk * lanes) {
    ask.upto(i + kChunks * kChunk * lanes, kRows, k_vec);
    tile_step<kRows, kTok, kChunks>(df, xo, k, w, rows, i, acc);
  }
  for (; i < k_vec; i += kChunk * lanes) {
    ask.upto(i + kChunk * lanes, kRows, k_vec);
    tile_step<kRows, kTok, 1>(df, xo, k, w, rows, i, acc);
  }
  for (int t = 0; t < kTok; ++t) {
    VF column[kRows];
    for (int r = 0; r < kRows; ++r) column[r] = acc[r][t];
    finish(df, column, kRows, x + t * k, w, k_vec, k, y + t * ldy);
  }
}

// Tokens (attention's query rows) that dot_tiles' in-cache tiles take at once
// (kernels.h's dot_rows_at_once).
constexpr int kOneTreeTokens = kLanes >= 16 ? 4 : 1;

// kRows in-cache rows (one after another) x kTok tokens, kLanes sums in all, whose lanes
// sum_lanes adds in one tree: dot_tile<kRows, kTok>'s sums (each chunk in order into its
// accumulator, then the lanes' tree, then the tail), where dot_tile's finish would pay a
// whole tree for each token's kRows. Attention's scores: a block's keys read once for a
// token's query heads, not once a head as by tiles of kLanes rows x 1 token.
template <int kRows, int kTok, typename WT>
HWY_INLINE void dot_tile_one_tree(const float* HWY_RESTRICT xo, const float* HWY_RESTRICT x, int64_t k,
                                  const WT* HWY_RESTRICT w, float* HWY_RESTRICT y, int64_t ldy) {
  static_assert(kRows * kTok == static_cast<int>(kLanes));
  constexpr int64_t kChunk = kChunkVectors<WT>;
  const DF df;
  const int64_t step = kChunk * static_cast<int64_t>(hn::Lanes(df));
  const int64_t k_vec = chunked<WT>(df, k);
  VF acc[kRows][kTok];
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = hn::Zero(df);
  for (int64_t i = 0; i < k_vec; i += step) tile_step<kRows, kTok, 1>(df, xo, k, w, TileRows{k, 1}, i, acc);
  VF by_token[kTok * kRows];  // a token's sums side by side
  for (int t = 0; t < kTok; ++t)
    for (int r = 0; r < kRows; ++r) by_token[t * kRows + r] = acc[r][t];
  HWY_ALIGN float sums[kLanes];
  sum_lanes(df, by_token, kLanes, sums);
  for (int t = 0; t < kTok; ++t) {
    float* out = y + t * ldy;
    std::memcpy(out, sums + t * kRows, sizeof(float) * kRows);
    if (k_vec == k) continue;
    for (int r = 0; r < kRows; ++r)
      for (int64_t i = k_vec; i < k; ++i) out[r] = std::fma(w_scalar(w + r * k, i), x[t * k + i], out[r]);
  }
}

// dot_tiles' in-cache rows for `tokens`, a multiple of kOneTreeTokens: tiles of
// kOneTreeTokens tokens x the rows that make kLanes sums, then each row left a token at a
// time; `ahead` asked for as the first tokens' tiles read, a tile's share before it.
template <typename WT>
void one_tree_tiles(const float* HWY_RESTRICT xo, const float* HWY_RESTRICT x, int64_t tokens, int64_t k,
                    const WT* HWY_RESTRICT w, int64_t rows, float* HWY_RESTRICT y, int64_t ldy, const Ahead& ahead) {
  if constexpr (kOneTreeTokens > 1) {
    constexpr int kTok = kOneTreeTokens, kRows = static_cast<int>(kLanes) / kTok;
    size_t asked = 0;
    for (int64_t t = 0; t < tokens; t += kTok) {
      int64_t r = 0;
      for (; r + kRows <= rows; r += kRows) {
        if (t == 0) ask_ahead(ahead, asked, r + kRows, rows);
        dot_tile_one_tree<kRows, kTok>(xo + t * k, x + t * k, k, w + r * k, y + t * ldy + r, ldy);
      }
      ask_ahead(ahead, asked, rows, rows);
      for (; r < rows; ++r)
        for (int64_t u = t; u < t + kTok; ++u)
          dot_tile<1, 1>(xo + u * k, x + u * k, k, w + r * k, TileRows{k, 1}, y + u * ldy + r, ldy);
    }
  }
}

// kS groups of kRows interleaved rows (weight_layout.h) for one token, side by side: group j
// from `first[j]` (its first line) into y[j]. Each group's lines in memory order through one
// pointer (the sums of dot_tile<kRows, 1>: each row's chunks in order into its own
// accumulator; interleaved rows have no tails). `ahead` > 0: each line step first asks for
// every group's kRows lines `ahead` bytes on (a hint: the same bits).
template <int kRows, int kS, typename WT>
void groups_side_by_side(const float* HWY_RESTRICT xo, int64_t k, const WT* const* first, float* const* y,
                         int64_t ahead) {
  constexpr int64_t kV = kChunkVectors<WT>, kE = kLineElements<WT>;
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df)), chunk = kV * lanes;
  VF acc[kS][kRows];
  const WT* line[kS];
  for (int j = 0; j < kS; ++j) {
    line[j] = first[j];
    for (int r = 0; r < kRows; ++r) acc[j][r] = hn::Zero(df);
  }
  for (int64_t i = 0; i < k; i += kE) {
    if (ahead > 0)
      for (int j = 0; j < kS; ++j)
        for (int r = 0; r < kRows; ++r)
          __builtin_prefetch(reinterpret_cast<const char*>(line[j]) + ahead + r * kLineBytes, 0, 3);
    for (int64_t c = 0; c < kE; c += chunk) {
      VF xv[kV];
      for (int64_t v = 0; v < kV; ++v) xv[v] = hn::LoadU(df, xo + i + c + v * lanes);
      for (int j = 0; j < kS; ++j)
        for (int r = 0; r < kRows; ++r) {
          VF wv[kV];
          load_chunk(df, line[j] + r * kE, c, wv);
          for (int64_t v = 0; v < kV; ++v) acc[j][r] = hn::MulAdd(wv[v], xv[v], acc[j][r]);
        }
    }
    for (int j = 0; j < kS; ++j) line[j] += kRows * kE;
  }
  for (int j = 0; j < kS; ++j) finish(df, acc[j], kRows, xo, first[j], k, k, y[j]);
}

// One token over interleaved rows in groups of kRows: the call's groups cut into
// kSideBySide (weight_layout.h) parts read side by side, a group of each at a time, the
// groups left over one by one.
template <int kRows, typename WT>
void decode_groups(const float* HWY_RESTRICT xo, int64_t k, const WT* HWY_RESTRICT w, int64_t rows,
                   float* HWY_RESTRICT y, int64_t ahead) {
  constexpr int kS = kSideBySide<kRows>;
  const int64_t groups = rows / kRows, part = groups / kS;
  for (int64_t g = 0; g < part; ++g) {
    const WT* first[kS];
    float* out[kS];
    for (int j = 0; j < kS; ++j) {
      first[j] = w + (j * part + g) * kRows * k;
      out[j] = y + (j * part + g) * kRows;
    }
    groups_side_by_side<kRows, kS>(xo, k, first, out, ahead);
  }
  for (int64_t g = kS * part; g < groups; ++g) {
    const WT* first = w + g * kRows * k;
    float* out = y + g * kRows;
    groups_side_by_side<kRows, 1>(xo, k, &first, &out, ahead);
  }
}

// Rows [0, rows) of w (in groups of `group`, 1, 4, 8 or 16: weight_layout.h) for a few
// tokens. in_cache (rows one after another that sit in cache: attention's keys): the
// tokens in fours over tiles of kLanes / 4 rows (one_tree_tiles), the tokens left a token
// at a time over tiles of kLanes rows, each tile's kLanes lane sums added by sum_lanes in
// one tree (a tile of 4 rows pays the same tree for 4), asking for `ahead` as the first
// tokens' tiles read; the same sums every way.
template <typename WT>
void dot_tiles(const float* HWY_RESTRICT x, int64_t tokens, int64_t k, const WT* HWY_RESTRICT w, int64_t rows,
               float* HWY_RESTRICT y, int64_t ldy, int64_t group, bool in_cache, const Ahead& ahead = {}) {
  const DF df;
  const float* xo = x;
  if constexpr (kChunkVectors<WT> != 1) {
    thread_local std::vector<float> ordered;
    ordered.resize(static_cast<size_t>(tokens * k));
    for (int64_t t = 0; t < tokens; ++t) order_x<WT>(df, x + t * k, chunked<WT>(df, k), ordered.data() + t * k);
    xo = ordered.data();
  }
  const TileRows layout = tile_rows<WT>(k, group);
  int64_t r = 0;
  size_t asked = 0;
  if constexpr (kLanes >= 8 && static_cast<int>(kLanes) <= kMaxDecodeRows) {
    if (kOneTreeTokens > 1 && in_cache && group == 1 && tokens >= kOneTreeTokens) {
      const int64_t most = tokens / kOneTreeTokens * kOneTreeTokens;
      one_tree_tiles(xo, x, most, k, w, rows, y, ldy, ahead);
      if (most < tokens) dot_tiles(x + most * k, tokens - most, k, w, rows, y + most * ldy, ldy, group, true);
      return;
    }
    if (in_cache && group == 1)
      for (; r + static_cast<int64_t>(kLanes) <= rows; r += static_cast<int64_t>(kLanes))
        for (int64_t t = 0; t < tokens; ++t)
          dot_tile<static_cast<int>(kLanes), 1>(xo + t * k, x + t * k, k, w + r * k, layout, y + t * ldy + r, ldy, 0,
                                                t == 0 ? TileAsk{&ahead, &asked, r, rows} : TileAsk{});
  }
  ask_ahead(ahead, asked, rows, rows);  // the rest, before the rows left
  if (tokens == 1 && group == 4) return decode_groups<4>(xo, k, w, rows, y, decode_prefetch_bytes());
  if (tokens == 1 && group == 8) return decode_groups<8>(xo, k, w, rows, y, decode_prefetch_bytes());
  if (tokens == 1 && group == 16) return decode_groups<16>(xo, k, w, rows, y, decode_prefetch_bytes());
  if (tokens == 1) {  // rows one after another
    const int64_t ahead = decode_prefetch_bytes();
    const int n = std::min(decode_tile_rows(), kMaxDecodeRows);
    if (n == 16) {
      for (; r + kMaxDecodeRows <= rows; r += kMaxDecodeRows)
        dot_tile<kMaxDecodeRows, 1>(xo, x, k, w + r * k, layout, y + r, ldy, ahead);
    }
    if (n >= 8) {
      for (; r + 8 <= rows; r += 8) dot_tile<8, 1>(xo, x, k, w + r * k, layout, y + r, ldy, ahead);
    }
    for (; r + 4 <= rows; r += 4) dot_tile<4, 1>(xo, x, k, w + r * k, layout, y + r, ldy, ahead);
  }
  // Tiles of 4 rows: inside one group of any interleaved layout (of 4, 8 or 16 rows).
  for (; r + 4 <= rows; r += 4) {
    const WT* tile = layout_row(w, k, group, r);
    int64_t t = 0;
    for (; t + 3 <= tokens; t += 3) dot_tile<4, 3>(xo + t * k, x + t * k, k, tile, layout, y + t * ldy + r, ldy);
    for (; t < tokens; ++t) dot_tile<4, 1>(xo + t * k, x + t * k, k, tile, layout, y + t * ldy + r, ldy);
  }
  for (; r < rows; ++r)
    for (int64_t t = 0; t < tokens; ++t)
      dot_tile<1, 1>(xo + t * k, x + t * k, k, w + r * k, layout, y + t * ldy + r, ldy);
}

// ------------------------------------------------------------------ GEMM

// Widens rows [0, rows) x elements [k0, k0 + kc) of w (in groups of `group`:
// weight_layout.h) into panel, in groups of kPanelRows rows: group g holds panel[g * kc +
// (s * kPanelRows + r) * L + lane] for vector s (in chunk order). Rows past `rows` in the
// last group are zeros (their sums are never read).
template <typename WT>
void pack_panel(DF df, const WT* HWY_RESTRICT w, int64_t k, int64_t group, int64_t rows, int64_t k0, int64_t kc,
                float* HWY_RESTRICT panel) {
  constexpr int64_t kV = kChunkVectors<WT>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  for (int64_t g = 0; g < rows; g += kPanelRows) {
    float* out = panel + g * kc;
    for (int64_t s = 0; s < kc / lanes; s += kV) {
      for (int r = 0; r < kPanelRows; ++r) {
        VF wv[kV];
        if (g + r < rows) {
          load_chunk(df, layout_row(w, k, group, g + r), layout_at<WT>(k0 + s * lanes, group), wv);
        } else {
          for (int64_t v = 0; v < kV; ++v) wv[v] = hn::Zero(df);
        }
        for (int64_t v = 0; v < kV; ++v) hn::Store(wv[v], df, out + ((s + v) * kPanelRows + r) * lanes);
      }
    }
  }
}

// x packed for the GEMM, for all the call's tokens: token blocks of mc = token_block(k_vec),
// block b at xp + b * mc * k_vec. Within a block of `padded` tokens (mc, or the last block's
// tokens rounded up to whole panels), the k block at k0 (kc elements) starts at
// k0 * padded and holds, for the panel of kPanelTokens tokens from p,
// [p * kc + (s * kPanelTokens + t) * L + lane] for vector s, in chunk order. Tokens
// past the call's last, up to the end of its panel, are zeros (their sums are never read).
HWY_INLINE int64_t padded_tokens(int64_t tokens) { return (tokens + kPanelTokens - 1) / kPanelTokens * kPanelTokens; }

// Packs tokens [begin, end) (and, when end == tokens, the zeros after them); a token
// writes only its own lanes, so threads may pack disjoint ranges of one call. row:
// scratch of k_vec floats.
template <typename WT>
void pack_x(DF df, const float* HWY_RESTRICT x, int64_t tokens, int64_t k, int64_t begin, int64_t end,
            float* HWY_RESTRICT xp, float* HWY_RESTRICT row) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t k_vec = chunked<WT>(df, k);
  const int64_t mc = token_block(k_vec);
  const int64_t last = end == tokens ? padded_tokens(tokens) : end;
  for (int64_t t = begin; t < last; ++t) {
    if (t < tokens) order_x<WT>(df, x + t * k, k_vec, row);
    const int64_t t0 = t / mc * mc;
    const int64_t padded = std::min(mc, padded_tokens(tokens) - t0);
    const int64_t p = (t - t0) / kPanelTokens * kPanelTokens;
    float* block = xp + t0 * k_vec;
    for (int64_t k0 = 0; k0 < k_vec; k0 += kKc) {
      const int64_t kc = std::min(kKc, k_vec - k0);
      float* panel = block + k0 * padded + p * kc;
      for (int64_t s = 0; s < kc / lanes; ++s) {
        float* dst = panel + (s * kPanelTokens + t - t0 - p) * lanes;
        hn::Store(t < tokens ? hn::LoadU(df, row + k0 + s * lanes) : hn::Zero(df), df, dst);
      }
    }
  }
}

// One panel group of kPanelRows weight rows x one panel of kPanelTokens tokens, `steps`
// vectors. The partial vectors live in acc, one of L floats per (token, row),
// token-major with a stride of kNc rows; the first k block (`first`) starts them from
// zero instead of reading them.
HWY_INLINE void micro_kernel(DF df, const float* HWY_RESTRICT wp, const float* HWY_RESTRICT xp, int64_t steps,
                             float* HWY_RESTRICT acc, bool first) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  VF a[kPanelRows][kPanelTokens];
  for (int r = 0; r < kPanelRows; ++r)
    for (int t = 0; t < kPanelTokens; ++t) a[r][t] = first ? hn::Zero(df) : hn::Load(df, acc + (t * kNc + r) * lanes);
  for (int64_t s = 0; s < steps; ++s) {
    const float* ws = wp + s * kPanelRows * lanes;
    const float* xs = xp + s * kPanelTokens * lanes;
    for (int r = 0; r < kPanelRows; ++r) {
      const VF wv = hn::Load(df, ws + r * lanes);
      for (int t = 0; t < kPanelTokens; ++t) a[r][t] = hn::MulAdd(wv, hn::Load(df, xs + t * lanes), a[r][t]);
    }
  }
  for (int r = 0; r < kPanelRows; ++r)
    for (int t = 0; t < kPanelTokens; ++t) hn::Store(a[r][t], df, acc + (t * kNc + r) * lanes);
}

// The GEMM over x packed by pack_x (xp); x itself is read only for the sums' tails. w's
// rows in groups of `group` (weight_layout.h).
template <typename WT>
void gemm(const float* HWY_RESTRICT xp, const float* HWY_RESTRICT x, int64_t tokens, int64_t k,
          const WT* HWY_RESTRICT w, int64_t rows, float* HWY_RESTRICT y, int64_t ldy, int64_t group) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t k_vec = chunked<WT>(df, k);
  auto acc = hwy::AllocateAligned<float>(static_cast<size_t>(kMc * kNc * lanes));
  auto wp = hwy::AllocateAligned<float>(static_cast<size_t>(kNc * kKc));
  TS_CHECK(acc && wp, "[cpu] matmul scratch");
  const int64_t mc = token_block(k_vec);
  for (int64_t t0 = 0; t0 < tokens; t0 += mc) {
    const int64_t mt = std::min(mc, tokens - t0);
    const int64_t padded = padded_tokens(mt);
    const float* xb = x + t0 * k;
    for (int64_t r0 = 0; r0 < rows; r0 += kNc) {
      const int64_t nr = std::min(kNc, rows - r0);
      for (int64_t k0 = 0; k0 < k_vec; k0 += kKc) {
        const int64_t kc = std::min(kKc, k_vec - k0);
        pack_panel(df, w + r0 * k, k, group, nr, k0, kc, wp.get());
        const float* xblock = xp + t0 * k_vec + k0 * padded;
        for (int64_t g = 0; g < nr; g += kPanelRows)
          for (int64_t p = 0; p < padded; p += kPanelTokens)
            micro_kernel(df, wp.get() + g * kc, xblock + p * kc, kc / lanes, acc.get() + (p * kNc + g) * lanes,
                         k0 == 0);
      }
      for (int64_t t = 0; t < mt; ++t) {
        VF column[kNc];
        for (int64_t r = 0; r < nr; ++r) column[r] = hn::Load(df, acc.get() + (t * kNc + r) * lanes);
        finish(df, column, static_cast<size_t>(nr), xb + t * k, w + r0 * k, k_vec, k, y + (t0 + t) * ldy + r0);
      }
    }
  }
}

template <typename WT>
int64_t packed_floats(int64_t tokens, int64_t k) {
  return tokens < kGemmTokens ? 0 : padded_tokens(tokens) * chunked<WT>(DF(), k);
}

template <typename WT>
void matmul_typed(const float* x, int64_t tokens, int64_t k, const WT* w, int64_t rows, float* y, int64_t ldy,
                  int64_t group) {
  const int64_t packed = packed_floats<WT>(tokens, k);
  if (packed == 0) return dot_tiles(x, tokens, k, w, rows, y, ldy, group, false);
  auto xp = hwy::AllocateAligned<float>(static_cast<size_t>(packed));
  auto row = hwy::AllocateAligned<float>(static_cast<size_t>(k + 1));
  TS_CHECK(xp && row, "[cpu] matmul scratch");
  pack_x<WT>(DF(), x, tokens, k, 0, tokens, xp.get(), row.get());
  gemm(xp.get(), x, tokens, k, w, rows, y, ldy, group);
}

// Calls fn with w cast to its element type (hwy's bf16 and f16 types for 16-bit weights).
template <typename Fn>
HWY_INLINE auto with_weight_type(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn(static_cast<const float*>(nullptr));
    case DType::kBF16: return fn(static_cast<const hwy::bfloat16_t*>(nullptr));
    case DType::kF16: return fn(static_cast<const hwy::float16_t*>(nullptr));
    default: TS_CHECK(false, "matmul weight dtype ", dtype_name(dtype));
  }
  return fn(static_cast<const float*>(nullptr));
}

// The instruction kernel (bf16_matmul.h) that weights of w_dtype take, or nullptr for
// this file's own paths: f16 weights on an AVX-512 or AVX2 target take f16_columns.h's
// column order unless TESSERA_F16_COLUMNS=0, bf16 weights on an AVX2 target
// bf16_columns_avx2.h's unless TESSERA_BF16_COLUMNS=0; bf16 weights on an AVX-512 target whose CPU has AVX-512 BF16,
// unless TESSERA_BF16_DOT=0 (bf16_dot::enabled; a test that narrows dispatch to AVX2 gets
// the widening order on the same CPU), take amx.h's tile products where the CPU has
// AMX-BF16 too (unless TESSERA_AMX=0), else bf16_dot.h's dot products, in the column
// order unless TESSERA_BF16_COLUMNS=0.
HWY_INLINE const bf16::Matmul* instruction_kernel(DType w_dtype) {
#if HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
  if (w_dtype == DType::kF16) return f16_columns::enabled() ? f16_columns::instructions() : nullptr;
  if (w_dtype != DType::kBF16 || !bf16_dot::enabled()) return nullptr;
  if (amx::enabled()) return amx::instructions();
  return bf16_dot::columns_enabled() ? bf16_dot::columns() : bf16_dot::instructions();
#elif HWY_TARGET == HWY_AVX2
  if (w_dtype == DType::kF16) return f16_columns::enabled() ? f16_columns::avx2_instructions() : nullptr;
  if (w_dtype == DType::kBF16) return bf16_columns_avx2::enabled() ? bf16_columns_avx2::instructions() : nullptr;
  return nullptr;
#else
  (void)w_dtype;
  return nullptr;
#endif
}

bool Bf16DotActive() { return HWY_TARGET != HWY_AVX2 && instruction_kernel(DType::kBF16) != nullptr; }
bool ColumnsActive(DType w_dtype) {
  const bf16::Matmul* m = instruction_kernel(w_dtype);
  return m != nullptr && m->row_group() == kColumns;
}
bool AmxActive() { return Bf16DotActive() && amx::enabled(); }

// The group of rows that weights of w_dtype are laid out in (kernels.h): the instruction
// kernel's choice, else decode_tile_rows() (at most kMaxDecodeRows on this file's paths).
int64_t MatmulRowGroup(DType w_dtype) {
  // quant_groups.cpp's layout, their only kernels
  if (block32(w_dtype)) return kQuantGroup;
  if (const bf16::Matmul* m = instruction_kernel(w_dtype)) return m->row_group();
  return std::min(decode_tile_rows(), kMaxDecodeRows);
}

// A call's weights lie in a layout its kernel reads: rows one after another, groups of
// lines, or (the column order's alone) kColumns.
HWY_INLINE void check_layout(const bf16::Matmul* m, DType w_dtype, int64_t rows, int64_t k, int64_t group) {
  const bool columns_read = group != kColumns || (m != nullptr && m->row_group() == kColumns);
  TS_CHECK((group == 1 || can_interleave(w_dtype, rows, k, group)) && columns_read, "[cpu] matmul of ", rows, " x ", k,
           " ", dtype_name(w_dtype), " rows in groups of ", group);
}

void MatmulRows(const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t rows, float* y,
                int64_t ldy, int64_t group) {
  const bf16::Matmul* m = instruction_kernel(w_dtype);
  check_layout(m, w_dtype, rows, k, group);
  if (m != nullptr) return m->matmul_rows(x, tokens, k, static_cast<const uint16_t*>(w), rows, y, ldy, group);
  with_weight_type(w_dtype, [&](auto tag) {
    using WT = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    matmul_typed(x, tokens, k, static_cast<const WT*>(w), rows, y, ldy, group);
  });
}

void DotRows(const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t rows, float* y,
             int64_t ldy, const Ahead& ahead) {
  with_weight_type(w_dtype, [&](auto tag) {
    using WT = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    dot_tiles(x, tokens, k, static_cast<const WT*>(w), rows, y, ldy, 1, true, ahead);
  });
}

int64_t DotRowsAtOnce() { return kOneTreeTokens; }

int64_t MatmulPackedFloats(int64_t tokens, int64_t k, DType w_dtype) {
  if (const bf16::Matmul* m = instruction_kernel(w_dtype)) return m->packed_floats(tokens, k);
  return with_weight_type(w_dtype, [&](auto tag) {
    using WT = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    return packed_floats<WT>(tokens, k);
  });
}

void MatmulPackX(const float* x, int64_t tokens, int64_t k, DType w_dtype, int64_t begin, int64_t end, float* xp) {
  if (const bf16::Matmul* m = instruction_kernel(w_dtype)) return m->pack_x(x, tokens, k, begin, end, xp);
  auto row = hwy::AllocateAligned<float>(static_cast<size_t>(k + 1));
  TS_CHECK(row, "[cpu] matmul scratch");
  with_weight_type(w_dtype, [&](auto tag) {
    using WT = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    pack_x<WT>(DF(), x, tokens, k, begin, end, xp, row.get());
  });
}

// Tokens at whole token blocks (pack_x's layout), rows at 32 (two kNc row groups).
MatmulSplit MatmulSplitOf(int64_t k, DType w_dtype) {
  if (const bf16::Matmul* m = instruction_kernel(w_dtype)) return {m->split_tokens, m->split_rows, m->most_tokens};
  return with_weight_type(w_dtype, [&](auto tag) {
    using WT = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    return MatmulSplit{token_block(chunked<WT>(DF(), k)), 2 * kNc};
  });
}

void MatmulRowsPacked(const float* xp, const float* x, int64_t tokens, int64_t begin, int64_t end, int64_t k,
                      const void* w, DType w_dtype, int64_t rows, float* y, int64_t ldy, int64_t group) {
  const bf16::Matmul* m = instruction_kernel(w_dtype);
  check_layout(m, w_dtype, rows, k, group);
  if (m != nullptr)
    return m->matmul_rows_packed(xp, tokens, begin, end, k, static_cast<const uint16_t*>(w), rows, y, ldy, group);
  with_weight_type(w_dtype, [&](auto tag) {
    using WT = std::remove_const_t<std::remove_pointer_t<decltype(tag)>>;
    const int64_t k_vec = chunked<WT>(DF(), k), mc = token_block(k_vec);
    TS_CHECK(begin % mc == 0 && begin < end && (end == tokens || end % mc == 0), "[cpu] GEMM tokens [", begin, ", ",
             end, ") of ", tokens);
    // From a whole token block on, the packed x of [begin, end) is laid out as a call of
    // end - begin tokens would pack it.
    gemm(xp + begin * k_vec, x + begin * k, end - begin, k, static_cast<const WT*>(w), rows, y + begin * ldy, ldy,
         group);
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace tessera::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(MatmulRows);
HWY_EXPORT(MatmulRowGroup);
HWY_EXPORT(DotRows);
HWY_EXPORT(DotRowsAtOnce);
HWY_EXPORT(Bf16DotActive);
HWY_EXPORT(AmxActive);
HWY_EXPORT(ColumnsActive);
HWY_EXPORT(MatmulPackedFloats);
HWY_EXPORT(MatmulPackX);
HWY_EXPORT(MatmulSplitOf);
HWY_EXPORT(MatmulRowsPacked);

void matmul_rows(const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t rows, float* y,
                 int64_t ldy, int64_t group) {
  HWY_DYNAMIC_DISPATCH(MatmulRows)(x, tokens, k, w, w_dtype, rows, y, ldy, group);
}
int64_t matmul_row_group(DType w_dtype) {
  static const bool on = bf16::switched_on("TESSERA_INTERLEAVE");
  return on ? HWY_DYNAMIC_DISPATCH(MatmulRowGroup)(w_dtype) : 1;
}
void dot_rows(const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t rows, float* y,
              int64_t ldy, const Ahead& ahead) {
  HWY_DYNAMIC_DISPATCH(DotRows)(x, tokens, k, w, w_dtype, rows, y, ldy, ahead);
}
int64_t dot_rows_at_once() { return HWY_DYNAMIC_DISPATCH(DotRowsAtOnce)(); }
bool bf16_dot_active() { return HWY_DYNAMIC_DISPATCH(Bf16DotActive)(); }
bool amx_active() { return HWY_DYNAMIC_DISPATCH(AmxActive)(); }
bool columns_active(DType w_dtype) { return HWY_DYNAMIC_DISPATCH(ColumnsActive)(w_dtype); }
int64_t matmul_packed_floats(int64_t tokens, int64_t k, DType w_dtype) {
  return HWY_DYNAMIC_DISPATCH(MatmulPackedFloats)(tokens, k, w_dtype);
}
void matmul_pack_x(const float* x, int64_t tokens, int64_t k, DType w_dtype, int64_t begin, int64_t end,
                   float* packed) {
  HWY_DYNAMIC_DISPATCH(MatmulPackX)(x, tokens, k, w_dtype, begin, end, packed);
}
MatmulSplit matmul_split(int64_t k, DType w_dtype) { return HWY_DYNAMIC_DISPATCH(MatmulSplitOf)(k, w_dtype); }
void matmul_rows_packed(const float* packed, const float* x, int64_t tokens, int64_t begin, int64_t end, int64_t k,
                        const void* w, DType w_dtype, int64_t rows, float* y, int64_t ldy, int64_t group) {
  HWY_DYNAMIC_DISPATCH(MatmulRowsPacked)(packed, x, tokens, begin, end, k, w, w_dtype, rows, y, ldy, group);
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
