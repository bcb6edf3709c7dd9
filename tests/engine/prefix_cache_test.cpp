// PrefixCache on its own, over a small KV pool: the hash chain (checked against
// Python's hashlib), salts that no other salt or unsalted prompt can reach, the
// longest cached prefix found, least-recently-used eviction with the deepest
// block of a chain first, and reference counts (the cache holds one reference;
// a block a sequence still holds is never evicted; the count of blocks the cache
// alone holds follows every change of holders).
#include "engine/prefix_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/device.h"

namespace tessera {
namespace {

constexpr int64_t kBlock = 4;
using Digest = PrefixCache::Digest;

std::string hex(const Digest& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (const uint8_t b : d) {
    out += kDigits[b >> 4];
    out += kDigits[b & 15];
  }
  return out;
}

class PrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto device = make_device("cpu", 1);
    ASSERT_TRUE(device.ok()) << device.status().to_string();
    device_ = std::move(*device);
    auto pool = KvPool::create(*device_, {.layers = 1, .n_kv_heads = 1, .head_dim = 8},
                               {.budget_bytes = 8 * kBlock * 2 * 8 * sizeof(float), .block_size = kBlock});
    ASSERT_TRUE(pool.ok()) << pool.status().to_string();
    pool_ = std::move(*pool);
    ASSERT_EQ(pool_->total_blocks(), 8);
  }

  // A sequence that has written `tokens` (whole blocks), as the scheduler's would.
  KvCache written(const std::vector<int32_t>& tokens) {
    KvCache cache(*pool_, 64);
    cache.prepare(static_cast<int64_t>(tokens.size()));
    cache.advance(static_cast<int64_t>(tokens.size()));
    return cache;
  }
  // Caches every full block of `cache`, which holds `tokens`, under `salt`.
  static void insert_all(PrefixCache& prefix, const KvCache& cache, const std::vector<int32_t>& tokens,
                         const std::string& salt = "") {
    std::vector<Digest> chain;
    for (size_t i = 0; (i + 1) * kBlock <= tokens.size(); ++i) {
      chain.push_back(PrefixCache::digest(chain.empty() ? nullptr : &chain.back(), salt,
                                          std::span(tokens).subspan(i * kBlock, kBlock)));
      prefix.insert(chain, cache.blocks()[i]);
    }
  }
  static std::vector<int32_t> ids(int n, int first) {
    std::vector<int32_t> out;
    for (int i = 0; i < n; ++i) out.push_back(first + i);
    return out;
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<KvPool> pool_;
};

// SHA-256(parent digest | u64 LE salt length | salt | i32 LE tokens), the parent of
// block 0 all zeros. The expected values are Python's:
//   d = hashlib.sha256(bytes(32) + struct.pack('<Q', 0) + struct.pack('<4i', 1, 2, 3, 4)).digest()
//   hashlib.sha256(d + struct.pack('<Q', 4) + b'salt' + struct.pack('<4i', 5, 6, 7, 8)).hexdigest()
TEST_F(PrefixCacheTest, DigestIsTheHashChainHashlibComputes) {
  const std::vector<int32_t> first = {1, 2, 3, 4}, second = {5, 6, 7, 8};
  const Digest d0 = PrefixCache::digest(nullptr, "", first);
  EXPECT_EQ(hex(d0), "0ef3c9f6ae8968026875ea9128fbaa06aae53945a8da2e5a53a448919dd0a5ca");
  EXPECT_EQ(hex(PrefixCache::digest(&d0, "salt", second)),
            "eaf07ee9989a20792220b42cb1b007d2d604307e741c77efbd19a6d366eccf11");
  // A block's digest names its whole prefix: the same tokens after another block differ.
  const Digest other = PrefixCache::digest(nullptr, "", second);
  EXPECT_NE(PrefixCache::digest(&d0, "", second), PrefixCache::digest(&other, "", second));
}

// The salt's length goes first, so a salt cannot pass for token bytes: salt
// "\x01\0\0\0" with token 2 is not token 1 then 2 unsalted (without the length
// both hash the same bytes; this failed with the length update removed).
TEST_F(PrefixCacheTest, SaltAndTokensCannotTradeBytes) {
  const std::string salt("\x01\0\0\0", 4);
  const std::vector<int32_t> one = {2}, two = {1, 2};
  EXPECT_NE(PrefixCache::digest(nullptr, salt, one), PrefixCache::digest(nullptr, "", two));
}

TEST_F(PrefixCacheTest, LookupFindsTheLongestCachedPrefixUnderItsOwnSaltOnly) {
  PrefixCache prefix(*pool_);
  const std::vector<int32_t> tokens = ids(3 * kBlock, 10);
  KvCache sequence = written(tokens);
  insert_all(prefix, sequence, tokens, "tenant-a");
  ASSERT_EQ(prefix.size(), 3u);

  std::vector<int32_t> longer = tokens;
  longer.push_back(99);
  const PrefixCache::Hit hit = prefix.lookup(longer, "tenant-a", 10);
  EXPECT_EQ(hit.blocks, std::vector<int32_t>(sequence.blocks().begin(), sequence.blocks().end()));
  ASSERT_EQ(hit.chain.size(), 3u);
  EXPECT_EQ(prefix.lookup(longer, "tenant-a", 2).blocks.size(), 2u) << "max_blocks bounds it";
  // A prompt that differs in its second block finds only the first.
  std::vector<int32_t> fork = tokens;
  fork[kBlock + 1] = 7;
  EXPECT_EQ(prefix.lookup(fork, "tenant-a", 10).blocks.size(), 1u);
  // No other salt, and no unsalted prompt, reaches these blocks.
  EXPECT_TRUE(prefix.lookup(longer, "", 10).blocks.empty());
  EXPECT_TRUE(prefix.lookup(longer, "tenant-b", 10).blocks.empty());
  EXPECT_TRUE(prefix.lookup(longer, "tenant-", 10).blocks.empty());
}

TEST_F(PrefixCacheTest, TheCacheHoldsOneReferenceAndEvictsOnlyWhatNoSequenceHolds) {
  PrefixCache prefix(*pool_);
  const std::vector<int32_t> tokens = ids(2 * kBlock, 1);
  std::vector<int32_t> blocks;
  {
    KvCache sequence = written(tokens);
    blocks.assign(sequence.blocks().begin(), sequence.blocks().end());
    insert_all(prefix, sequence, tokens);
    insert_all(prefix, sequence, tokens);  // the same digests again: no second reference
    for (const int32_t b : blocks) EXPECT_EQ(pool_->holders(b), 2);
    EXPECT_EQ(prefix.evictable(), 0);
    EXPECT_EQ(prefix.evict(8), 0) << "a block a sequence holds stays";
    EXPECT_EQ(pool_->free_blocks(), 6);
  }  // the sequence ends: the cache alone holds its blocks
  for (const int32_t b : blocks) EXPECT_EQ(pool_->holders(b), 1);
  EXPECT_EQ(prefix.evictable(), 2);
  EXPECT_EQ(pool_->free_blocks(), 6);
  {  // a new sequence takes the cached blocks, shared
    KvCache again(*pool_, 64);
    again.share_prefix(prefix.lookup(tokens, "", 2).blocks);
    EXPECT_EQ(again.length(), 2 * kBlock);
    for (const int32_t b : blocks) EXPECT_EQ(pool_->holders(b), 2);
    EXPECT_EQ(prefix.evictable(), 0);
  }
  EXPECT_EQ(prefix.evict(1), 1);
  EXPECT_EQ(pool_->free_blocks(), 7);
  prefix.clear();
  EXPECT_EQ(prefix.size(), 0u);
  EXPECT_EQ(pool_->free_blocks(), 8);
}

// Chains A (3 blocks) and B (2 blocks) are cached, then A is looked up again:
// B is least recently used, so it goes first, its second block before its
// first; then A from its deepest block up.
TEST_F(PrefixCacheTest, EvictsLeastRecentlyUsedFirstAndTheDeepestBlockOfAChainFirst) {
  PrefixCache prefix(*pool_);
  const std::vector<int32_t> a = ids(3 * kBlock, 100), b = ids(2 * kBlock, 200);
  {
    KvCache sa = written(a), sb = written(b);
    insert_all(prefix, sa, a);
    insert_all(prefix, sb, b);
  }
  ASSERT_EQ(prefix.lookup(a, "", 3).blocks.size(), 3u);  // A is now the most recent
  const auto cached = [&](const std::vector<int32_t>& t) { return prefix.lookup(t, "", 3).blocks.size(); };

  ASSERT_EQ(prefix.evict(1), 1);
  EXPECT_EQ(prefix.size(), 4u);
  // Looking up marks what it finds as used: check B before A so that A stays the most recent.
  EXPECT_EQ(cached(b), 1u) << "B's deepest block went first";
  ASSERT_EQ(prefix.lookup(a, "", 3).blocks.size(), 3u);
  ASSERT_EQ(prefix.evict(1), 1);
  EXPECT_EQ(cached(b), 0u);
  EXPECT_EQ(cached(a), 3u);
  ASSERT_EQ(prefix.evict(1), 1);
  EXPECT_EQ(cached(a), 2u) << "then A's deepest";
  ASSERT_EQ(prefix.evict(2), 2);
  EXPECT_EQ(prefix.size(), 0u);
  EXPECT_EQ(pool_->free_blocks(), 8);
}

// evictable() is counted by the pool as holders come and go (no scan): through a
// seeded random walk of sequences that write, share cached prefixes, fork,
// truncate and end, and of evictions and clears, it always equals the blocks
// with one holder that no live sequence holds (the cache is the only other holder).
TEST_F(PrefixCacheTest, EvictableFollowsEveryChangeOfHolders) {
  auto prefix = std::make_unique<PrefixCache>(*pool_);
  std::vector<KvCache> live;
  std::mt19937 rng(7);
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const auto alone = [&] {
    int64_t n = 0;
    for (int32_t b = 0; b < pool_->total_blocks(); ++b) {
      bool in_sequence = false;
      for (const KvCache& s : live) in_sequence = in_sequence || std::ranges::count(s.blocks(), b) > 0;
      n += pool_->holders(b) == 1 && !in_sequence ? 1 : 0;
    }
    return n;
  };
  int64_t checked_nonzero = 0;
  for (int op = 0; op < 3000; ++op) {
    switch (pick(8)) {
      case 0:
      case 1: {  // a new sequence: a cached prefix of its tokens if any, then its own blocks, all cached
        std::vector<int32_t> t(static_cast<size_t>(kBlock) * (1 + pick(3)));
        for (int32_t& id : t) id = static_cast<int32_t>(pick(2));  // two ids: prefixes recur
        KvCache s(*pool_, 64);
        s.share_prefix(prefix->lookup(t, "", 8).blocks);
        const int64_t rest = static_cast<int64_t>(t.size()) - s.length();
        if (pool_->free_blocks() < s.blocks_needed(rest)) prefix->evict(s.blocks_needed(rest));
        if (pool_->free_blocks() < s.blocks_needed(rest)) break;  // sequences hold the pool
        s.prepare(rest);
        s.advance(rest);
        insert_all(*prefix, s, t);
        live.push_back(std::move(s));
        break;
      }
      case 2:
      case 3:  // a sequence ends
        if (!live.empty()) live.erase(live.begin() + static_cast<std::ptrdiff_t>(pick(live.size())));
        break;
      case 4:  // a fork shares a sequence's blocks
        if (!live.empty()) {
          const size_t i = pick(live.size());
          live.push_back(live[i].fork(live[i].length()));
        }
        break;
      case 5:  // a sequence gives back its last block
        if (!live.empty()) {
          const size_t i = pick(live.size());
          live[i].truncate(std::max<int64_t>(0, live[i].length() - kBlock));
        }
        break;
      case 6: prefix->evict(1 + static_cast<int64_t>(pick(3))); break;
      default:
        if (pick(20) == 0) prefix->clear();
        break;
    }
    ASSERT_EQ(prefix->evictable(), alone()) << "after operation " << op;
    checked_nonzero += prefix->evictable() > 0 ? 1 : 0;
  }
  EXPECT_GT(checked_nonzero, 300) << "the walk reached states where the cache alone holds blocks";
  live.clear();
  EXPECT_EQ(prefix->evictable(), static_cast<int64_t>(prefix->size()));
  prefix.reset();  // its blocks go back, unmarked
  EXPECT_EQ(pool_->free_blocks(), pool_->total_blocks());
  EXPECT_EQ(pool_->cached_alone(), 0);
}

}  // namespace
}  // namespace tessera
