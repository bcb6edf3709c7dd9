// CpuDevice::attention (attention.h): a call cut into units of a tile of tokens x a KV
// head's query heads (or one head), each by AMX tile products (amx.h, over a bf16 cache in
// the tiles' layouts) or by vector kernels (kernels.h: dot_rows, softmax_scaled,
// axpy_rows), run whole on one thread each or, when few and long, in their three steps
// (attention_step.h) shared out among all threads. Every path sums a token's scores and
// outputs in its one order, so the bits depend on neither the units nor the threads.
#include "backend/cpu/attention.h"

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/attention_step.h"
#include "backend/cpu/kernels.h"
#include "core/check.h"
#include "hwy/aligned_allocator.h"

namespace tessera::cpu {

namespace {

// Tokens of a prompt whose attention one unit of work takes: a block of keys and values
// read once for all of them. 8: at 4,096 tokens (1B shape, bf16, 2 threads) attention took
// 2.4-2.9 ms a token, 1 token 3.0-3.2, 16 tokens 2.3-2.5 with twice the scores' scratch.
constexpr int64_t kAttentionTokens = 8;
// A call's units go in steps shared out among all threads (run_in_steps) when they are
// fewer than the threads and the positions the call sees times the idle threads' share
// are at least this many: three parallel regions instead of one, and each unit's scores
// and probabilities passed between cores, cost a lone token's AMX attention 9-13 % at 512
// and 1,024 positions with 8 of 16 threads idle on the GPU host, and gained 10-16 % at
// 1,536-2,048 positions and 18-24 % at 4,096; with 14 of 16 idle (2 KV heads) 12-18 % at
// 1,024 and 31-43 % at 2,048 (docs/benchmarks.md).
constexpr int64_t kStepsFrom = 768;
// Dimensions of an output piece of the vector units' kOutputs step.
constexpr int64_t kOutputColumns = 16;

// At least n floats from a 64-byte line, in a buffer of the calling thread that grows as
// needed: one for a unit's scores (a whole unit's, or in steps every unit's of the call) and
// one for a block's rows widened.
enum class Floats { kScores, kWidened };
float* thread_floats(Floats which, int64_t n) {
  thread_local hwy::AlignedFreeUniquePtr<float[]> buffers[2];
  thread_local int64_t capacity[2] = {};
  const auto i = static_cast<size_t>(which);
  if (n > capacity[i]) {
    buffers[i] = hwy::AllocateAligned<float>(static_cast<size_t>(n));
    TS_CHECK(buffers[i], "[cpu] cannot allocate ", n, " floats of attention scratch");
    capacity[i] = n;
  }
  return buffers[i].get();
}

// Token t of the call sees positions [first_seen(a, t), a.pos0 + t].
int64_t first_seen(const AttentionArgs& a, int64_t t) { return cpu::first_seen(a.pos0 + t, a.sliding_window); }

// Each KV head's keys (kind 0) and values (1) of every block the call sees, in store_key's and
// store_value's layouts, as cpu::amx::AttentionUnit takes them: rows[(kind * n_kv_heads + kv)
// * blocks + b] for block b (blocks: those holding positions up to the call's last).
std::vector<const uint16_t*> block_rows(const AttentionArgs& a) {
  const KvPages& p = *a.pages;
  const int64_t blocks = (a.pos0 + a.tokens - 1) / p.block_size + 1;
  std::vector<const uint16_t*> rows(static_cast<size_t>(2 * p.n_kv_heads * blocks));
  for (int kind = 0; kind < 2; ++kind)
    for (int64_t kv = 0; kv < p.n_kv_heads; ++kv)
      for (int64_t b = first_seen(a, 0) / p.block_size; b < blocks; ++b)
        rows[static_cast<size_t>((kind * p.n_kv_heads + kv) * blocks + b)] =
            static_cast<const uint16_t*>(p.base) + p.offset(a.blocks[static_cast<size_t>(b)], a.layer, kind, kv);
  return rows;
}

// A unit by AMX tile products (cpu::amx::attend and attend_step), its blocks' rows in a
// call's block_rows.
struct AmxUnit {
  amx::AttentionUnit u;

  AmxUnit(const AttentionArgs& a, const std::vector<const uint16_t*>& rows, int64_t t0, int64_t t1, int64_t h0,
          int64_t heads) {
    const KvPages& p = *a.pages;
    const int64_t kv = h0 / (a.n_heads / p.n_kv_heads), hd = p.head_dim;
    const int64_t blocks = static_cast<int64_t>(rows.size()) / (2 * p.n_kv_heads);
    u = {.q = a.q + (t0 * a.n_heads + h0) * hd,
         .out = a.out + (t0 * a.n_heads + h0) * hd,
         .token_stride = a.n_heads * hd,
         .tokens = t1 - t0,
         .heads = heads,
         .head_dim = hd,
         .pos0 = a.pos0 + t0,
         .sliding_window = a.sliding_window,
         .scale = a.scale,
         .block_size = p.block_size,
         .keys = rows.data() + kv * blocks,
         .values = rows.data() + (p.n_kv_heads + kv) * blocks,
         .values_to = a.pos0 + a.tokens - 1};
  }

  int64_t items(AttentionStep step) const { return amx::attention_items(u, step); }
  int64_t shared_floats() const { return amx::attention_shared_floats(u); }
  void run(AttentionStep step, int64_t begin, int64_t end, float* shared) const {
    amx::attend_step(u, step, begin, end, shared);
  }
  void run_whole() const { amx::attend(u); }
};

// A unit by vector dot products and multiply-adds: scores against each position it sees
// block by block (one matmul of the unit's query rows over the block's key rows, read in
// the pages' dtype and widened exactly: every score summed in the order matmul.cpp states,
// whatever the number of rows), a softmax per query row (softmax_scaled), then the values
// summed in the same order (axpy_rows: rows in order, each dimension's bits whatever columns
// a call takes). Its steps' items: the KV blocks it sees, its query rows, pieces of
// kOutputColumns dimensions. Its scores: [token - t0][head - h0][position - lo].
class VectorUnit {
 public:
  VectorUnit(const AttentionArgs& a, int64_t t0, int64_t t1, int64_t h0, int64_t heads)
      : a_(a),
        p_(*a.pages),
        t0_(t0),
        t1_(t1),
        h0_(h0),
        heads_(heads),
        kv_(h0 / (a.n_heads / p_.n_kv_heads)),
        lo_(first_seen(a, t0)),
        hi_(a.pos0 + t1 - 1) {}

  int64_t items(AttentionStep step) const {
    switch (step) {
      case AttentionStep::kScores: return hi_ / p_.block_size - lo_ / p_.block_size + 1;
      case AttentionStep::kProbs: return (t1_ - t0_) * heads_;
      case AttentionStep::kOutputs: return (p_.head_dim + kOutputColumns - 1) / kOutputColumns;
    }
    return 0;
  }
  int64_t shared_floats() const { return (t1_ - t0_) * heads_ * span(); }

  void run(AttentionStep step, int64_t begin, int64_t end, float* scores) const {
    if (step == AttentionStep::kScores) {
      for (int64_t b = lo_ / p_.block_size + begin; b < lo_ / p_.block_size + end; ++b) block_scores(b, scores);
    } else if (step == AttentionStep::kProbs) {
      for (int64_t r = begin; r < end; ++r) {
        const int64_t t = t0_ + r / heads_, from = first_seen(a_, t);
        softmax_scaled(scores + r * span() + (from - lo_), a_.pos0 + t + 1 - from, a_.scale);
      }
    } else {
      outputs(begin * kOutputColumns, std::min(p_.head_dim, end * kOutputColumns), scores);
    }
  }
  void run_whole() const {
    float* scores = thread_floats(Floats::kScores, shared_floats());
    for (const AttentionStep step : {AttentionStep::kScores, AttentionStep::kProbs, AttentionStep::kOutputs})
      run(step, 0, items(step), scores);
  }

 private:
  int64_t span() const { return hi_ + 1 - lo_; }
  // Block b's positions [from, stop) that the unit sees, and of them [row0, row1) that token t
  // sees (none: row0 == row1).
  int64_t block_from(int64_t b) const { return std::max(lo_, b * p_.block_size); }
  int64_t block_stop(int64_t b) const { return std::min(hi_ + 1, (b + 1) * p_.block_size); }
  std::pair<int64_t, int64_t> visible(int64_t t, int64_t from, int64_t stop) const {
    const int64_t row0 = std::max(from, first_seen(a_, t)), row1 = std::max(row0, std::min(stop, a_.pos0 + t + 1));
    return {row0, row1};
  }
  // Bytes of block b's keys or values that the unit sees.
  size_t bytes(int64_t b) const {
    return static_cast<size_t>((block_stop(b) - block_from(b)) * p_.head_dim) * dtype_size(p_.dtype);
  }
  // The keys or values of the block after b that the unit sees (none after its last), to ask
  // for while it reads block b's: a head's rows of a block are a few KiB apart from the
  // next block's, a jump the hardware's prefetchers do not follow (a hint: the same bits).
  Ahead after(int64_t b, int kind) const {
    if (b >= hi_ / p_.block_size) return {};
    return {rows(b + 1, kind, block_from(b + 1)), bytes(b + 1)};
  }
  // Block b's keys (kind 0) or values (1) from position `from` in the cache.
  const uint8_t* rows(int64_t b, int kind, int64_t from) const {
    const int64_t block = a_.blocks[static_cast<size_t>(b)];
    return static_cast<const uint8_t*>(p_.base) +
           (p_.offset(block, a_.layer, kind, kv_) + from % p_.block_size * p_.head_dim) *
               static_cast<int64_t>(dtype_size(p_.dtype));
  }
  // Rows [from, stop) of block b's keys or values as the kernels read them, and their dtype:
  // in the cache, or, where an f16 cache's whole rows are read more than once (keys by each
  // token's query heads in groups of dot_rows_at_once(), a lone token's too where that is 1;
  // values, which axpy_rows widens once for a token's heads, by every token), widened to f32
  // once for all of them, where each read widened them again (f16's dot_rows and axpy_rows
  // order is f32's: the same bits; bf16's dot_rows order is not, so a bf16 cache's blocks
  // stay as they are). A lone token's keys widened once for its 4 heads read one at a time:
  // 7-12 % less time a layer (docs/benchmarks.md, session 57).
  std::pair<const uint8_t*, DType> readable(int64_t b, int kind, int64_t from, int64_t stop, bool whole_rows) const {
    const uint8_t* at = rows(b, kind, from);
    const int64_t at_once = dot_rows_at_once();
    const int64_t readers = kind == 0 ? (t1_ - t0_) * ((heads_ + at_once - 1) / at_once) : t1_ - t0_;
    if (p_.dtype != DType::kF16 || readers == 1 || !whole_rows) return {at, p_.dtype};
    float* widened = thread_floats(Floats::kWidened, (stop - from) * p_.head_dim);
    to_f32(at, p_.dtype, (stop - from) * p_.head_dim, widened);
    return {reinterpret_cast<const uint8_t*>(widened), DType::kF32};
  }
  void block_scores(int64_t b, float* scores) const {
    const int64_t from = block_from(b), stop = block_stop(b), hd = p_.head_dim;
    // The next block's keys asked for by the first token's dot_rows (as outputs asks for the
    // next block's values). This block's values asked for here too, before its outputs, made
    // a decode at 4,096 positions slower (docs/benchmarks.md).
    Ahead ahead = after(b, 0);
    const auto [keys, dtype] = readable(b, 0, from, stop, true);
    const int64_t key_bytes = static_cast<int64_t>(dtype_size(dtype)) * hd;
    for (int64_t t = t0_; t < t1_; ++t) {
      const auto [row0, row1] = visible(t, from, stop);
      if (row0 == row1) continue;
      dot_rows(a_.q + (t * a_.n_heads + h0_) * hd, heads_, hd, keys + (row0 - from) * key_bytes, dtype, row1 - row0,
               scores + (t - t0_) * heads_ * span() + (row0 - lo_), span(), std::exchange(ahead, {}));
    }
  }
  // Dimensions [d0, d1) of the unit's outputs: zeros, then every block's values in order.
  void outputs(int64_t d0, int64_t d1, const float* scores) const {
    const int64_t hd = p_.head_dim;
    for (int64_t t = t0_; t < t1_; ++t)
      for (int64_t j = 0; j < heads_; ++j) {
        float* out = a_.out + (t * a_.n_heads + h0_ + j) * hd;
        std::fill(out + d0, out + d1, 0.0f);
      }
    for (int64_t b = lo_ / p_.block_size; b <= hi_ / p_.block_size; ++b) {
      const int64_t from = block_from(b), stop = block_stop(b);
      Ahead ahead = after(b, 1);
      const auto [values, dtype] = readable(b, 1, from, stop, d1 - d0 == hd);
      const int64_t value_bytes = static_cast<int64_t>(dtype_size(dtype)) * hd;
      for (int64_t t = t0_; t < t1_; ++t) {
        const auto [row0, row1] = visible(t, from, stop);
        if (row0 == row1) continue;
        axpy_rows(scores + (t - t0_) * heads_ * span() + (row0 - lo_), span(), heads_,
                  values + (row0 - from) * value_bytes + d0 * static_cast<int64_t>(dtype_size(dtype)), dtype, hd,
                  row1 - row0, a_.out + (t * a_.n_heads + h0_) * hd + d0, hd, d1 - d0, std::exchange(ahead, {}));
      }
    }
  }

  const AttentionArgs& a_;
  const KvPages& p_;
  int64_t t0_, t1_, h0_, heads_, kv_, lo_, hi_;
};

// Every unit's steps shared out among all threads, step by step: the items of a step, in
// every unit, taken by whichever thread is free; each unit's scores in scratch of the
// calling thread that all threads read.
template <typename Unit>
void run_in_steps(ThreadPool& pool, const std::vector<Unit>& units) {
  std::vector<int64_t> at(units.size() + 1, 0);  // unit i's scratch from at[i] (64-byte lines)
  for (size_t i = 0; i < units.size(); ++i) at[i + 1] = at[i] + (units[i].shared_floats() + 15) / 16 * 16;
  float* base = thread_floats(Floats::kScores, at.back());  // this thread's, which every thread reads
  for (const AttentionStep step : {AttentionStep::kScores, AttentionStep::kProbs, AttentionStep::kOutputs}) {
    // Item j of unit i is i * per + j (units with fewer items skip the rest).
    int64_t per = 0;
    for (const Unit& u : units) per = std::max(per, u.items(step));
    for_chunks(pool, units.size() * static_cast<size_t>(per), 1, [&](size_t begin, size_t end) {
      for (auto i = static_cast<int64_t>(begin); i < static_cast<int64_t>(end);) {
        const int64_t u = i / per, stop = std::min<int64_t>(static_cast<int64_t>(end), (u + 1) * per);
        const Unit& unit = units[static_cast<size_t>(u)];
        const int64_t items = unit.items(step);
        if (i - u * per < items)
          unit.run(step, i - u * per, std::min(stop - u * per, items), base + at[static_cast<size_t>(u)]);
        i = stop;
      }
    });
  }
}

// The call's units (tiles of tile_tokens tokens x per_unit heads, made by make(t0, t1, h0,
// heads)), each whole on one thread or in steps shared out among all threads.
template <typename Unit, typename Make>
void run_units(ThreadPool& pool, const AttentionArgs& a, int64_t tile_tokens, int64_t per_unit, bool steps,
               Make&& make) {
  const int64_t tiles = (a.tokens + tile_tokens - 1) / tile_tokens, per_tile = a.n_heads / per_unit;
  std::vector<Unit> units;
  units.reserve(static_cast<size_t>(tiles * per_tile));
  // The last tile's first: in a causal prompt a token's units cost in proportion to its
  // position, and one contiguous range a thread left the last thread twice the average work
  // at 16 threads.
  for (int64_t tile = tiles - 1; tile >= 0; --tile)
    for (int64_t h = 0; h < per_tile; ++h)
      units.push_back(make(tile * tile_tokens, std::min(a.tokens, (tile + 1) * tile_tokens), h * per_unit, per_unit));
  if (steps) return run_in_steps(pool, units);
  // Units are taken in chunks that shrink as the work runs out (for_chunks) by whichever
  // thread is free.
  for_chunks(pool, units.size(), 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) units[i].run_whole();
  });
}

}  // namespace

void paged_attention(ThreadPool& pool, const AttentionArgs& a, bool amx) {
  const KvPages& p = *a.pages;
  TS_CHECK(p.n_kv_heads > 0 && a.n_heads % p.n_kv_heads == 0, "heads ", a.n_heads, " kv heads ", p.n_kv_heads);
  TS_CHECK(a.pos0 + a.tokens <= static_cast<int64_t>(a.blocks.size()) * p.block_size, "positions up to ",
           a.pos0 + a.tokens, " in ", a.blocks.size(), " blocks");
  const int64_t group = a.n_heads / p.n_kv_heads;
  const auto threads = static_cast<int64_t>(pool.size());
  // A unit is a tile of up to kAttentionTokens consecutive tokens of a prompt (with AMX, at
  // most kAttentionRows query rows: amx_attention.h) and either a KV head's whole group of
  // query heads or one head: each block of keys and values read once for all of the unit's
  // queries.
  const int64_t tile_tokens =
      amx ? std::clamp<int64_t>(amx::kAttentionRows / group, 1, kAttentionTokens) : kAttentionTokens;
  const int64_t tiles = (a.tokens + tile_tokens - 1) / tile_tokens;
  // Fewer units of a KV head's group than threads over a long context: a group a unit, each
  // in steps shared out among all threads.
  const int64_t idle = threads - tiles * p.n_kv_heads;
  const bool steps = (!amx || group <= amx::kAttentionRows) && idle > 0 &&
                     (a.pos0 + a.tokens - first_seen(a, 0)) * idle >= kStepsFrom * threads;
  // Else a group a unit where that leaves half the threads one or more (with the tiles a
  // group's heads cost about what one head does: a lone token's 8 KV heads on the GPU host's
  // 16 threads decoded 3-8 % faster than by heads at 512 positions), by the vectors where it
  // leaves every thread two (a lone token's 32 heads in 4 groups on 2 threads: 38-44 us a
  // layer by groups against 78-158 us by heads on the dev VM); else a head a unit, so that
  // every thread has some.
  const bool groups = steps || (amx ? tiles * p.n_kv_heads * 2 >= threads && group <= amx::kAttentionRows
                                    : tiles * p.n_kv_heads >= 2 * threads);
  const int64_t per_unit = groups ? group : 1;
  if (amx) {
    const auto rows = block_rows(a);
    return run_units<AmxUnit>(
        pool, a, tile_tokens, per_unit, steps,
        [&](int64_t t0, int64_t t1, int64_t h0, int64_t n) { return AmxUnit(a, rows, t0, t1, h0, n); });
  }
  run_units<VectorUnit>(pool, a, tile_tokens, per_unit, steps,
                        [&](int64_t t0, int64_t t1, int64_t h0, int64_t n) { return VectorUnit(a, t0, t1, h0, n); });
}

}  // namespace tessera::cpu
