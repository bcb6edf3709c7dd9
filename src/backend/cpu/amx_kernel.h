// The matmul of bf16 weights by AMX tile products (tdpbf16ps), written once over an `Ops`
// type that supplies the tiles and the instruction:
//   - amx.cpp instantiates it with the instructions themselves;
//   - the tests instantiate it with a portable emulation (amx_emulated.h), so the
//     blocking and the order are tested on every machine and the instruction where the
//     CPU has it.
// Every standard header it uses, and bf16_matmul.h, must be included before it, and its plain functions are
// static (see bf16_dot_kernel.h for why).
//
// The order of every output's sum, whatever the number of tokens in the call (decode and
// prefill run exactly this sequence, so a token's row is bitwise the same alone or in a
// batch, at any thread count):
//   x is rounded to bf16 (nearest even), past k padded with zeros to a whole chunk of
//   kChunk = 32 elements (the weights' last chunk likewise);
//   acc = 0, one f32;
//   for each chunk along k in order: acc = tdpbf16ps(acc, w chunk, x chunk).
// There is no lane tree: an output is one element of a C tile, its own accumulator, and
// each instruction's result for it is a function of that accumulator and the output's own
// w and x chunks alone. So the order is fixed by k alone, never by the tile's shape, the
// number of tokens or where a partial sum waits between k blocks (C tiles stored and
// loaded again hold the same bits).
// What the instruction computes for one output and one chunk (not the Intel SDM's
// pseudo-code, one chain of 32 fused multiply-adds, which the hardware matches on few
// outputs; found on the dev VM's Sapphire-Rapids-class Xeon, bitwise on 512,000 random
// outputs, docs/benchmarks.md, session 52):
//   even = 0; for p = 0..15: even = even + w[2p] * x[2p]
//   odd = 0;  for p = 0..15: odd = odd + w[2p+1] * x[2p+1]
//   acc = acc + (even + odd)
// every product and every sum rounded to f32 (nearest even) on its own, not fused, with
// subnormal inputs read as zero and subnormal results (products too) flushed to zero:
// vector multiplies and adds under MXCSR's DAZ and FTZ give the same bits. amx_emulated.h
// computes this; amx_test.cpp holds the instruction to it bitwise, and amx.cpp checks it
// on the CPU at hand before decode takes vector steps instead of tiles (decode_columns).
//
// Tiles: C (i, j) = tile 2i + j (16 weight rows x up to 16 tokens of f32), A (i) = tile
// 4 + i (16 weight rows x 32 bf16 of k: decode loads them straight from the weight rows,
// the GEMM from a copy in tile order), B (j) = tile 6 + j (16 pairs of k x up to 16
// tokens, x's pairs interleaved by token: the VNNI layout).
//
// Ops (all static): configure(cols) (palette 1: C and B tiles of `cols` tokens, A tiles
// of 64 bytes, 16 rows each); release(); zero<T>(); load<T>(p, stride),
// load_streaming<T>(p, stride) (the same load, hinted as not reused soon) and
// store<T>(p, stride) (16 rows, `stride` bytes apart); dot<C, A, B>(); round_x(x, n,
// out) (n floats to bf16); transpose16(src, ss, dst, ds) (dst[j * ds + i] = src[i * ss +
// j] for i, j < 16: 32-bit elements moved as bits, for C tiles out to y and x into B
// tiles). The tile state is the calling thread's.
#ifndef TESSERA_BACKEND_CPU_AMX_KERNEL_H_
#define TESSERA_BACKEND_CPU_AMX_KERNEL_H_

namespace tessera::cpu::amx::kernel {

using bf16::kChunk;  // bf16 elements of k in one row of an A tile
using bf16::padded_k;
using bf16::round_row;
inline constexpr int64_t kTileRows = 16;                         // weight rows of an A tile
inline constexpr int64_t kTileTokens = 16;                       // tokens of a B tile (a call of more than one)
inline constexpr int64_t kTileFloats = kTileRows * kTileTokens;  // a C tile: 1 KiB
inline constexpr int64_t kTileElements = kTileRows * kChunk;     // an A tile: 1 KiB of bf16
// GEMM blocking (tokens, weight rows, chunks along k). Every k step of a 2 x 2 tile block
// loads four tiles for four tile products, so one operand must come from L1 for the
// products to run near their rate: the A tiles of a row pair for one k block (2 x
// kKcChunks KiB = 32 KiB) are copied from the weight rows into tile order (1 KiB a tile,
// rows 64 bytes apart: read straight from rows 2k bytes apart, the 16 rows of a tile fell
// into one L1 set whenever k was a multiple of 2048) and stay in L1 while every token tile
// pair of the token block runs over them; the B tiles of that k block (kTokBlock x
// kKcChunks x 64 bytes = 512 KiB) and the row block's partial sums (kRowBlock x kTokBlock
// f32 = 256 KiB, C tiles of 1 KiB) stay in L2. Each weight is copied once per token block
// (once a call up to kTokBlock tokens).
inline constexpr int64_t kTokBlock = 512;
inline constexpr int64_t kRowBlock = 128;
inline constexpr int64_t kKcChunks = 16;
inline constexpr int64_t kAccFloats = kRowBlock * kTokBlock;
// Elements of the packed A tiles of one row pair at one k block (gemm's a_scratch).
inline constexpr int64_t kPackedRowElements = 2 * kKcChunks * kTileElements;
static_assert(kTokBlock % (2 * kTileTokens) == 0 && kRowBlock % (2 * kTileRows) == 0);

// Choices of speed alone in the GEMM, for measuring one against another in one binary
// (amx.cpp reads them from the environment): every output's sum is the same whatever they
// are, since C tiles stored between k blocks and loaded again hold the same bits.
struct GemmTuning {
  // Chunks of k a block (1 to kKcChunks): a row pair's A tiles take 2 x k_chunks KiB of
  // L1, twice that when a core's two hyperthreads both multiply; the C tiles go to acc
  // and back once a k block.
  int64_t k_chunks = kKcChunks;
  // x's B tiles loaded with the hint that they will not be reused soon (tileloaddt1): they
  // stream from L2 once a row pair, and the hint keeps them from pushing the A tiles,
  // reused by every token tile, out of L1.
  bool stream_b = false;
};

static inline int64_t padded_tokens(int64_t tokens) { return (tokens + kTileTokens - 1) / kTileTokens * kTileTokens; }
// bf16 elements of a call's packed x (see pack_x).
static inline int64_t packed_elements(int64_t tokens, int64_t k) { return padded_tokens(tokens) * padded_k(k); }

// x packed for the tiles: token tile tt (tokens 16 tt ..) and chunk c form one B tile of
// 1 KiB at u32 index (tt * chunks + c) * 256, whose row p holds, for each token n of the
// tile, the pair of elements 32 c + 2 p and 32 c + 2 p + 1 (u32 p * 16 + n). Tokens past
// the call's last, to the end of their tile, are zeros. Packs tokens [begin, end) (and
// the zeros when end == tokens); a token writes only its own pairs, so threads may pack
// disjoint ranges. A whole token tile in the range is rounded into `rows` and transposed
// into its B tiles 16 x 16 pairs at a time; the tokens of a partial one pair by pair.
// rows: scratch of kTileTokens x padded_k(k) elements.
template <typename Ops>
void pack_x(const float* x, int64_t tokens, int64_t k, int64_t begin, int64_t end, uint32_t* xp, uint16_t* rows) {
  const int64_t kp = padded_k(k), pairs = kp / 2, chunks = kp / kChunk;
  const int64_t last = end == tokens ? padded_tokens(tokens) : end;
  auto round = [&](int64_t t, uint16_t* row) {
    if (t < tokens) {
      round_row<Ops>(x + t * k, k, row);
    } else {
      std::memset(row, 0, static_cast<size_t>(kp) * sizeof(uint16_t));
    }
  };
  for (int64_t t = begin; t < last;) {
    uint32_t* tile = xp + t / kTileTokens * chunks * 256;
    if (t % kTileTokens == 0 && t + kTileTokens <= last) {
      for (int64_t n = 0; n < kTileTokens; ++n) round(t + n, rows + n * kp);
      for (int64_t c = 0; c < chunks; ++c)
        Ops::transpose16(reinterpret_cast<const float*>(rows) + c * (kChunk / 2), pairs,
                         reinterpret_cast<float*>(tile + c * 256), kTileTokens);
      t += kTileTokens;
      continue;
    }
    round(t, rows);
    for (int64_t p = 0; p < pairs; ++p) {
      uint32_t pair;
      std::memcpy(&pair, rows + 2 * p, sizeof(pair));
      tile[p * kTileTokens + t % kTileTokens] = pair;
    }
    ++t;
  }
}

// y[n * ldy + m] = tile[16 m + n] for m < rows, n < tokens: a C tile out to token-major y.
template <typename Ops>
void store_transposed(const float* tile, int rows, int tokens, float* y, int64_t ldy) {
  if (rows == kTileRows && tokens == kTileTokens) return Ops::transpose16(tile, kTileTokens, y, ldy);
  alignas(64) float whole[kTileFloats];
  Ops::transpose16(tile, kTileTokens, whole, kTileRows);
  for (int n = 0; n < tokens; ++n) std::copy(whole + n * kTileRows, whole + n * kTileRows + rows, y + n * ldy);
}

// A group of 16 weight rows from `first` (w's rows in groups of `group`: weight_layout.h),
// for decode's A tiles: the rows themselves when the group is whole and k a whole number
// of chunks (rows one after another: a stride of 2k bytes; interleaved in groups of 16:
// a tile's rows 64 bytes apart, its next chunk 1 KiB on), else a zero-padded copy in
// scratch (16 x padded_k(k) elements): a tile load never reads past the weights.
struct RowGroup {
  const uint16_t* data;
  int64_t step;    // elements from a chunk's tile to the next chunk's
  int64_t stride;  // bytes
};
static inline RowGroup row_group(const uint16_t* w, int64_t k, int64_t group, int64_t rows, int64_t first,
                                 uint16_t* scratch) {
  if (group == 1 && first + kTileRows <= rows && k % kChunk == 0) return {w + first * k, kChunk, 2 * k};
  if (group == kTileRows) return {w + first * k, kTileElements, 2 * kChunk};
  const int64_t kp = padded_k(k);
  std::memset(scratch, 0, static_cast<size_t>(kTileRows * kp) * sizeof(uint16_t));
  for (int64_t r = 0; r < std::min(kTileRows, rows - first); ++r) {
    const uint16_t* row = layout_row(w, k, group, first + r);
    for (int64_t i = 0; i < k; i += kChunk)
      std::memcpy(scratch + r * kp + i, row + layout_at<uint16_t>(i, group),
                  static_cast<size_t>(std::min(kChunk, k - i)) * sizeof(uint16_t));
  }
  return {scratch, kChunk, 2 * kp};
}

// Tiles of one operand over the chunks of a call: tile s at data + s * step (in elements
// of T), its 16 rows `stride` bytes apart.
template <typename T>
struct TileRun {
  const T* data;
  int64_t step;
  int64_t stride;
};

template <typename Ops, int T, bool kStream>
void load_b(const uint32_t* p, int64_t stride) {
  if constexpr (kStream) {
    Ops::template load_streaming<T>(p, stride);
  } else {
    Ops::template load<T>(p, stride);
  }
}

// kA A tiles x kB B tiles over `steps` chunks: C (i, j) starts from c[2i + j] (stride cs
// bytes) when load_c, else from zeros, and is stored there at the end.
template <typename Ops, int kA, int kB, bool kStreamB>
void block(const TileRun<uint16_t>* a, const TileRun<uint32_t>* b, int64_t steps, float* const* c, int64_t cs,
           bool load_c) {
  static_assert(kA >= 1 && kA <= 2 && kB >= 1 && kB <= 2);
  if (load_c) {
    Ops::template load<0>(c[0], cs);
    if constexpr (kB == 2) Ops::template load<1>(c[1], cs);
    if constexpr (kA == 2) Ops::template load<2>(c[2], cs);
    if constexpr (kA == 2 && kB == 2) Ops::template load<3>(c[3], cs);
  } else {
    Ops::template zero<0>();
    if constexpr (kB == 2) Ops::template zero<1>();
    if constexpr (kA == 2) Ops::template zero<2>();
    if constexpr (kA == 2 && kB == 2) Ops::template zero<3>();
  }
  for (int64_t s = 0; s < steps; ++s) {
    Ops::template load<4>(a[0].data + s * a[0].step, a[0].stride);
    load_b<Ops, 6, kStreamB>(b[0].data + s * b[0].step, b[0].stride);
    Ops::template dot<0, 4, 6>();
    if constexpr (kB == 2) {
      load_b<Ops, 7, kStreamB>(b[1].data + s * b[1].step, b[1].stride);
      Ops::template dot<1, 4, 7>();
    }
    if constexpr (kA == 2) {
      Ops::template load<5>(a[1].data + s * a[1].step, a[1].stride);
      Ops::template dot<2, 5, 6>();
    }
    if constexpr (kA == 2 && kB == 2) Ops::template dot<3, 5, 7>();
  }
  Ops::template store<0>(c[0], cs);
  if constexpr (kB == 2) Ops::template store<1>(c[1], cs);
  if constexpr (kA == 2) Ops::template store<2>(c[2], cs);
  if constexpr (kA == 2 && kB == 2) Ops::template store<3>(c[3], cs);
}

template <typename Ops, bool kStreamB = false>
void run_block(int groups, int token_tiles, const TileRun<uint16_t>* a, const TileRun<uint32_t>* b, int64_t steps,
               float* const* c, int64_t cs, bool load_c) {
  if (groups == 2 && token_tiles == 2) return block<Ops, 2, 2, kStreamB>(a, b, steps, c, cs, load_c);
  if (groups == 2) return block<Ops, 2, 1, kStreamB>(a, b, steps, c, cs, load_c);
  if (token_tiles == 2) return block<Ops, 1, 2, kStreamB>(a, b, steps, c, cs, load_c);
  block<Ops, 1, 1, kStreamB>(a, b, steps, c, cs, load_c);
}

// One token: y[r] for `rows` weight rows (in groups of `group`, not the column layout:
// amx_columns.h decodes that). xb: its x rounded (round_row). Tiles of one token column;
// 32 rows at a time (two chains of tile products in flight), each C tile stored straight
// into y when its 16 rows are all there. scratch: 2 x 16 x padded_k(k).
template <typename Ops>
void decode(const uint16_t* xb, int64_t k, const uint16_t* w, int64_t rows, int64_t group, float* y,
            uint16_t* scratch) {
  const int64_t kp = padded_k(k);
  const TileRun<uint32_t> b{reinterpret_cast<const uint32_t*>(xb), kChunk / 2, 4};
  Ops::configure(1);
  for (int64_t r0 = 0; r0 < rows; r0 += 2 * kTileRows) {
    const int groups = rows - r0 > kTileRows ? 2 : 1;
    TileRun<uint16_t> a[2];
    alignas(64) float tail[2][kTileRows];
    float* c[4] = {};
    for (int i = 0; i < groups; ++i) {
      const int64_t first = r0 + i * kTileRows;
      const RowGroup g = row_group(w, k, group, rows, first, scratch + i * kTileRows * kp);
      a[i] = {g.data, g.step, g.stride};
      c[2 * i] = first + kTileRows <= rows ? y + first : tail[i];
    }
    run_block<Ops>(groups, 1, a, &b, kp / kChunk, c, 4, false);
    for (int i = 0; i < groups; ++i) {
      const int64_t first = r0 + i * kTileRows;
      if (c[2 * i] == tail[i]) std::copy(tail[i], tail[i] + (rows - first), y + first);
    }
  }
  Ops::release();
}

// The A tiles of `groups` (1 or 2) row groups from weight row `first` (w's rows in groups
// of `group`: weight_layout.h), chunks [c0, c1), in tile order: group i's tile for chunk
// c0 + s at out + (i * kKcChunks + s) * kTileElements, row r of it (weight row first +
// 16 i + r) 64 bytes on. Rows past `rows` and elements past k are zeros. A chunk wholly
// inside its row is one copy of a constant 64 bytes, which the compiler writes as a few
// vector moves (it was a call to memcpy a chunk). In the column layout (whole groups of
// 16 rows, k whole chunks) a group's chunk is 16 pairs of its 16 rows, 1 KiB: transposed.
template <typename Ops>
void pack_rows(const uint16_t* w, int64_t k, int64_t group, int64_t rows, int64_t first, int groups, int64_t c0,
               int64_t c1, uint16_t* out) {
  if (group == kColumns) {
    for (int i = 0; i < groups; ++i)
      for (int64_t c = c0; c < c1; ++c) {
        uint16_t* dst = out + (i * kKcChunks + c - c0) * kTileElements;
        const int64_t r0 = first + i * kTileRows;
        if (r0 >= rows) {
          std::memset(dst, 0, kTileElements * sizeof(uint16_t));
          continue;
        }
        Ops::transpose16(reinterpret_cast<const float*>(w + r0 * k + c * kTileElements), kTileRows,
                         reinterpret_cast<float*>(dst), kTileRows);
      }
    return;
  }
  const int64_t stride = line_stride<uint16_t>(group);  // a row's chunk c to c + 1
  constexpr size_t kChunkBytes = kChunk * sizeof(uint16_t);
  const int64_t whole = std::clamp<int64_t>(k / kChunk, c0, c1);  // chunks [c0, whole) lie inside the rows
  for (int64_t r = 0; r < groups * kTileRows; ++r) {
    uint16_t* dst = out + (r / kTileRows) * kKcChunks * kTileElements + (r % kTileRows) * kChunk;
    if (first + r >= rows) {
      for (int64_t c = c0; c < c1; ++c, dst += kTileElements) std::memset(dst, 0, kChunkBytes);
      continue;
    }
    const uint16_t* row = layout_row(w, k, group, first + r);
    int64_t c = c0;
    for (; c < whole; ++c, dst += kTileElements) std::memcpy(dst, row + c * stride, kChunkBytes);
    for (; c < c1; ++c, dst += kTileElements) {
      const int64_t n = std::max<int64_t>(k - c * kChunk, 0);  // below kChunk: the chunk is not whole
      if (n > 0) std::memcpy(dst, row + c * stride, static_cast<size_t>(n) * sizeof(uint16_t));
      std::memset(dst + n, 0, static_cast<size_t>(kChunk - n) * sizeof(uint16_t));
    }
  }
}

// Asks for the weight rows [first, first + 32) (those of them before `rows`), chunks
// [c0, c1), to be brought into cache, lines [line, line + count) of the row pair's
// 64-byte lines taken row by row: the next row pair's weights arrive while this one's
// tile products run. One division a call, not one a line.
static inline void prefetch_rows(const uint16_t* w, int64_t k, int64_t group, int64_t rows, int64_t first, int64_t c0,
                                 int64_t c1, int64_t line, int64_t count) {
  const int64_t per_row = c1 - c0;  // a chunk of bf16 is 64 bytes: a line, give or take alignment
  const int64_t end = std::min(line + count, 2 * kTileRows * per_row);
  if (line >= end) return;
  if (group == kColumns) {  // each group's chunks [c0, c1): 16 lines a chunk, one run
    const int64_t per_group = kTileRows * per_row;
    for (int64_t l = line; l < end; ++l) {
      const int64_t r0 = first + l / per_group * kTileRows;
      if (r0 < rows) __builtin_prefetch(w + r0 * k + c0 * kTileElements + l % per_group * kChunk);
    }
    return;
  }
  int64_t r = first + line / per_row, c = c0 + line % per_row;
  for (int64_t l = line; l < end; ++l) {
    if (r < rows) __builtin_prefetch(layout_row(w, k, group, r) + c * line_stride<uint16_t>(group));
    if (++c == c1) {
      c = c0;
      ++r;
    }
  }
}

// More than one token: y[t * ldy + r] over x packed by pack_x (xp), w's rows in groups of
// `group`. acc: kAccFloats floats, a_scratch: kPackedRowElements bf16 (both 64-byte
// aligned).
// Order per token block and row block: for each k block (tuning.k_chunks chunks), for
// each row pair, its A tiles packed once, then every pair of token tiles over them (C
// tiles from acc, or zeros at the first k block); then the row block's outputs transposed
// out of their C tiles into y, token tile by token tile.
template <typename Ops>
void gemm(const uint32_t* xp, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, int64_t group, float* y,
          int64_t ldy, float* acc, uint16_t* a_scratch, GemmTuning tuning = {}) {
  const int64_t chunks = padded_k(k) / kChunk;
  const int64_t kc = std::clamp<int64_t>(tuning.k_chunks, 1, kKcChunks);
  constexpr int64_t kBlockTiles = kTokBlock / kTileTokens;
  Ops::configure(static_cast<int>(kTileTokens));
  for (int64_t t0 = 0; t0 < tokens; t0 += kTokBlock) {
    const int64_t nt = std::min(kTokBlock, tokens - t0);
    const int64_t tiles = (nt + kTileTokens - 1) / kTileTokens;
    for (int64_t rb = 0; rb < rows; rb += kRowBlock) {
      const int64_t nrb = std::min(kRowBlock, rows - rb);
      const int64_t groups = (nrb + kTileRows - 1) / kTileRows;
      for (int64_t c0 = 0; c0 < chunks; c0 += kc) {
        const int64_t c1 = std::min(chunks, c0 + kc);
        for (int64_t g = 0; g < groups; g += 2) {
          const int pair = groups - g >= 2 ? 2 : 1;
          pack_rows<Ops>(w, k, group, rows, rb + g * kTileRows, pair, c0, c1, a_scratch);
          // The next row pair of this k block, else the first of the next k block.
          const bool last_pair = g + 2 >= groups;
          const int64_t next_first = last_pair ? rb : rb + (g + 2) * kTileRows;
          const int64_t next_c0 = last_pair ? c1 : c0, next_c1 = std::min(chunks, next_c0 + kc);
          const int64_t lines = 2 * kTileRows * (next_c1 - next_c0), passes = (tiles + 1) / 2;
          const int64_t per_pass = (lines + passes - 1) / passes;
          const TileRun<uint16_t> a[2] = {{a_scratch, kTileElements, 64},
                                          {a_scratch + kKcChunks * kTileElements, kTileElements, 64}};
          for (int64_t tt = 0; tt < tiles; tt += 2) {
            if (next_c0 < chunks)
              prefetch_rows(w, k, group, std::min(rows, rb + nrb), next_first, next_c0, next_c1, tt / 2 * per_pass,
                            per_pass);
            const int token_tiles = tiles - tt >= 2 ? 2 : 1;
            TileRun<uint32_t> b[2];
            float* c[4] = {};
            for (int j = 0; j < token_tiles; ++j) {
              b[j] = {xp + ((t0 / kTileTokens + tt + j) * chunks + c0) * 256, 256, 4 * kTileTokens};
              for (int i = 0; i < pair; ++i) c[2 * i + j] = acc + ((g + i) * kBlockTiles + tt + j) * kTileFloats;
            }
            if (tuning.stream_b) {
              run_block<Ops, true>(pair, token_tiles, a, b, c1 - c0, c, 4 * kTileTokens, c0 > 0);
            } else {
              run_block<Ops, false>(pair, token_tiles, a, b, c1 - c0, c, 4 * kTileTokens, c0 > 0);
            }
          }
        }
      }
      // Token tile by token tile, so that each token's outputs of the row block (up to
      // 512 bytes) are written in order, not 64 bytes a visit over every token.
      for (int64_t tt = 0; tt < tiles; ++tt)
        for (int64_t g = 0; g < groups; ++g)
          store_transposed<Ops>(acc + (g * kBlockTiles + tt) * kTileFloats,
                                static_cast<int>(std::min(kTileRows, nrb - g * kTileRows)),
                                static_cast<int>(std::min(kTileTokens, nt - tt * kTileTokens)),
                                y + (t0 + tt * kTileTokens) * ldy + rb + g * kTileRows, ldy);
    }
  }
  Ops::release();
}

// The GEMM's inner loop built up one part at a time, to find what its k steps cost
// besides the tile products (cpu_matmul_bench's BM_AmxLadder puts each rung against
// dot_loop's peak): `passes` passes of a row pair over kTokBlock tokens at one k block of
// tuning.k_chunks chunks, 2 x 2 blocks of that many steps in gemm's order, where
//   rung 0: every step loads the same two A tiles and two B tiles (4 KiB, in L1); the C
//           tiles start from zeros and go to one 4 KiB place;
//   rung 1: the A tiles step through a row pair's packed tiles (a: 32 KiB), as gemm's;
//   rung 2: and the B tiles through x's packed tiles of the k block (b: 512 KiB), as gemm's;
//   rung 3: and the C tiles are loaded from and stored to acc (256 KiB: pass p takes the
//           row pair p mod 4 of a row block) at gemm's places;
// and two probes of rung 0, for what its loads cost:
//   rung 4: rung 0's tile loads alone, no products (its C tiles zeros, stored as rung 0's);
//   rung 5: rung 0 with the B tiles loaded once a block, so a step loads only the two A
//           tiles for its four products (the same sums as rung 0).
// a: kPackedRowElements bf16, b: kLadderBElements u32, acc: kAccFloats f32 (rung 3 adds
// to it). Returns the first element of the last block's first C tile.
inline constexpr int64_t kLadderBElements = kTokBlock / kTileTokens * kKcChunks * 256;
// The ladder's rungs 4 (products false: the loads of a 2 x 2 block alone) and 5 (products
// true: B tiles loaded once, each step loading the A tiles for its products), from zeros.
template <typename Ops>
void probe(bool products, const TileRun<uint16_t>* a, const TileRun<uint32_t>* b, int64_t steps, float* const* c,
           int64_t cs) {
  Ops::template zero<0>();
  Ops::template zero<1>();
  Ops::template zero<2>();
  Ops::template zero<3>();
  if (products) {
    Ops::template load<6>(b[0].data, b[0].stride);
    Ops::template load<7>(b[1].data, b[1].stride);
  }
  for (int64_t s = 0; s < steps; ++s) {
    Ops::template load<4>(a[0].data + s * a[0].step, a[0].stride);
    if (products) {
      Ops::template dot<0, 4, 6>();
      Ops::template dot<1, 4, 7>();
    } else {
      Ops::template load<6>(b[0].data + s * b[0].step, b[0].stride);
      Ops::template load<7>(b[1].data + s * b[1].step, b[1].stride);
    }
    Ops::template load<5>(a[1].data + s * a[1].step, a[1].stride);
    if (products) {
      Ops::template dot<2, 5, 6>();
      Ops::template dot<3, 5, 7>();
    }
  }
  Ops::template store<0>(c[0], cs);
  Ops::template store<1>(c[1], cs);
  Ops::template store<2>(c[2], cs);
  Ops::template store<3>(c[3], cs);
}

template <typename Ops>
float ladder(int rung, int64_t passes, const uint16_t* a, const uint32_t* b, float* acc, GemmTuning tuning = {}) {
  constexpr int64_t kBlockTiles = kTokBlock / kTileTokens, kRowPairs = kRowBlock / (2 * kTileRows);
  const int64_t kc = std::clamp<int64_t>(tuning.k_chunks, 1, kKcChunks);
  alignas(64) float place[4 * kTileFloats];
  float* c[4] = {};
  Ops::configure(static_cast<int>(kTileTokens));
  for (int64_t p = 0; p < passes; ++p) {
    const int64_t g = 2 * (p % kRowPairs);
    for (int64_t tt = 0; tt < kBlockTiles; tt += 2) {
      const int64_t a_step = rung >= 1 && rung <= 3 ? kTileElements : 0;  // rungs 4-5: rung 0's
      const TileRun<uint16_t> at[2] = {{a, a_step, 64}, {a + kKcChunks * kTileElements, a_step, 64}};
      TileRun<uint32_t> bt[2];
      for (int64_t j = 0; j < 2; ++j) {
        bt[j] = rung == 2 || rung == 3 ? TileRun<uint32_t>{b + (tt + j) * kc * 256, 256, 4 * kTileTokens}
                                       : TileRun<uint32_t>{b + j * 256, 0, 4 * kTileTokens};
        for (int64_t i = 0; i < 2; ++i)
          c[2 * i + j] =
              rung == 3 ? acc + ((g + i) * kBlockTiles + tt + j) * kTileFloats : place + (2 * i + j) * kTileFloats;
      }
      if (rung >= 4) {
        probe<Ops>(rung == 5, at, bt, kc, c, 4 * kTileTokens);
      } else {
        block<Ops, 2, 2, false>(at, bt, kc, c, 4 * kTileTokens, rung == 3);
      }
    }
  }
  Ops::release();
  return c[0][0];
}

// Register-only tile products on one thread: `iterations` x 4 tdpbf16ps of 16 x 16 x 32
// (dot_loop_flops(n) = n x 4 x 16384 floating-point operations), the peak the AMX GEMM is
// measured against. Every product is 1 x 2^-24, so the sum it returns is positive (the
// callers check that it ran) and stays exact.
template <typename Ops>
float dot_loop(int64_t iterations) {
  alignas(64) static const auto ones = [] {
    std::array<uint16_t, kTileRows * kChunk> a{};
    a.fill(0x3F80);  // 1
    return a;
  }();
  alignas(64) static const auto tiny = [] {
    std::array<uint16_t, kTileRows * kChunk> a{};
    a.fill(0x3380);  // 2^-24
    return a;
  }();
  alignas(64) float out[kTileRows * kTileTokens];
  Ops::configure(static_cast<int>(kTileTokens));
  Ops::template zero<0>();
  Ops::template zero<1>();
  Ops::template zero<2>();
  Ops::template zero<3>();
  Ops::template load<4>(ones.data(), 64);
  Ops::template load<5>(ones.data(), 64);
  Ops::template load<6>(tiny.data(), 64);
  Ops::template load<7>(tiny.data(), 64);
  for (int64_t i = 0; i < iterations; ++i) {
    Ops::template dot<0, 4, 6>();
    Ops::template dot<1, 4, 7>();
    Ops::template dot<2, 5, 6>();
    Ops::template dot<3, 5, 7>();
  }
  Ops::template store<0>(out, 64);
  Ops::release();
  return out[0];
}

}  // namespace tessera::cpu::amx::kernel

#endif  // TESSERA_BACKEND_CPU_AMX_KERNEL_H_
