// The matmul of bf16 weights by bf16 dot products (AVX-512 BF16's vdpbf16ps), written
// once over an `Ops` type that supplies the vectors and the instruction:
//   - bf16_dot.cpp includes this file between HWY_PUSH_ATTRIBUTES and HWY_POP_ATTRIBUTES
//     (compiled for AVX-512 BF16) with the instruction itself;
//   - the tests include it with a portable emulation of the instruction
//     (bf16_dot_emulated.h), so the blocking and the order are tested on every machine
//     and the instruction where the CPU has it.
// Every standard header it uses, and bf16_matmul.h, must be included before it (so that
// none is compiled for AVX-512 inside the attribute region), and its plain functions are static (so that
// no other file's copy is one compiled for AVX-512; the templates are instantiated with
// bf16_dot.cpp's own Ops type, local to it).
//
// The order of every output's sum, whatever the number of tokens in the call (decode's
// tiles and prefill's GEMM compute exactly this sequence, so a token's row is bitwise
// the same alone or in a batch, at any thread count):
//   x is rounded to bf16 (nearest even; the instruction's conversion), past k padded with
//   zeros to a whole chunk of kChunk = 32 elements;
//   acc = 0, 16 f32 lanes;
//   for each chunk along k in order (the last one completed with zeros, weights and x):
//     acc = dot(acc, w chunk, x chunk): lane j += w[2j+1] * x[2j+1], then += w[2j] * x[2j]
//     (vdpbf16ps: each step rounded to nearest even, bf16 subnormals read as zero, a
//     subnormal result flushed to zero);
//   sum = the lanes of acc added as a halving tree: lane i + 8 onto lane i, then i + 4,
//   i + 2, i + 1 (the tree matmul.cpp states for its other paths).
// This rounds differently from matmul.cpp's widen-and-FMA order (x is rounded, pairs are
// summed inside a lane) and from columns_kernel.h's column order, so a process that takes
// it (TESSERA_BF16_COLUMNS=0, on a CPU that has the instruction and no AMX) takes it for
// every bf16-weight matmul, decode and prefill alike.
//
// Ops (all static): Acc (16 f32 lanes), Chunk (32 bf16); zero(); load(p) (32 elements);
// load_partial(p, n) (n < 32 elements, the rest zeros, nothing read past p + n);
// dot(acc, w, x); load_acc(p) and store_acc(p, a) (16 floats, 64-byte aligned);
// sum_lanes16(v, out) (out[j] = the tree sum of v[j], j < 16); round_x(x, n, out) (n
// floats to bf16). Pure functions over caller-owned memory; thread-safe.
#ifndef TESSERA_BACKEND_CPU_BF16_DOT_KERNEL_H_
#define TESSERA_BACKEND_CPU_BF16_DOT_KERNEL_H_

namespace tessera::cpu::bf16_dot::kernel {

using bf16::kChunk;  // bf16 elements one dot product takes
using bf16::padded_k;
using bf16::round_row;
inline constexpr int64_t kLanes = 16;  // its f32 lanes
// Calls of at least this many tokens take the GEMM, fewer the tiles (the same order).
inline constexpr int64_t kGemmTokens = 16;

// GEMM blocking, as matmul.cpp's (elements along k, weight rows, tokens); a block of kNc
// weight rows x kKc elements is copied as it is (nothing to widen) into one 16 KiB panel
// (or read in place, interleaved rows being a panel's layout already), which stays in L1
// with one panel of x (6 KiB) while the micro-kernels run over them.
inline constexpr int64_t kKc = 512;
inline constexpr int64_t kNc = 16;
inline constexpr int64_t kMc = 192;
inline constexpr int kPanelRows = 4;
inline constexpr int kPanelTokens = 6;  // 24 accumulators + 4 weight chunks + 1 of x: 29 of 32 registers
inline constexpr int kDecodeRows = 8;   // one token's tiles, unless told otherwise (tiles)
static_assert(kKc % kChunk == 0 && kNc % kPanelRows == 0 && kMc % kPanelTokens == 0 && kNc <= kLanes);

static inline int64_t padded_tokens(int64_t tokens) {
  return (tokens + kPanelTokens - 1) / kPanelTokens * kPanelTokens;
}

// bf16 elements of a call's packed x (see pack_x).
static inline int64_t packed_elements(int64_t tokens, int64_t k) { return padded_tokens(tokens) * padded_k(k); }

// Chunk s of a weight row, `stride` elements after chunk s - 1 (kChunk in rows one after
// another, line_stride in interleaved ones: weight_layout.h): whole when partial == 0, else
// the call's last chunk, of `partial` elements (the loops below pass a literal 0 for every
// whole chunk, so the test folds away where it matters; a partial chunk is only ever in
// rows one after another, whose k is not whole lines).
template <typename Ops>
inline typename Ops::Chunk load_w(const uint16_t* row, int64_t stride, int64_t s, int64_t partial) {
  return partial == 0 ? Ops::load(row + s * stride) : Ops::load_partial(row + s * stride, static_cast<int>(partial));
}

// out[j] = the tree sum of acc[j] for j < n <= 16 (the rest of the 16 padded with zeros).
template <typename Ops>
inline void finish(const typename Ops::Acc* acc, int n, float* out) {
  typename Ops::Acc column[kLanes];
  for (int j = 0; j < kLanes; ++j) column[j] = j < n ? acc[j] : Ops::zero();
  alignas(64) float sums[kLanes];
  Ops::sum_lanes16(column, sums);
  for (int j = 0; j < n; ++j) out[j] = sums[j];
}

// ------------------------------------------------------------------ tiles (few tokens)

// One chunk s of a tile: acc[r][t] = dot(acc[r][t], w[r] chunk s, x[t] chunk s).
template <typename Ops, int kRows, int kTok>
inline void tile_step(typename Ops::Acc (&acc)[kRows][kTok], const uint16_t* xb, int64_t kp,
                      const uint16_t* const* rows, int64_t stride, int64_t s, int64_t partial) {
  typename Ops::Chunk xv[kTok];
  for (int t = 0; t < kTok; ++t) xv[t] = Ops::load(xb + t * kp + s * kChunk);
  for (int r = 0; r < kRows; ++r) {
    const typename Ops::Chunk wv = load_w<Ops>(rows[r], stride, s, partial);
    for (int t = 0; t < kTok; ++t) acc[r][t] = Ops::dot(acc[r][t], wv, xv[t]);
  }
}

// kRows weight rows (row pointers; rows past `nr` repeat a valid row and are not
// written; a row's chunks `stride` elements apart) x kTok tokens over the whole of k. xb:
// the tokens' rounded x, a stride of padded_k(k); y: output (token 0, row 0), a stride of
// ldy between tokens.
// `ahead` > 0 (the tile's rows then lie one after another, or are one interleaved group, as
// decode's are): whole chunk s first asks for kRows lines in memory order, those from byte
// ahead + s * kRows * 64 of the tile, so that the tile asks for the bytes `ahead` past its
// own as one sequential stream, each line once (a hint: the same bits).
template <typename Ops, int kRows, int kTok>
void tile(const uint16_t* xb, int64_t k, const uint16_t* const* rows, int64_t stride, int nr, float* y, int64_t ldy,
          int64_t ahead = 0) {
  using Acc = typename Ops::Acc;
  const int64_t kp = padded_k(k), full = k / kChunk, partial = k % kChunk;
  Acc acc[kRows][kTok];
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = Ops::zero();
  if (ahead > 0) {
    const char* next = reinterpret_cast<const char*>(rows[0]) + ahead;
    for (int64_t s = 0; s < full; ++s) {
      for (int r = 0; r < kRows; ++r) __builtin_prefetch(next + (s * kRows + r) * 64, 0, 3);
      tile_step<Ops, kRows, kTok>(acc, xb, kp, rows, stride, s, 0);
    }
  } else {
    for (int64_t s = 0; s < full; ++s) tile_step<Ops, kRows, kTok>(acc, xb, kp, rows, stride, s, 0);
  }
  if (partial > 0) tile_step<Ops, kRows, kTok>(acc, xb, kp, rows, stride, full, partial);
  for (int t = 0; t < kTok; ++t) {
    Acc column[kLanes];  // all 16 (finish reads nr <= kRows of them), which GCC's bounds check cannot see
    for (int r = 0; r < kRows; ++r) column[r] = acc[r][t];
    finish<Ops>(column, nr, y + t * ldy);
  }
}

// A call's weights: `rows` rows of k elements from w, in groups of `group`
// (weight_layout.h).
struct Rows {
  const uint16_t* w;
  int64_t k, rows, group;

  // Chunk s of a row to chunk s + 1 (a chunk is a line: kChunk for rows one after another).
  int64_t stride() const { return line_stride<uint16_t>(group); }
  // Pointers to the n rows from `first`, rows past the last repeating it.
  void pointers(int64_t first, int n, const uint16_t** out) const {
    for (int r = 0; r < n; ++r) out[r] = layout_row(w, k, group, std::min(first + r, rows - 1));
  }
};

template <typename Ops, int kTok>
void tiles_of_four_rows(const uint16_t* xb, const Rows& w, float* y, int64_t ldy, int64_t r0) {
  const uint16_t* pointers[4];
  w.pointers(r0, 4, pointers);
  tile<Ops, 4, kTok>(xb, w.k, pointers, w.stride(), static_cast<int>(std::min<int64_t>(4, w.rows - r0)), y + r0, ldy);
}

// One token's rows in tiles of kRows (see tiles).
template <typename Ops, int kRows>
void decode_tiles(const uint16_t* xb, const Rows& w, float* y, int64_t ldy, int64_t ahead) {
  for (int64_t r0 = 0; r0 < w.rows; r0 += kRows) {
    const uint16_t* pointers[kRows];
    w.pointers(r0, kRows, pointers);
    tile<Ops, kRows, 1>(xb, w.k, pointers, w.stride(), static_cast<int>(std::min<int64_t>(kRows, w.rows - r0)), y + r0,
                        ldy, ahead);
  }
}

// kS groups of kRows interleaved rows (weight_layout.h) for one token, side by side: group j
// from `first[j]` (its first line) into y[j]. Each group's lines in memory order through one
// pointer, each row's chunks in order into its own accumulator (the sums of tile<Ops,
// kRows, 1>). `ahead` > 0: each chunk step first asks for every group's kRows lines `ahead`
// bytes on (a hint: the same bits).
template <typename Ops, int kRows, int kS>
void groups_side_by_side(const uint16_t* xb, int64_t k, const uint16_t* const* first, float* const* y, int64_t ahead) {
  typename Ops::Acc acc[kS][kLanes];  // all 16 of a group's (finish reads kRows of them)
  const uint16_t* line[kS];
  for (int j = 0; j < kS; ++j) {
    line[j] = first[j];
    for (int r = 0; r < kRows; ++r) acc[j][r] = Ops::zero();
  }
  for (int64_t s = 0; s < k / kChunk; ++s) {  // whole: interleaved rows are whole lines
    if (ahead > 0)
      for (int j = 0; j < kS; ++j)
        for (int r = 0; r < kRows; ++r)
          __builtin_prefetch(reinterpret_cast<const char*>(line[j]) + ahead + r * 64, 0, 3);
    const typename Ops::Chunk xv = Ops::load(xb + s * kChunk);
    for (int j = 0; j < kS; ++j) {
      for (int r = 0; r < kRows; ++r) acc[j][r] = Ops::dot(acc[j][r], Ops::load(line[j] + r * kChunk), xv);
      line[j] += kRows * kChunk;
    }
  }
  for (int j = 0; j < kS; ++j) finish<Ops>(acc[j], kRows, y[j]);
}

// One token over interleaved rows in groups of kRows: the call's groups cut into
// kSideBySide (weight_layout.h) parts read side by side, a group of each at a time, the
// groups left over one by one.
template <typename Ops, int kRows>
void decode_groups(const uint16_t* xb, const Rows& w, float* y, int64_t ahead) {
  constexpr int kS = kSideBySide<kRows>;
  const int64_t groups = w.rows / kRows, part = groups / kS;
  for (int64_t g = 0; g < part; ++g) {
    const uint16_t* first[kS];
    float* out[kS];
    for (int j = 0; j < kS; ++j) {
      first[j] = w.w + (j * part + g) * kRows * w.k;
      out[j] = y + (j * part + g) * kRows;
    }
    groups_side_by_side<Ops, kRows, kS>(xb, w.k, first, out, ahead);
  }
  for (int64_t g = kS * part; g < groups; ++g) {
    const uint16_t* first = w.w + g * kRows * w.k;
    float* out = y + g * kRows;
    groups_side_by_side<Ops, kRows, 1>(xb, w.k, &first, &out, ahead);
  }
}

// A few tokens over rows interleaved in groups of 8: a group's 8 rows x up to 3 tokens a
// tile (24 accumulators), the group's tiles one after another, so that its lines are read
// from memory once, in order (4-row tiles read every other half of them).
template <typename Ops>
void group_tiles(const uint16_t* xb, int64_t tokens, const Rows& w, float* y, int64_t ldy) {
  const int64_t kp = padded_k(w.k);
  for (int64_t r0 = 0; r0 < w.rows; r0 += 8) {
    const uint16_t* pointers[8];
    w.pointers(r0, 8, pointers);
    int64_t t = 0;
    for (; t + 3 <= tokens; t += 3) tile<Ops, 8, 3>(xb + t * kp, w.k, pointers, w.stride(), 8, y + t * ldy + r0, ldy);
    if (tokens - t == 2) tile<Ops, 8, 2>(xb + t * kp, w.k, pointers, w.stride(), 8, y + t * ldy + r0, ldy);
    if (tokens - t == 1) tile<Ops, 8, 1>(xb + t * kp, w.k, pointers, w.stride(), 8, y + t * ldy + r0, ldy);
  }
}

// y[t * ldy + r] for tokens < kGemmTokens. xb: their rounded x (round_row), a stride of
// padded_k(k). One token: tiles of decode_rows rows (4, 8 or 16; decode streams the
// weights once, the bytes `ahead` past each tile asked for when that is > 0), or an
// interleaved group's rows (decode_groups); more: 4 rows x up to 4 tokens (an interleaved
// group of 8: group_tiles), the rows' data reused from cache by the next tokens. A row's
// sum is the same whatever the tile's rows.
template <typename Ops>
void tiles(const uint16_t* xb, int64_t tokens, const Rows& w, float* y, int64_t ldy, int64_t ahead = 0,
           int decode_rows = kDecodeRows) {
  const int64_t kp = padded_k(w.k);
  if (tokens == 1 && w.group > 1) {
    switch (w.group) {
      case 4: return decode_groups<Ops, 4>(xb, w, y, ahead);
      case 8: return decode_groups<Ops, 8>(xb, w, y, ahead);
      case 16: return decode_groups<Ops, 16>(xb, w, y, ahead);
      default: break;  // the tiles below read any group
    }
  }
  if (tokens == 1) {
    switch (decode_rows) {
      case 4: return decode_tiles<Ops, 4>(xb, w, y, ldy, ahead);
      case 16: return decode_tiles<Ops, 16>(xb, w, y, ldy, ahead);
      default: return decode_tiles<Ops, 8>(xb, w, y, ldy, ahead);
    }
  }
  if (w.group == 8) return group_tiles<Ops>(xb, tokens, w, y, ldy);
  for (int64_t r0 = 0; r0 < w.rows; r0 += 4) {
    int64_t t = 0;
    for (; t + 4 <= tokens; t += 4) tiles_of_four_rows<Ops, 4>(xb + t * kp, w, y + t * ldy, ldy, r0);
    switch (tokens - t) {
      case 3: tiles_of_four_rows<Ops, 3>(xb + t * kp, w, y + t * ldy, ldy, r0); break;
      case 2: tiles_of_four_rows<Ops, 2>(xb + t * kp, w, y + t * ldy, ldy, r0); break;
      case 1: tiles_of_four_rows<Ops, 1>(xb + t * kp, w, y + t * ldy, ldy, r0); break;
      default: break;
    }
  }
}

// ------------------------------------------------------------------ GEMM (many tokens)

// x packed for the GEMM, as matmul.cpp packs its f32 x: token blocks of kMc, block b at
// xp + b * kMc * kp (kp = padded_k(k)); within a block of `padded` tokens (kMc, or the
// last block's tokens rounded up to whole panels), the k block at k0 (kc elements)
// starts at k0 * padded and holds, for the panel of kPanelTokens tokens from p, chunk s
// of token t at [p * kc + (s * kPanelTokens + t) * kChunk]. Tokens past the call's
// last, to the end of their panel, are zeros. Packs tokens [begin, end) (and the zeros
// when end == tokens); a token writes only its own chunks, so threads may pack disjoint
// ranges. row: scratch of padded_k(k) elements.
template <typename Ops>
void pack_x(const float* x, int64_t tokens, int64_t k, int64_t begin, int64_t end, uint16_t* xp, uint16_t* row) {
  const int64_t kp = padded_k(k);
  const int64_t all = padded_tokens(tokens);
  const int64_t last = end == tokens ? all : end;
  for (int64_t t = begin; t < last; ++t) {
    if (t < tokens) {
      round_row<Ops>(x + t * k, k, row);
    } else {
      std::memset(row, 0, static_cast<size_t>(kp) * sizeof(uint16_t));
    }
    const int64_t t0 = t / kMc * kMc;
    const int64_t padded = std::min(kMc, all - t0);
    const int64_t p = (t - t0) / kPanelTokens * kPanelTokens;
    uint16_t* block = xp + t0 * kp;
    for (int64_t k0 = 0; k0 < kp; k0 += kKc) {
      const int64_t kc = std::min(kKc, kp - k0);
      uint16_t* panel = block + k0 * padded + p * kc;
      for (int64_t s = 0; s < kc / kChunk; ++s)
        std::memcpy(panel + (s * kPanelTokens + t - t0 - p) * kChunk, row + k0 + s * kChunk, kChunk * sizeof(uint16_t));
    }
  }
}

// One chunk s of a micro-kernel (see micro_kernel).
template <typename Ops>
inline void micro_step(typename Ops::Acc (&a)[kPanelRows][kPanelTokens], const uint16_t* const* rows, int64_t stride,
                       const uint16_t* xs, int64_t s, int64_t partial) {
  typename Ops::Chunk wv[kPanelRows];
  for (int r = 0; r < kPanelRows; ++r) wv[r] = load_w<Ops>(rows[r], stride, s, partial);
  for (int t = 0; t < kPanelTokens; ++t) {
    const typename Ops::Chunk xv = Ops::load(xs + (s * kPanelTokens + t) * kChunk);
    for (int r = 0; r < kPanelRows; ++r) a[r][t] = Ops::dot(a[r][t], wv[r], xv);
  }
}

// kPanelRows weight rows (pointers at this k block, a row's chunks `stride` elements
// apart) x one panel of kPanelTokens tokens, `steps` chunks (the last one `partial`
// elements long when partial > 0: the call's last chunk). The partial vectors live in acc,
// one of 16 floats per (token, row), token-major with a stride of kNc rows; the first k
// block (`first`) starts them from zero instead of reading them.
template <typename Ops>
void micro_kernel(const uint16_t* const* rows, int64_t stride, int64_t steps, int64_t partial, const uint16_t* xs,
                  float* acc, bool first) {
  typename Ops::Acc a[kPanelRows][kPanelTokens];
  for (int r = 0; r < kPanelRows; ++r)
    for (int t = 0; t < kPanelTokens; ++t) a[r][t] = first ? Ops::zero() : Ops::load_acc(acc + (t * kNc + r) * kLanes);
  const int64_t full = partial > 0 ? steps - 1 : steps;
  for (int64_t s = 0; s < full; ++s) micro_step<Ops>(a, rows, stride, xs, s, 0);
  if (partial > 0) micro_step<Ops>(a, rows, stride, xs, full, partial);
  for (int r = 0; r < kPanelRows; ++r)
    for (int t = 0; t < kPanelTokens; ++t) Ops::store_acc(acc + (t * kNc + r) * kLanes, a[r][t]);
}

// Floats of the GEMM's scratch of partial sums (64-byte aligned).
inline constexpr int64_t kAccFloats = kMc * kNc * kLanes;

// The GEMM over x packed by pack_x (xp), y[t * ldy + r] for w's rows.
template <typename Ops>
void gemm(const uint16_t* xp, int64_t tokens, const Rows& w, float* y, int64_t ldy, float* acc) {
  using Acc = typename Ops::Acc;
  const int64_t k = w.k, rows = w.rows, kp = padded_k(k);
  alignas(64) uint16_t panel[kNc * kKc];
  for (int64_t t0 = 0; t0 < tokens; t0 += kMc) {
    const int64_t mt = std::min(kMc, tokens - t0);
    const int64_t padded = padded_tokens(mt);
    for (int64_t r0 = 0; r0 < rows; r0 += kNc) {
      const int64_t nr = std::min(kNc, rows - r0);
      for (int64_t k0 = 0; k0 < kp; k0 += kKc) {
        const int64_t kc = std::min(kKc, kp - k0);
        const int64_t valid = std::min(kc, k - k0);
        const uint16_t* xblock = xp + t0 * kp + k0 * padded;
        // Rows one after another are copied one after another (rows of a long k lie a
        // multiple of 4 KiB apart, so their chunks at one k would share an L1 set);
        // interleaved rows are read where they are (their chunks at one k are adjacent).
        const uint16_t* pointers[kNc];
        w.pointers(r0, static_cast<int>(kNc), pointers);
        const int64_t stride = w.stride();
        for (int64_t r = 0; r < kNc; ++r) {
          if (w.group > 1) {
            pointers[r] += k0 / kChunk * stride;
            continue;
          }
          std::memcpy(panel + r * kKc, pointers[r] + k0, static_cast<size_t>(valid) * sizeof(uint16_t));
          pointers[r] = panel + r * kKc;
        }
        for (int64_t p = 0; p < padded; p += kPanelTokens)
          for (int64_t g = 0; g < nr; g += kPanelRows)
            micro_kernel<Ops>(pointers + g, stride, kc / kChunk, valid % kChunk, xblock + p * kc,
                              acc + (p * kNc + g) * kLanes, k0 == 0);
      }
      for (int64_t t = 0; t < mt; ++t) {
        Acc column[kNc];
        for (int64_t r = 0; r < nr; ++r) column[r] = Ops::load_acc(acc + (t * kNc + r) * kLanes);
        finish<Ops>(column, static_cast<int>(nr), y + (t0 + t) * ldy + r0);
      }
    }
  }
}

}  // namespace tessera::cpu::bf16_dot::kernel

#endif  // TESSERA_BACKEND_CPU_BF16_DOT_KERNEL_H_
