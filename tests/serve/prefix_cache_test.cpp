// The prefix cache through the server, on the shipped model: a request gets
// bitwise the same answer (text and logprobs, greedy and seeded) alone on a
// server without the cache, with its prefix from the cache, and among 63
// concurrent others; /metrics counts the prompt tokens looked up and found; a
// salted request never hits blocks cached under no salt or another salt; and a
// pool too small to keep what is cached evicts it rather than refusing anyone.
#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "serve/http_client.h"
#include "serve/test_server.h"

namespace tessera::serve {
namespace {

using namespace tessera::testing;
using Json = nlohmann::json;

constexpr int64_t kBlock = 32;  // ForwardOptions' default block size

// `n` token ids starting from `first`: a prompt whose tokens the test knows exactly.
std::vector<int32_t> ids(int n, int first) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(3 + (first + 97 * i) % 8000);
  return out;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Json body(const std::vector<int32_t>& prompt, int seed = -1, const std::string& salt = "") {
  Json b = {{"prompt", prompt}, {"max_tokens", 12}, {"logprobs", 2}};
  if (seed >= 0) {
    b["temperature"] = 1.0;
    b["seed"] = seed;
  }
  if (!salt.empty()) b["cache_salt"] = salt;
  return b;
}

// The first choice: its text, finish reason and logprobs (values included), what must match bitwise.
Json answer(uint16_t port, const Json& request) {
  const HttpReply reply = post(port, "/v1/completions", request.dump());
  EXPECT_EQ(reply.status, 200) << reply.body;
  if (reply.status != 200) return nullptr;
  Json choice = reply.json()["choices"][0];
  EXPECT_TRUE(choice["logprobs"].is_object()) << choice.dump();
  return choice;
}

double metric(uint16_t port, const std::string& name) { return metric_value(get(port, "/metrics").body, name); }

ServerOptions options(bool prefix_caching) {
  ServerOptions o = test_options();
  o.loop.prefix_caching = prefix_caching;
  return o;
}

TEST(PrefixCacheServeTest, AnswerIsBitwiseTheSameAloneFromTheCacheAndAmong63Others) {
  const std::vector<int32_t> system = ids(3 * kBlock + 5, 11);  // three full blocks to share
  std::vector<Json> requests;
  for (int i = 0; i < 64; ++i) {
    const std::vector<int32_t> prompt = i % 2 ? concat(system, ids(3 + i % 7, 1000 + i)) : ids(20 + i, 500 + 3 * i);
    requests.push_back(body(prompt, i % 3 == 0 ? -1 : i));  // greedy and seeded
  }
  std::vector<Json> alone;
  {
    const auto reference = start_server(options(false));
    for (const Json& r : requests) alone.push_back(answer(reference->port(), r));
    EXPECT_EQ(metric(reference->port(), "prefix_cache_queries_total"), 0);
  }
  const auto server = start_server(options(true));
  const uint16_t port = server->port();

  // The shared prefix, cached by a first request, then found by every later one.
  answer(port, body(concat(system, ids(4, 77))));
  const double queries = metric(port, "prefix_cache_queries_total");
  EXPECT_EQ(queries, static_cast<double>(system.size() + 4));
  EXPECT_EQ(metric(port, "prefix_cache_hits_total"), 0);
  for (const int i : {1, 3, 4}) {  // seeded and greedy with the prefix cached, and one with nothing to find
    const double hits = metric(port, "prefix_cache_hits_total");
    EXPECT_EQ(answer(port, requests[i]), alone[i]) << "request " << i << " with its prefix from the cache";
    EXPECT_EQ(metric(port, "prefix_cache_hits_total") - hits, i % 2 ? 3 * kBlock : 0) << "request " << i;
  }

  // All 64 at once.
  std::vector<std::future<Json>> together;
  for (const Json& r : requests) together.push_back(std::async(std::launch::async, [&, r] { return answer(port, r); }));
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(together[i].get(), alone[i]) << "request " << i;
  EXPECT_GE(server->loop().stats().largest_step.load(), 8u) << "the requests hardly shared forward passes";
  EXPECT_GE(metric(port, "prefix_cache_hits_total"), 32 * 3 * kBlock) << "the odd requests found the shared prefix";
  const LoopStats& stats = server->loop().stats();
  EXPECT_TRUE(eventually([&] { return stats.kv_blocks_free.load() == stats.kv_blocks_total.load(); }))
      << "cached blocks no request holds count as free";
}

TEST(PrefixCacheServeTest, ASaltedRequestOnlyHitsBlocksCachedUnderItsOwnSalt) {
  const auto server = start_server(options(true));
  const uint16_t port = server->port();
  const std::vector<int32_t> prompt = ids(2 * kBlock + 1, 5);
  auto hits_of = [&](const std::string& salt) {
    const double before = metric(port, "prefix_cache_hits_total");
    const Json got = answer(port, body(prompt, 3, salt));
    return std::make_pair(metric(port, "prefix_cache_hits_total") - before, got);
  };
  const auto [unsalted, expected] = hits_of("");
  EXPECT_EQ(unsalted, 0);
  const auto [tenant_a, a_answer] = hits_of("tenant-a");
  EXPECT_EQ(tenant_a, 0) << "a salted request found blocks cached without a salt";
  EXPECT_EQ(hits_of("tenant-b").first, 0) << "a salted request found blocks cached under another salt";
  EXPECT_EQ(hits_of("tenant-a").first, 2 * kBlock) << "a salted request did not find its own salt's blocks";
  EXPECT_EQ(hits_of("").first, 2 * kBlock);
  EXPECT_EQ(a_answer, expected) << "the salt changes what is shared, not the answer";
}

// 64 KiB a block (4 layers x K and V x 2 heads x 64 x 32 positions x bf16): a pool of 8 blocks.
// Every request needs 3, and leaves 2 full ones cached: without eviction the third would wait for ever.
TEST(PrefixCacheServeTest, ASmallPoolEvictsCachedBlocksAndLosesNoRequest) {
  ServerOptions o = options(true);
  o.loop.engine.forward.kv_memory = uint64_t{512} << 10;
  const auto server = start_server(o);
  const uint16_t port = server->port();
  ASSERT_EQ(server->loop().stats().kv_blocks_total.load(), 8);
  std::vector<Json> requests;
  for (int i = 0; i < 12; ++i) requests.push_back(body(ids(2 * kBlock + 10, 40 * i + 1), i));
  std::vector<Json> first;
  for (const Json& r : requests) first.push_back(answer(port, r));  // one at a time: each evicts older blocks
  // Then all twelve at once: they need 36 of the 8 blocks, so most wait in the
  // queue for KV space (none is refused), and each evicts what the others cached.
  std::vector<Json> again(requests.size());
  std::vector<std::future<void>> clients;
  for (size_t i = 0; i < requests.size(); ++i)
    clients.push_back(std::async(std::launch::async, [&, i] { again[i] = answer(port, requests[i]); }));
  for (auto& client : clients) client.get();
  for (size_t i = 0; i < requests.size(); ++i) EXPECT_EQ(again[i], first[i]) << "request " << i;
  EXPECT_EQ(metric(port, "request_failure_total"), 0);
  const LoopStats& stats = server->loop().stats();
  EXPECT_TRUE(eventually([&] { return stats.kv_blocks_free.load() == stats.kv_blocks_total.load(); }));
}

}  // namespace
}  // namespace tessera::serve
