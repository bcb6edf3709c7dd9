// The paged KV cache: blocks are taken as a sequence grows and given back when
// it shrinks or ends; forked sequences share blocks and copy a shared partly
// filled block before writing it, so neither sees the other's keys; a full pool
// refuses with kOverloaded and changes nothing; and no block leaks over many
// requests that end, are cancelled or fail in the engine's scheduler.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "engine/scheduler.h"
#include "fixtures.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace tessera {
namespace {

using testing::fixture_dir;

constexpr int64_t kBlockSize = 4;

class KvCacheTest : public testing::Llama3Test {
 protected:
  // Bytes of one block of llama3_f32's whole range at kBlockSize positions.
  size_t block_bytes() const {
    const ModelConfig& c = model_->config();
    return static_cast<size_t>(c.num_hidden_layers * 2 * c.num_key_value_heads * c.head_dim * kBlockSize) *
           sizeof(float);
  }
  // A Forward whose pool holds exactly `blocks` blocks of kBlockSize positions.
  std::unique_ptr<Forward> make_forward(int64_t blocks) {
    auto forward = std::make_unique<Forward>(
        *model_, *device_, ForwardOptions{.kv_memory = blocks * block_bytes(), .kv_block_size = kBlockSize});
    EXPECT_TRUE(forward->status().ok()) << forward->status().to_string();
    EXPECT_EQ(forward->kv_pool().total_blocks(), blocks);
    return forward;
  }
  static std::vector<int32_t> tokens(int64_t n, int32_t first) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((first + 37 * i) % 500 + 3));
    return ids;
  }
};

TEST_F(KvCacheTest, PoolTakesBlocksAsPrepareGrowsAndGivesThemBackOnTruncateAndDestruction) {
  auto pool = KvPool::create(*device_, {.layers = 1, .n_kv_heads = 1, .head_dim = 8},
                             {.budget_bytes = 10 * 4 * 2 * 8 * sizeof(float), .block_size = 4});
  ASSERT_TRUE(pool.ok()) << pool.status().to_string();
  KvPool& p = **pool;
  ASSERT_EQ(p.total_blocks(), 10);
  ASSERT_EQ(p.free_blocks(), 10);
  {
    KvCache cache(p, 40);
    EXPECT_EQ(cache.blocks_needed(1), 1);
    EXPECT_EQ(cache.blocks_needed(4), 1);
    EXPECT_EQ(cache.blocks_needed(5), 2);
    cache.prepare(5);
    cache.advance(5);
    EXPECT_EQ(cache.length(), 5);
    EXPECT_EQ(cache.blocks().size(), 2u);
    EXPECT_EQ(p.free_blocks(), 8);
    EXPECT_EQ(cache.blocks_needed(3), 0);  // positions 5..7 are in the second block
    EXPECT_EQ(cache.blocks_needed(4), 1);
    cache.prepare(3);
    cache.advance(3);
    EXPECT_EQ(p.free_blocks(), 8);
    for (const int32_t block : cache.blocks()) EXPECT_EQ(p.holders(block), 1);

    // A moved cache carries its blocks; the moved-from one holds none.
    KvCache moved(std::move(cache));
    EXPECT_EQ(moved.length(), 8);
    EXPECT_EQ(moved.blocks().size(), 2u);
    EXPECT_EQ(p.free_blocks(), 8);

    moved.truncate(5);  // still two blocks
    EXPECT_EQ(moved.blocks().size(), 2u);
    moved.truncate(4);
    EXPECT_EQ(moved.blocks().size(), 1u);
    EXPECT_EQ(p.free_blocks(), 9);
    moved.prepare(9);
    moved.advance(9);
    EXPECT_EQ(moved.blocks().size(), 4u);
    EXPECT_EQ(p.free_blocks(), 6);
  }  // destruction gives everything back
  EXPECT_EQ(p.free_blocks(), 10);
  for (int32_t block = 0; block < 10; ++block) EXPECT_EQ(p.holders(block), 0);
}

TEST_F(KvCacheTest, ForwardTakesBlocksAsSequenceGrowsAndTruncateAndDestructionReturnThem) {
  auto forward = make_forward(16);
  KvPool& pool = forward->kv_pool();
  {
    KvCache a = forward->make_cache(64);
    ASSERT_TRUE(forward->run_ids(tokens(3, 1), a).ok());
    EXPECT_EQ(a.blocks().size(), 1u);
    EXPECT_EQ(pool.free_blocks(), 15);
    ASSERT_TRUE(forward->run_ids(tokens(1, 2), a).ok());  // fills the block
    EXPECT_EQ(a.blocks().size(), 1u);
    ASSERT_TRUE(forward->run_ids(tokens(1, 3), a).ok());  // position 4: a new block
    EXPECT_EQ(a.blocks().size(), 2u);
    ASSERT_TRUE(forward->run_ids(tokens(6, 4), a).ok());  // 11 positions
    EXPECT_EQ(a.length(), 11);
    EXPECT_EQ(a.blocks().size(), 3u);
    EXPECT_EQ(pool.free_blocks(), 13);
    EXPECT_EQ(a.bytes(), 3 * block_bytes());

    KvCache b = forward->make_cache(64);
    ASSERT_TRUE(forward->run_ids(tokens(9, 5), b).ok());
    EXPECT_EQ(pool.free_blocks(), 10);
    std::set<int32_t> distinct(a.blocks().begin(), a.blocks().end());
    distinct.insert(b.blocks().begin(), b.blocks().end());
    EXPECT_EQ(distinct.size(), 6u);  // no block in two unforked sequences

    a.truncate(5);
    EXPECT_EQ(a.blocks().size(), 2u);
    EXPECT_EQ(pool.free_blocks(), 11);
    a.truncate(0);
    EXPECT_TRUE(a.blocks().empty());
    EXPECT_EQ(pool.free_blocks(), 13);
    ASSERT_TRUE(forward->run_ids(tokens(7, 6), a).ok());  // grows again after truncation
    EXPECT_EQ(pool.free_blocks(), 11);
  }
  EXPECT_EQ(pool.free_blocks(), pool.total_blocks());
}

// Fork at 5 of a 7-position sequence (block size 4): both blocks are shared, the
// second partly filled. The fork's write copies only that block; the original's
// keys stay its own, so each continues bitwise as a fresh sequence fed its own
// tokens. (With the copy in KvCache::prepare skipped, both comparisons fail:
// checked by hand.)
TEST_F(KvCacheTest, ForkSharesBlocksAndWritingCopiesOnlyThePartlyFilledSharedBlock) {
  auto forward = make_forward(16);
  KvPool& pool = forward->kv_pool();
  const std::vector<int32_t> prompt = tokens(7, 11);
  const std::vector<int32_t> a_token = {42};
  const std::vector<int32_t> b_tokens = {400, 401, 402, 403};  // positions 5..8 of the fork

  KvCache original = forward->make_cache(32);
  ASSERT_TRUE(forward->run_ids(prompt, original).ok());
  ASSERT_EQ(original.blocks().size(), 2u);
  const std::vector<int32_t> original_blocks(original.blocks().begin(), original.blocks().end());

  KvCache fork = original.fork(5);
  EXPECT_EQ(fork.length(), 5);
  ASSERT_EQ(fork.blocks().size(), 2u);
  EXPECT_EQ(pool.free_blocks(), 14);  // forking takes no block
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(fork.blocks()[i], original.blocks()[i]);
    EXPECT_EQ(pool.holders(original.blocks()[i]), 2);
  }
  EXPECT_EQ(fork.blocks_needed(1), 1);  // the copy of the shared partly filled block
  EXPECT_EQ(fork.blocks_needed(4), 2);  // the copy and a new block for position 8

  auto fork_logits = forward->run_ids(b_tokens, fork);
  ASSERT_TRUE(fork_logits.ok()) << fork_logits.status().to_string();
  EXPECT_EQ(fork.length(), 9);
  ASSERT_EQ(fork.blocks().size(), 3u);
  EXPECT_EQ(fork.blocks()[0], original_blocks[0]);  // the full block stays shared
  EXPECT_EQ(pool.holders(original_blocks[0]), 2);
  EXPECT_NE(fork.blocks()[1], original_blocks[1]);  // the partly filled one was copied
  EXPECT_EQ(pool.holders(original_blocks[1]), 1);
  EXPECT_EQ(pool.holders(fork.blocks()[1]), 1);
  EXPECT_EQ(std::vector<int32_t>(original.blocks().begin(), original.blocks().end()), original_blocks);
  EXPECT_EQ(pool.free_blocks(), 12);

  // The original continues with A as if the fork had never written.
  auto original_logits = forward->run_ids(a_token, original);
  ASSERT_TRUE(original_logits.ok());
  KvCache fresh = forward->make_cache(32);
  std::vector<int32_t> prompt_a = prompt;
  prompt_a.push_back(a_token[0]);
  auto expected = forward->run_ids(prompt_a, fresh);
  ASSERT_TRUE(expected.ok());
  EXPECT_EQ(*original_logits, *expected);

  // The fork's logits are those of prompt[0, 5) + B fed fresh.
  KvCache fresh_fork = forward->make_cache(32);
  std::vector<int32_t> prefix_b(prompt.begin(), prompt.begin() + 5);
  prefix_b.insert(prefix_b.end(), b_tokens.begin(), b_tokens.end());
  auto expected_fork = forward->run_ids(prefix_b, fresh_fork);
  ASSERT_TRUE(expected_fork.ok());
  EXPECT_EQ(*fork_logits, *expected_fork);

  // And the fork goes on unaffected by the original's write at position 7.
  auto fork_next = forward->run_ids(a_token, fork);
  auto expected_next = forward->run_ids(a_token, fresh_fork);
  ASSERT_TRUE(fork_next.ok() && expected_next.ok());
  EXPECT_EQ(*fork_next, *expected_next);
}

TEST_F(KvCacheTest, ForkAtBlockBoundaryCopiesNothing) {
  auto forward = make_forward(8);
  KvPool& pool = forward->kv_pool();
  KvCache original = forward->make_cache(32);
  ASSERT_TRUE(forward->run_ids(tokens(6, 3), original).ok());
  KvCache fork = original.fork(4);
  ASSERT_EQ(fork.blocks().size(), 1u);
  EXPECT_EQ(pool.holders(fork.blocks()[0]), 2);
  EXPECT_EQ(fork.blocks_needed(2), 1);  // a new block; the full shared one is only read
  ASSERT_TRUE(forward->run_ids(tokens(2, 9), fork).ok());
  EXPECT_EQ(fork.blocks()[0], original.blocks()[0]);
  EXPECT_EQ(pool.holders(original.blocks()[0]), 2);
  EXPECT_EQ(pool.free_blocks(), 5);
  fork = forward->make_cache(32);  // assigning over a fork releases its hold
  EXPECT_EQ(pool.holders(original.blocks()[0]), 1);
  EXPECT_EQ(pool.free_blocks(), 6);
}

TEST_F(KvCacheTest, FullPoolRefusesWithOverloadedNamingTheBudgetAndChangesNothing) {
  auto forward = make_forward(4);
  KvPool& pool = forward->kv_pool();
  KvCache a = forward->make_cache(64), b = forward->make_cache(64);
  ASSERT_TRUE(forward->run_ids(tokens(6, 1), a).ok());  // 2 blocks
  ASSERT_EQ(pool.free_blocks(), 2);

  auto refused = forward->run_ids(tokens(12, 2), b);  // 3 blocks needed
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().kind(), ErrorKind::kOverloaded);
  EXPECT_NE(refused.status().message().find("--kv-memory"), std::string::npos) << refused.status().message();
  EXPECT_NE(refused.status().message().find("3 blocks needed, 2 of 4 free"), std::string::npos)
      << refused.status().message();
  EXPECT_EQ(a.length(), 6);
  EXPECT_EQ(b.length(), 0);
  EXPECT_TRUE(b.blocks().empty());
  EXPECT_EQ(pool.free_blocks(), 2);

  // A step over both that needs more than is free is refused whole.
  const std::vector<int32_t> both = tokens(11, 3);
  const std::vector<Forward::Part> parts = {{&a, 3}, {&b, 8}};  // 1 + 2 blocks
  auto step = forward->step_ids(both, parts);
  ASSERT_FALSE(step.ok());
  EXPECT_EQ(step.status().kind(), ErrorKind::kOverloaded);
  EXPECT_EQ(a.length(), 6);
  EXPECT_EQ(b.length(), 0);
  EXPECT_EQ(pool.free_blocks(), 2);

  // What fits still runs, in both sequences, until the pool is full.
  ASSERT_TRUE(forward->run_ids(tokens(8, 4), b).ok());
  EXPECT_EQ(pool.free_blocks(), 0);
  ASSERT_TRUE(forward->run_ids(tokens(2, 5), a).ok());  // positions 6, 7: a's own block
  auto full = forward->run_ids(tokens(1, 6), a);
  EXPECT_EQ(full.status().kind(), ErrorKind::kOverloaded);
  EXPECT_EQ(a.length(), 8);

  // A fork's copy-on-write needs a block too.
  KvCache fork = a.fork(7);
  auto no_copy = forward->run_ids(tokens(1, 7), fork);
  EXPECT_EQ(no_copy.status().kind(), ErrorKind::kOverloaded);
  EXPECT_EQ(fork.length(), 7);
  EXPECT_EQ(pool.holders(a.blocks()[1]), 2);

  // Once b ends, a continues.
  b = forward->make_cache(64);
  EXPECT_EQ(pool.free_blocks(), 2);
  EXPECT_TRUE(forward->run_ids(tokens(1, 8), a).ok());
  EXPECT_EQ(a.length(), 9);
}

// 10,000 requests of random lengths through a Scheduler on a pool far too small
// for all of them: they end (cancelled after their last token), are cancelled
// at any point, or fail (no blocks even alone, beyond capacity, bad token id,
// a full queue, too many open). Every step, the blocks held are exactly the open
// sequences' (kv_bytes); at the end every block is free.
TEST_F(KvCacheTest, NoBlockLeaksOverTenThousandRequestsThatEndAreCancelledOrFail) {
  auto forward = make_forward(24);
  KvPool& pool = forward->kv_pool();
  Scheduler scheduler(*forward,
                      {.max_step_tokens = 8, .max_step_sequences = 4, .max_sequences = 12, .max_queued_feeds = 8});
  std::mt19937 rng(20240521);
  auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const auto vocab = static_cast<int32_t>(model_->config().vocab_size);

  struct Request {
    int decode_left = 0;   // tokens still to generate after the prompt
    bool waiting = false;  // a feed is queued
  };
  std::map<uint64_t, Request> open;
  std::map<std::string, int> outcomes;
  uint64_t next_id = 1;
  constexpr uint64_t kRequests = 10000;
  auto end = [&](uint64_t id, const std::string& outcome) {
    scheduler.cancel(id);
    open.erase(id);
    ++outcomes[outcome];
  };
  auto check_blocks = [&] {
    ASSERT_EQ(scheduler.kv_bytes(), static_cast<uint64_t>(pool.total_blocks() - pool.free_blocks()) * block_bytes());
    ASSERT_EQ(scheduler.open_sequences(), open.size());
  };

  while (next_id <= kRequests || !open.empty()) {
    const int action = uniform(0, 9);
    if (action <= 3 && next_id <= kRequests) {  // a new request
      const uint64_t id = next_id++;
      const Status opened = scheduler.open(id, uniform(4, 28));
      if (!opened.ok()) {
        ASSERT_EQ(opened.kind(), ErrorKind::kOverloaded) << opened.to_string();
        ++outcomes["open refused"];
        continue;
      }
      open[id] = {.decode_left = uniform(0, 6)};
      std::vector<int32_t> prompt(static_cast<size_t>(uniform(1, 12)));
      for (int32_t& t : prompt) t = uniform(0, vocab - 1);
      if (uniform(0, 49) == 0) prompt.back() = vocab + uniform(0, 9);  // refused at feed
      const Status fed = scheduler.feed_ids(id, std::move(prompt));
      if (!fed.ok()) {
        ASSERT_TRUE(fed.kind() == ErrorKind::kOverloaded || fed.kind() == ErrorKind::kInvalidInput) << fed.to_string();
        end(id, fed.kind() == ErrorKind::kOverloaded ? "queue full" : "bad token");
        continue;
      }
      open[id].waiting = true;
      if (uniform(0, 3) == 0) end(id, "cancelled before a step");
    } else if (action == 4 && !open.empty()) {  // cancel one at any point
      auto it = open.begin();
      std::advance(it, uniform(0, static_cast<int>(open.size()) - 1));
      end(it->first, it->second.waiting ? "cancelled while queued" : "cancelled while idle");
    } else if (action == 5 && !open.empty()) {  // an idle sequence goes on, or reuses a prefix
      auto it = open.begin();
      std::advance(it, uniform(0, static_cast<int>(open.size()) - 1));
      if (!it->second.waiting) {
        const uint64_t id = it->first;
        if (uniform(0, 1) == 0) scheduler.truncate(id, uniform(0, static_cast<int>(scheduler.length(id))));
        std::vector<int32_t> more(static_cast<size_t>(uniform(1, 6)));
        for (int32_t& t : more) t = uniform(0, vocab - 1);
        it->second.waiting = scheduler.feed_ids(id, std::move(more)).ok();
      }
    } else {
      for (const StepOutput& out : scheduler.step()) {
        ASSERT_TRUE(open.contains(out.id)) << out.id;
        if (!out.status.ok()) {
          ASSERT_FALSE(scheduler.is_open(out.id));  // a failed sequence is closed
          const bool capacity = out.status.message().find("capacity") != std::string::npos;
          ASSERT_TRUE(out.status.kind() == ErrorKind::kOverloaded || capacity) << out.status.to_string();
          open.erase(out.id);
          ++outcomes[capacity ? "failed: capacity" : "failed: no blocks"];
          continue;
        }
        Request& request = open.at(out.id);
        ASSERT_EQ(out.values.size(), static_cast<size_t>(vocab));
        if (request.decode_left-- == 0) {
          end(out.id, "ended");
          continue;
        }
        request.waiting = false;
        if (uniform(0, 3) == 0) continue;  // idle for a while, holding its blocks
        const auto next =
            static_cast<int32_t>(std::max_element(out.values.begin(), out.values.end()) - out.values.begin());
        request.waiting = scheduler.feed_ids(out.id, {next}).ok();
      }
    }
    check_blocks();
    if (HasFatalFailure()) return;
    if (open.empty()) {
      ASSERT_EQ(pool.free_blocks(), pool.total_blocks());
    }
  }
  scheduler.cancel_all();
  EXPECT_EQ(pool.free_blocks(), pool.total_blocks());
  for (int32_t block = 0; block < pool.total_blocks(); ++block) EXPECT_EQ(pool.holders(block), 0);

  // Every kind of ending happened, many times.
  for (const char* outcome : {"ended", "cancelled before a step", "cancelled while queued", "cancelled while idle",
                              "failed: capacity", "failed: no blocks", "bad token", "queue full", "open refused"}) {
    EXPECT_GE(outcomes[outcome], 10) << outcome;
  }
  int total = 0;
  for (const auto& [outcome, count] : outcomes) {
    total += count;
    RecordProperty(outcome, count);
  }
  EXPECT_EQ(total, static_cast<int>(kRequests));
}

}  // namespace
}  // namespace tessera
