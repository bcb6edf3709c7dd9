// Tests of ThreadPool::parallel_for: exact coverage of [0, n), aligned chunk
// boundaries, deterministic chunking, and reuse of one pool across many calls.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace tessera {
namespace {

using Chunks = std::vector<std::pair<size_t, size_t>>;

Chunks record_chunks(ThreadPool& pool, size_t n, size_t align) {
  std::mutex mutex;
  Chunks chunks;
  pool.parallel_for(n, align, [&](size_t begin, size_t end) {
    std::lock_guard lock(mutex);
    chunks.emplace_back(begin, end);
  });
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

TEST(ThreadPoolTest, CoversRangeExactlyOnceWithAlignedChunks) {
  for (size_t threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.size(), threads);
    for (size_t n : {0, 1, 2, 3, 7, 8, 9, 63, 64, 65, 100, 1000, 4097}) {
      for (size_t align : {1, 2, 3, 8, 64, 5000}) {
        SCOPED_TRACE(testing::Message() << "threads=" << threads << " n=" << n << " align=" << align);
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_for(n, align, [&](size_t begin, size_t end) {
          ASSERT_LT(begin, end);
          ASSERT_LE(end, n);
          for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "i=" << i;

        const Chunks chunks = record_chunks(pool, n, align);
        EXPECT_LE(chunks.size(), threads);
        for (size_t c = 0; c < chunks.size(); ++c) {
          EXPECT_EQ(chunks[c].first % align, 0u) << chunks[c].first;
          EXPECT_TRUE(chunks[c].second % align == 0 || chunks[c].second == n) << chunks[c].second;
          if (c > 0) {
            EXPECT_EQ(chunks[c].first, chunks[c - 1].second);
          }
        }
      }
    }
  }
}

TEST(ThreadPoolTest, ChunkingIsDeterministic) {
  ThreadPool pool(4);
  for (size_t n : {10, 1000, 12345}) {
    const Chunks first = record_chunks(pool, n, 8);
    for (int run = 0; run < 20; ++run) EXPECT_EQ(record_chunks(pool, n, 8), first) << n;
    ThreadPool other(4);
    EXPECT_EQ(record_chunks(other, n, 8), first) << n;
  }
  // 1000 elements in units of 8 over 4 threads: 125 units -> 31, 31, 31, 32 units.
  EXPECT_EQ(record_chunks(pool, 1000, 8), (Chunks{{0, 248}, {248, 496}, {496, 744}, {744, 1000}}));
}

TEST(ThreadPoolTest, CallerRunsTheFirstChunk) {
  ThreadPool pool(3);
  std::atomic<bool> first_on_caller{false};
  const auto caller = std::this_thread::get_id();
  pool.parallel_for(300, 1, [&](size_t begin, size_t) {
    if (begin == 0) first_on_caller = std::this_thread::get_id() == caller;
  });
  EXPECT_TRUE(first_on_caller);
}

TEST(ThreadPoolTest, AlignZeroIsTreatedAsOne) {
  ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(5);
  pool.parallel_for(5, 0, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) hits[i].fetch_add(1);
  });
  for (auto& h : hits) EXPECT_EQ(h.load(), 1);
}

TEST(ThreadPoolTest, HugeRangesDoNotWrap) {
  // Only the chunk bounds are recorded; nothing iterates over the range.
  ThreadPool pool(4);
  for (size_t n : {SIZE_MAX, SIZE_MAX / 2 + 3, size_t{1} << 62}) {
    for (size_t align : {1, 64}) {
      const Chunks chunks = record_chunks(pool, n, align);
      ASSERT_FALSE(chunks.empty());
      EXPECT_EQ(chunks.front().first, 0u);
      EXPECT_EQ(chunks.back().second, n) << "n=" << n << " align=" << align;
      for (size_t c = 1; c < chunks.size(); ++c) EXPECT_EQ(chunks[c].first, chunks[c - 1].second);
    }
  }
}

TEST(ThreadPoolTest, SurvivesManyCallsInARow) {
  ThreadPool pool(4);
  std::atomic<uint64_t> sum{0};
  for (int call = 0; call < 2000; ++call) {
    pool.parallel_for(64, 4, [&](size_t begin, size_t end) {
      uint64_t local = 0;
      for (size_t i = begin; i < end; ++i) local += i;
      sum += local;
    });
  }
  EXPECT_EQ(sum.load(), 2000u * (63u * 64u / 2u));
}

TEST(ThreadPoolTest, DefaultUsesAtLeastOneThread) {
  ThreadPool pool;
  EXPECT_GE(pool.size(), 1u);
  size_t covered = 0;
  std::mutex mutex;
  pool.parallel_for(17, 1, [&](size_t begin, size_t end) {
    std::lock_guard lock(mutex);
    covered += end - begin;
  });
  EXPECT_EQ(covered, 17u);
}

}  // namespace
}  // namespace tessera
