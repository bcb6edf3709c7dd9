// Attention over a bf16 KV cache by AMX tile products (tdpbf16ps, whose order
// amx_kernel.h states), for CpuDevice::attention on CPUs with the tiles: one unit's query
// rows (a lone token's or up to 8 prompt tokens' heads of one KV head's group, at most 32)
// against the keys and values its tokens see. Written once over amx_kernel.h's `Ops`
// (plus two more, below): amx.cpp instantiates it with the instructions, the tests with
// the emulation (amx_emulated.h). Include it after amx.h and amx_kernel.h.
//
// Every output's sums depend on its own query row and the positions its token sees, never
// on the unit's other rows, so a token's outputs are the same bits alone (decode) or in a
// prompt's tile, whatever the split of the prompt:
//   q is held as two bf16, hi = q rounded (nearest even) and lo = (q - hi) rounded: 16
//     bits of its 24 (rounding q itself to bf16 moved a Qwen3-MoE fixture's routing off
//     transformers', where the f32 path had not);
//   score(key) = the tiles' chain over head_dim in chunks of 32 (acc = 0; per chunk acc =
//     acc + (even + odd) for hi, then likewise for lo) of q and the key;
//   softmax (kernels.h's softmax_scaled, in f32) over the positions the token sees;
//   the probabilities as two bf16 likewise, zero at positions the token does not see;
//   out = the tiles' chain over positions in chunks of 32 aligned to position 0 (chunk c:
//     [32c, 32c + 32)), from the first chunk any token of the unit sees to the last, of the
//     probabilities (hi, then lo, each chunk) and the values; then + 0.0f.
// A chunk of which a token sees nothing adds (+0 + +0) to its outputs, which leaves every
// value but -0 as it was (and a subnormal never lies in an accumulator: the instruction
// flushes them); the final + 0.0f turns -0 into +0, so the chunks that other tokens of the
// unit add change no bit. Nor do the values of positions a token does not see: each enters
// a token's sums as 0 x value, +0 or -0, and those past values_to (not written, or written
// for another sequence) as zeros, whatever the cache holds there (a written value that is
// NaN or infinite, which no working model writes, would reach the outputs of tokens of its
// sequence that do not see it).
//
// A unit runs in three steps, each over items that any thread may take (CpuDevice shares a
// lone token's few units out so among many threads): the scores by chunks of 32 positions,
// the probabilities by query rows, the outputs by pairs of 16-dimension groups. An item's
// instructions are the same whichever thread runs it and however the items are cut, so
// the bits are too.
//
// Tiles (amx_kernel.h's (C, A, B) triples): scores by C (i, j) = query rows 16i.. (A tile 4
// + i: q's rows) x positions 16j.. of a chunk (B tile 6 + j: the keys of 16 positions, two
// dimensions of each side by side), stored as the scores' rows; outputs by C (i, j) = query
// rows 16i.. (A: probabilities of 32 positions) x 16 dimensions (B: the values of 32
// positions, two positions' elements side by side). Both B operands load straight from the
// cache, whose keys and values lie so (store_key, store_value).
// Ops, besides amx_kernel.h's: softmax(x, n, scale) (kernels.h's softmax_scaled),
// subtract_widened(x, hi, n) (x[i] -= hi[i] widened, for i < n).
#ifndef TESSERA_BACKEND_CPU_AMX_ATTENTION_H_
#define TESSERA_BACKEND_CPU_AMX_ATTENTION_H_

namespace tessera::cpu::amx::kernel {

static_assert(kAttentionRows == 2 * kTileRows, "a unit's query rows: two tiles");
inline constexpr int64_t kPositionChunk = kAttentionChunk;
static_assert(kPositionChunk == kChunk, "an output chunk's positions: one A tile row of probabilities");

// Scratch that a unit's steps share (the scores, then the probabilities: one step writes
// what the next reads, maybe on other threads), UnitScratch::floats(width) floats from a
// 64-byte line (width: the unit's positions from its first chunk's start, a multiple of 32).
inline constexpr int kParts = 2;  // hi and lo
struct UnitScratch {
  float* scores;    // [kAttentionRows][width]
  uint16_t* probs;  // [kParts][kAttentionRows][width]

  static int64_t floats(int64_t width) { return kAttentionRows * width + kParts * kAttentionRows * width / 2; }
  static UnitScratch cut(float* base, int64_t width) {
    return {base, reinterpret_cast<uint16_t*>(base + kAttentionRows * width)};
  }
};
// Scratch of the thread that runs a step, ThreadScratch::floats(head_dim) floats from a
// 64-byte line (every piece a multiple of 16 floats: head_dim is a multiple of 32).
struct ThreadScratch {
  uint16_t* q;     // [kParts][kAttentionRows][head_dim]: the A tiles of the scores
  float* out;      // [kAttentionRows][head_dim]; first q's residuals
  uint16_t* tail;  // [16][2 * head_dim]: a last chunk's values, zeros past values_to

  static int64_t floats(int64_t head_dim) {
    return kParts * kAttentionRows * head_dim / 2 + kAttentionRows * head_dim + kTileRows * head_dim;
  }
  static ThreadScratch cut(float* base, int64_t head_dim) {
    float* out = base + kParts * kAttentionRows * head_dim / 2;
    return {reinterpret_cast<uint16_t*>(base), out, reinterpret_cast<uint16_t*>(out + kAttentionRows * head_dim)};
  }
};

// The unit's positions: token t (from 0) sees [first(t), last(t)]; the unit's span from
// `base` (its first chunk's start) is `width` positions.
struct UnitSpan {
  const AttentionUnit& u;
  int64_t first(int64_t t) const { return first_seen(u.pos0 + t, u.sliding_window); }
  int64_t last(int64_t t) const { return u.pos0 + t; }
  int64_t lo() const { return first(0); }
  int64_t hi() const { return last(u.tokens - 1); }
  int64_t base() const { return lo() / kPositionChunk * kPositionChunk; }
  int64_t width() const { return (hi() / kPositionChunk + 1) * kPositionChunk - base(); }
  int64_t rows() const { return u.tokens * u.heads; }
  int q_tiles() const { return rows() > kTileRows ? 2 : 1; }
  // Whether some token sees a position of [pos, pos + n).
  bool seen(int64_t pos, int64_t n) const { return pos + n > lo() && pos <= hi(); }
  // The keys from a position on (pairs of dimensions, rows 2 * block_size apart).
  const uint16_t* keys(int64_t pos) const { return u.keys[pos / u.block_size] + pos % u.block_size * 2; }
  // The values from an even position on (pairs of positions, rows 2 * head_dim apart).
  const uint16_t* values(int64_t pos) const {
    return u.values[pos / u.block_size] + pos % u.block_size / 2 * 2 * u.head_dim;
  }
};

// x (n floats, overwritten) as two bf16: hi = x rounded, lo = (x - hi) rounded.
template <typename Ops>
void split_bf16(float* x, int64_t n, uint16_t* hi, uint16_t* lo) {
  Ops::round_x(x, n, hi);
  Ops::subtract_widened(x, hi, n);
  Ops::round_x(x, n, lo);
}

// Scores of the unit's query rows (row r: token r / heads, head r % heads) at the
// positions of chunks [c0, c1) of its span, in us.scores (row r at r * width; positions no
// token sees hold whatever they held).
template <typename Ops>
void scores_step(const UnitSpan& span, const UnitScratch& us, const ThreadScratch& ts, int64_t c0, int64_t c1) {
  const AttentionUnit& u = span.u;
  const int64_t hd = u.head_dim, width = span.width(), base = span.base();
  const int q_tiles = span.q_tiles();
  for (int64_t r = 0; r < span.rows(); ++r) {  // a tile's padding rows: as in probs_step
    const float* q = u.q + r / u.heads * u.token_stride + r % u.heads * hd;
    std::copy(q, q + hd, ts.out);
    split_bf16<Ops>(ts.out, hd, ts.q + r * hd, ts.q + (kAttentionRows + r) * hd);
  }
  const int64_t qs = hd * static_cast<int64_t>(sizeof(uint16_t)), ks = 4 * u.block_size,
                ss = width * static_cast<int64_t>(sizeof(float));
  for (int64_t chunk = c0; chunk < c1; ++chunk) {
    const int64_t p0 = base + chunk * kPositionChunk, p1 = p0 + kTileTokens;
    const bool keys0 = span.seen(p0, kTileTokens), keys1 = span.seen(p1, kTileTokens);
    Ops::template zero<0>();
    Ops::template zero<1>();
    Ops::template zero<2>();
    Ops::template zero<3>();
    for (int64_t c = 0; c < hd / kChunk; ++c) {
      const int64_t pairs = c * kChunk / 2;  // the chunk's first pair of dimensions
      if (keys0) Ops::template load<6>(span.keys(p0) + pairs * 2 * u.block_size, ks);
      if (keys1) Ops::template load<7>(span.keys(p1) + pairs * 2 * u.block_size, ks);
      for (int part = 0; part < kParts; ++part) {
        const uint16_t* q = ts.q + part * kAttentionRows * hd + c * kChunk;
        Ops::template load<4>(q, qs);
        if (q_tiles == 2) Ops::template load<5>(q + kTileRows * hd, qs);
        if (keys0) {
          Ops::template dot<0, 4, 6>();
          if (q_tiles == 2) Ops::template dot<2, 5, 6>();
        }
        if (keys1) {
          Ops::template dot<1, 4, 7>();
          if (q_tiles == 2) Ops::template dot<3, 5, 7>();
        }
      }
    }
    float* at = us.scores + chunk * kPositionChunk;  // C (i, j): query rows 16i.. x positions 16j..
    if (keys0) Ops::template store<0>(at, ss);
    if (keys1) Ops::template store<1>(at + kTileTokens, ss);
    if (q_tiles == 2 && keys0) Ops::template store<2>(at + kTileRows * width, ss);
    if (q_tiles == 2 && keys1) Ops::template store<3>(at + kTileRows * width + kTileTokens, ss);
  }
}

// Row r's probabilities from its scores, as two bf16 in us.probs, zero where its token sees
// nothing. A tile's padding rows (past the unit's) hold whatever the scratch holds: a row of
// A enters only its own row of C, which nothing reads.
template <typename Ops>
void probs_step(const UnitSpan& span, const UnitScratch& us, int64_t r) {
  const int64_t width = span.width(), base = span.base(), t = r / span.u.heads;
  uint16_t* hi = us.probs + r * width;
  uint16_t* lo = us.probs + (kAttentionRows + r) * width;
  const int64_t from = span.first(t) - base, n = span.last(t) + 1 - span.first(t);
  for (uint16_t* part : {hi, lo}) {
    std::memset(part, 0, static_cast<size_t>(from) * sizeof(uint16_t));
    std::memset(part + from + n, 0, static_cast<size_t>(width - from - n) * sizeof(uint16_t));
  }
  float* probs = us.scores + r * width + from;
  Ops::softmax(probs, n, span.u.scale);
  split_bf16<Ops>(probs, n, hi + from, lo + from);
}

// The 32 positions from p0 of the unit's values (pair rows 2 * head_dim apart) as the
// output tiles load them: straight from the cache where all are written (up to values_to),
// else copied into ts.tail with zeros in place of the rest.
inline const uint16_t* value_chunk(const UnitSpan& span, int64_t p0, const ThreadScratch& ts) {
  const int64_t row = 2 * span.u.head_dim, to = span.u.values_to;  // row: a pair of positions
  const uint16_t* pairs = span.values(p0);
  if (p0 + kPositionChunk - 1 <= to) return pairs;
  for (int64_t j = 0; j < kPositionChunk / 2; ++j) {
    uint16_t* out = ts.tail + j * row;
    const int64_t written = std::clamp<int64_t>(to + 1 - (p0 + 2 * j), 0, 2);  // of the pair's two
    if (written == 0) {
      std::memset(out, 0, static_cast<size_t>(row) * sizeof(uint16_t));
    } else {
      std::copy(pairs + j * row, pairs + (j + 1) * row, out);
      if (written == 1)
        for (int64_t d = 1; d < row; d += 2) out[d] = 0;
    }
  }
  return ts.tail;
}

// The unit's outputs at dimensions [32 g0, 32 g1) (g: a pair of 16-dimension groups), in
// u.out's rows for its tokens and heads, from the probabilities.
template <typename Ops>
void outputs_step(const UnitSpan& span, const UnitScratch& us, const ThreadScratch& ts, int64_t g0, int64_t g1) {
  const AttentionUnit& u = span.u;
  const int64_t hd = u.head_dim, width = span.width(), base = span.base(), chunks = width / kPositionChunk;
  const int q_tiles = span.q_tiles();
  // Every chunk but the last is written whole (the unit's last position is at most values_to).
  const uint16_t* last = value_chunk(span, base + (chunks - 1) * kPositionChunk, ts);
  const int64_t ps = width * static_cast<int64_t>(sizeof(uint16_t)), vs = 4 * hd,
                os = hd * static_cast<int64_t>(sizeof(float));
  for (int64_t g = 2 * g0; g < 2 * g1; g += 2) {  // C (i, j): query rows 16i.. x dimensions 16 (g + j)..
    Ops::template zero<0>();
    Ops::template zero<1>();
    Ops::template zero<2>();
    Ops::template zero<3>();
    for (int64_t chunk = 0; chunk < chunks; ++chunk) {
      const uint16_t* values = chunk + 1 < chunks ? span.values(base + chunk * kPositionChunk) : last;
      Ops::template load<6>(values + g * 2 * kTileTokens, vs);
      Ops::template load<7>(values + (g + 1) * 2 * kTileTokens, vs);
      for (int part = 0; part < kParts; ++part) {
        const uint16_t* probs = us.probs + part * kAttentionRows * width + chunk * kPositionChunk;
        Ops::template load<4>(probs, ps);
        Ops::template dot<0, 4, 6>();
        Ops::template dot<1, 4, 7>();
        if (q_tiles == 2) {
          Ops::template load<5>(probs + kTileRows * width, ps);
          Ops::template dot<2, 5, 6>();
          Ops::template dot<3, 5, 7>();
        }
      }
    }
    Ops::template store<0>(ts.out + g * kTileTokens, os);
    Ops::template store<1>(ts.out + (g + 1) * kTileTokens, os);
    if (q_tiles == 2) {
      Ops::template store<2>(ts.out + kTileRows * hd + g * kTileTokens, os);
      Ops::template store<3>(ts.out + kTileRows * hd + (g + 1) * kTileTokens, os);
    }
  }
  for (int64_t r = 0; r < span.rows(); ++r) {
    float* out = u.out + r / u.heads * u.token_stride + r % u.heads * hd;
    for (int64_t d = 2 * kTileTokens * g0; d < 2 * kTileTokens * g1; ++d) out[d] = ts.out[r * hd + d] + 0.0f;
  }
}

// One step of a unit over items [begin, end): its chunks of 32 positions (kScores), its
// query rows (kProbs) or its pairs of 16-dimension groups (kOutputs), on the unit's shared
// scratch and the calling thread's own. The tiles configured for the scores' and outputs'.
template <typename Ops>
void unit_step(const UnitSpan& span, AttentionStep step, int64_t begin, int64_t end, const UnitScratch& us,
               const ThreadScratch& ts) {
  if (step == AttentionStep::kProbs) {
    for (int64_t r = begin; r < end; ++r) probs_step<Ops>(span, us, r);
    return;
  }
  Ops::configure(static_cast<int>(kTileTokens));
  if (step == AttentionStep::kScores) scores_step<Ops>(span, us, ts, begin, end);
  if (step == AttentionStep::kOutputs) outputs_step<Ops>(span, us, ts, begin, end);
  Ops::release();
}

// Items of each step of a unit, for unit_step.
inline int64_t step_items(const UnitSpan& span, AttentionStep step) {
  switch (step) {
    case AttentionStep::kScores: return span.width() / kPositionChunk;
    case AttentionStep::kProbs: return span.rows();
    case AttentionStep::kOutputs: return span.u.head_dim / (2 * kTileTokens);
  }
  return 0;
}

// The unit's outputs, its steps one after another on `scratch` (attend_floats of it, from a
// 64-byte line).
inline int64_t attend_floats(const UnitSpan& span) {
  return UnitScratch::floats(span.width()) + ThreadScratch::floats(span.u.head_dim);
}
template <typename Ops>
void attend_unit(const AttentionUnit& u, float* scratch) {
  const UnitSpan span{u};
  const UnitScratch us = UnitScratch::cut(scratch, span.width());
  const ThreadScratch ts = ThreadScratch::cut(scratch + UnitScratch::floats(span.width()), u.head_dim);
  for (const AttentionStep step : {AttentionStep::kScores, AttentionStep::kProbs, AttentionStep::kOutputs})
    unit_step<Ops>(span, step, 0, step_items(span, step), us, ts);
}

}  // namespace tessera::cpu::amx::kernel

#endif  // TESSERA_BACKEND_CPU_AMX_ATTENTION_H_
