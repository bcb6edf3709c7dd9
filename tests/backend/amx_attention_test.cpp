// Attention over a bf16 KV cache by AMX tile products (backend/cpu/amx_attention.h):
//   - run with the portable emulation of the tiles (amx_emulated.h) on every machine: a
//     token's outputs are bitwise the same alone and in a prompt's tile of 2-8 tokens
//     (full causal and sliding windows, blocks of 32 and 64 positions, head_dim 32-128),
//     close to a double-precision attention of the same bf16 inputs, and never touched by
//     cache rows past the last written position (they hold NaNs here);
//   - the instructions give the emulation's bits: only on a CPU with AMX-BF16 (the dev VM's
//     and the GPU host's Xeons); elsewhere it skips, saying so.
// CpuDevice takes it for bf16 caches on such CPUs, so the model tests' batch and split
// tests (decode = prefill, bitwise) cover it there too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/amx_emulated.h"
#include "backend/cpu/amx_kernel.h"
#include "core/check.h"
#include "core/dtype.h"
// (after amx.h and amx_kernel.h)
#include "backend/cpu/amx_attention.h"
#include "support/random_tensors.h"

namespace tessera {
namespace {

namespace amx = cpu::amx;
constexpr uint16_t kNaN = 0x7FC0;

// One KV head's keys and values for positions [0, written), in blocks of `bs` positions
// that lie in memory in reverse order (as a paged cache's may), as CpuDevice::kv_store
// writes them for the tiles (amx::store_key, amx::store_value); rows past `written` are NaN.
struct Cache {
  int64_t hd, bs, written;
  std::vector<uint16_t> data;
  std::vector<const uint16_t*> keys, values;

  Cache(int64_t head_dim, int64_t block_size, int64_t positions, uint32_t seed)
      : hd(head_dim), bs(block_size), written(positions) {
    const int64_t blocks = (positions + bs - 1) / bs;
    data.assign(static_cast<size_t>(blocks * 2 * bs * hd), kNaN);
    const auto values_of = testing::random_values(data.size(), seed);
    std::vector<float> key(static_cast<size_t>(hd));
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t slot = blocks - 1 - b;
      uint16_t* region[2] = {data.data() + slot * 2 * bs * hd, data.data() + (slot * 2 + 1) * bs * hd};
      keys.push_back(region[0]);
      values.push_back(region[1]);
      for (int64_t r = 0; r < bs && b * bs + r < positions; ++r) {
        const float* row = values_of.data() + (r + slot * 2 * bs) * hd;
        for (int64_t d = 0; d < hd; ++d) key[static_cast<size_t>(d)] = 3.0f * row[d];  // scores that do not all tie
        amx::store_key(key.data(), hd, bs, r, region[0]);
        amx::store_value(row + bs * hd, hd, r, region[1]);
      }
    }
  }
  Cache(const Cache&) = delete;  // keys and values point into data
  // Where element d of a block's row r lies in its keys (kind 0) or values (1).
  int64_t index(int kind, int64_t r, int64_t d) const {
    return kind == 0 ? d / 2 * 2 * bs + 2 * r + d % 2 : r / 2 * 2 * hd + 2 * d + r % 2;
  }
  // Positions from `pos` on as never written (NaN), as a decode step's cache past its token.
  void unwrite_from(int64_t pos) {
    for (; written > pos; --written)
      for (int kind = 0; kind < 2; ++kind) {
        auto* rows = const_cast<uint16_t*>((kind == 0 ? keys : values)[static_cast<size_t>((written - 1) / bs)]);
        for (int64_t d = 0; d < hd; ++d) rows[index(kind, (written - 1) % bs, d)] = kNaN;
      }
  }
  float at(int kind, int64_t pos, int64_t d) const {
    return bf16_to_f32((kind == 0 ? keys : values)[static_cast<size_t>(pos / bs)][index(kind, pos % bs, d)]);
  }
};

// A unit over the cache, its last token's position the last written.
amx::AttentionUnit unit_of(const Cache& cache, const float* q, float* out, int64_t tokens, int64_t heads, int64_t pos0,
                           int64_t window) {
  return {.q = q,
          .out = out,
          .token_stride = heads * cache.hd,
          .tokens = tokens,
          .heads = heads,
          .head_dim = cache.hd,
          .pos0 = pos0,
          .sliding_window = window,
          .scale = 1.0f / std::sqrt(static_cast<float>(cache.hd)),
          .block_size = cache.bs,
          .keys = cache.keys.data(),
          .values = cache.values.data(),
          .values_to = cache.written - 1};
}

// The kernel on the emulated tiles, as amx.cpp runs it on the instructions, over scratch
// that holds NaNs (what a unit reads there it must have written first, but for the rows of
// a tile past the unit's, whose products reach only their own outputs).
struct NaNScratch {
  std::vector<float> floats;
  explicit NaNScratch(int64_t n) : floats(static_cast<size_t>(n + 16), std::numeric_limits<float>::quiet_NaN()) {}
  float* get() { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(floats.data()) + 63) & ~uintptr_t{63}); }
};
void emulated(const amx::AttentionUnit& u) {
  NaNScratch scratch(amx::kernel::attend_floats(amx::kernel::UnitSpan{u}));
  amx::kernel::attend_unit<amx::EmulatedOps>(u, scratch.get());
}

// The same in steps, each step's items in ranges of `cut` (the last maybe shorter), each
// range on a thread scratch of its own (as CpuDevice shares a unit out among threads).
void emulated_in_steps(const amx::AttentionUnit& u, int64_t cut) {
  namespace k = amx::kernel;
  const k::UnitSpan span{u};
  NaNScratch shared(k::UnitScratch::floats(span.width()));
  const auto us = k::UnitScratch::cut(shared.get(), span.width());
  for (const auto step : {cpu::AttentionStep::kScores, cpu::AttentionStep::kProbs, cpu::AttentionStep::kOutputs})
    for (int64_t begin = 0; begin < k::step_items(span, step); begin += cut) {
      NaNScratch own(k::ThreadScratch::floats(u.head_dim));
      const int64_t end = std::min(begin + cut, k::step_items(span, step));
      k::unit_step<amx::EmulatedOps>(span, step, begin, end, us, k::ThreadScratch::cut(own.get(), u.head_dim));
    }
}

// A query row's outputs by doubles over the positions it sees.
std::vector<double> reference(const Cache& cache, const float* q, int64_t pos, int64_t window, float scale) {
  const int64_t hd = cache.hd, first = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  std::vector<double> scores;
  double top = -INFINITY;
  for (int64_t j = first; j <= pos; ++j) {
    double s = 0;
    for (int64_t d = 0; d < hd; ++d) s += double{q[d]} * cache.at(0, j, d);
    scores.push_back(s * scale);
    top = std::max(top, scores.back());
  }
  double sum = 0;
  for (double& s : scores) sum += s = std::exp(s - top);
  std::vector<double> out(static_cast<size_t>(hd), 0.0);
  for (int64_t j = first; j <= pos; ++j)
    for (int64_t d = 0; d < hd; ++d)
      out[static_cast<size_t>(d)] += scores[static_cast<size_t>(j - first)] / sum * cache.at(1, j, d);
  return out;
}

// Fail first: each position's chunk counted from the unit's first position rather than from
// position 0 failed the bitwise comparison (sliding windows), and the values past the last
// written position read from the cache instead of as zeros gave NaNs.
TEST(AmxAttentionTest, TokensGetTheirLoneBitsInAnyTileAndMatchDoubles) {
  for (const int64_t hd : {32, 64, 128})
    for (const int64_t bs : {32, 64})
      for (const int64_t heads : {1, 4, 8})
        for (const int64_t window : {0, 21})
          for (const int64_t pos0 : {0, 45}) {
            const int64_t tokens = std::min<int64_t>(8, amx::kAttentionRows / heads);
            const auto seed = static_cast<uint32_t>(hd + bs + heads + window + pos0);
            Cache cache(hd, bs, pos0 + tokens, seed);
            const auto q = testing::random_values(static_cast<size_t>(tokens * heads * hd), 7);
            std::vector<float> tile(q.size(), -1.0f), alone(q.size(), -1.0f);
            emulated(unit_of(cache, q.data(), tile.data(), tokens, heads, pos0, window));
            const Cache whole(hd, bs, pos0 + tokens, seed);  // for the reference
            for (int64_t t = tokens - 1; t >= 0; --t) {      // each as a decode step: nothing written past it
              cache.unwrite_from(pos0 + t + 1);
              const int64_t at = t * heads * hd;
              emulated(unit_of(cache, q.data() + at, alone.data() + at, 1, heads, pos0 + t, window));
            }
            SCOPED_TRACE(::testing::Message() << "head_dim " << hd << ", blocks of " << bs << ", " << heads
                                              << " heads, window " << window << ", from " << pos0);
            EXPECT_EQ(std::memcmp(tile.data(), alone.data(), tile.size() * sizeof(float)), 0);
            double worst = 0;
            for (int64_t t = 0; t < tokens; ++t)
              for (int64_t h = 0; h < heads; ++h) {
                const int64_t at = (t * heads + h) * hd;
                const auto want = reference(whole, q.data() + at, pos0 + t, window, 1.0f / std::sqrt(float(hd)));
                for (int64_t d = 0; d < hd; ++d) {
                  const double diff = std::abs(tile[static_cast<size_t>(at + d)] - want[static_cast<size_t>(d)]);
                  if (!(diff <= worst)) worst = diff;  // a NaN too
                }
              }
            EXPECT_LT(worst, 1e-4);  // q and the probabilities to 16 bits: a few parts in 100,000
          }
}

// Fail first: a step's outputs copied out for every dimension, not only its own groups',
// put the NaNs of the range's fresh scratch into the others.
TEST(AmxAttentionTest, AUnitInStepsCutAnyWayGivesTheBitsOfAUnitOnOneThread) {
  for (const int64_t hd : {64, 128})
    for (const int64_t heads : {4, 8, 32})
      for (const int64_t window : {0, 100})
        for (const int64_t cut : {1, 2, 3, 1000}) {
          const int64_t tokens = heads == 32 ? 1 : 3, pos0 = 300;  // 32, 12 and 24 query rows
          const Cache cache(hd, 64, pos0 + tokens, static_cast<uint32_t>(hd + heads));
          const auto q = testing::random_values(static_cast<size_t>(tokens * heads * hd), 5);
          std::vector<float> whole(q.size(), -1.0f), steps(q.size(), -1.0f);
          emulated(unit_of(cache, q.data(), whole.data(), tokens, heads, pos0, window));
          emulated_in_steps(unit_of(cache, q.data(), steps.data(), tokens, heads, pos0, window), cut);
          EXPECT_EQ(std::memcmp(whole.data(), steps.data(), whole.size() * sizeof(float)), 0)
              << "head_dim " << hd << ", " << heads << " heads, window " << window << ", cut " << cut;
        }
}

TEST(AmxAttentionTest, InstructionGivesTheEmulationsBits) {
  if (!amx::attention_enabled(64, 32))
    GTEST_SKIP() << "this CPU (or OS) has no AMX-BF16 tiles, or TESSERA_AMX(_ATTENTION)=0; they are tested on the "
                    "dev VM's and the GPU host's Xeons";
  for (const int64_t hd : {64, 128})
    for (const int64_t heads : {4, 8})
      for (const int64_t window : {0, 21}) {
        const int64_t tokens = std::min<int64_t>(8, amx::kAttentionRows / heads), pos0 = 70;
        const Cache cache(hd, 32, pos0 + tokens, 3);
        const auto q = testing::random_values(static_cast<size_t>(tokens * heads * hd), 11);
        std::vector<float> got(q.size()), want(q.size());
        amx::attend(unit_of(cache, q.data(), got.data(), tokens, heads, pos0, window));
        emulated(unit_of(cache, q.data(), want.data(), tokens, heads, pos0, window));
        EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
            << "head_dim " << hd << ", " << heads << " heads, window " << window;
      }
}

}  // namespace
}  // namespace tessera
