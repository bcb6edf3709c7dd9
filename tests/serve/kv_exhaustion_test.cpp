// KV exhaustion, as vLLM handles it: requests that do not fit the KV pool wait
// in the queue instead of being refused, and when running requests cannot grow
// the newest is preempted (its blocks freed, its prompt and tokens recomputed
// later). Each answer (text and logprobs, greedy and seeded) is bitwise the one
// it gets alone on a server with room to spare; nothing fails; /metrics counts
// the preemptions and the pool is whole again at the end.
#include <gtest/gtest.h>

#include <future>
#include <vector>

#include "serve/http_client.h"
#include "serve/test_server.h"

namespace tessera::serve {
namespace {

using namespace tessera::testing;
using Json = nlohmann::json;

std::vector<int32_t> ids(int n, int first) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(3 + (first + 89 * i) % 8000);
  return out;
}

// The first choice (text, finish reason, logprobs), and the whole usage.
Json answer(uint16_t port, const Json& request) {
  const HttpReply reply = post(port, "/v1/completions", request.dump());
  EXPECT_EQ(reply.status, 200) << reply.body;
  if (reply.status != 200) return nullptr;
  return {{"choice", reply.json()["choices"][0]}, {"usage", reply.json()["usage"]}};
}

double metric(uint16_t port, const std::string& name) { return metric_value(get(port, "/metrics").body, name); }

// 64 KiB a block of 32 positions: a pool of 8 blocks (256 positions). Each
// request grows to 4 or 5 blocks (a prompt of 10 to 45 tokens, then 100 more),
// so eight at once need about 36: the newest are preempted again and again.
TEST(KvExhaustionTest, QueuedAndPreemptedRequestsGetBitwiseTheirAnswersAlone) {
  std::vector<Json> requests;
  for (int i = 0; i < 8; ++i) {
    Json r = {{"prompt", ids(10 + 5 * i, 31 * i + 7)},
              {"max_tokens", 100},
              {"logprobs", 2},
              {"logit_bias", {{"1", -100}}}};  // no end-of-text: every request runs its 100 tokens
    if (i % 2) {
      r["temperature"] = 0.9;
      r["seed"] = 100 + i;
    }
    requests.push_back(r);
  }
  std::vector<Json> alone;
  {
    const auto roomy = start_server(test_options());
    for (const Json& r : requests) alone.push_back(answer(roomy->port(), r));
    EXPECT_EQ(metric(roomy->port(), "num_preemptions_total"), 0);
  }

  ServerOptions o = test_options();
  o.loop.engine.forward.kv_memory = uint64_t{512} << 10;
  o.loop.prefix_caching = false;  // every recomputation runs whole
  const auto server = start_server(o);
  const uint16_t port = server->port();
  ASSERT_EQ(server->loop().stats().kv_blocks_total.load(), 8);
  std::vector<Json> crowded(requests.size());
  std::vector<std::future<void>> clients;
  for (size_t i = 0; i < requests.size(); ++i)
    clients.push_back(std::async(std::launch::async, [&, i] { crowded[i] = answer(port, requests[i]); }));
  for (auto& client : clients) client.get();

  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(crowded[i], alone[i]) << "request " << i;
    EXPECT_EQ(crowded[i]["usage"]["completion_tokens"], 100) << "request " << i;
  }
  EXPECT_GE(metric(port, "num_preemptions_total"), 1);
  EXPECT_EQ(metric(port, "request_failure_total"), 0);
  const std::string metrics = get(port, "/metrics").body;
  EXPECT_EQ(metric_value(metrics, "http_requests_total{code=\"503\"}"), 0) << metrics;
  EXPECT_EQ(metric_value(metrics, "request_rejected_total"), 0) << metrics;
  const LoopStats& stats = server->loop().stats();
  EXPECT_TRUE(eventually([&] { return stats.kv_blocks_free.load() == stats.kv_blocks_total.load(); }));
}

// A request the whole pool cannot hold (its prompt, or its prompt and the
// max_tokens it asks for) is refused at once with a 400 naming the counts, as
// one past the model's context is: it never enters the queue (no queue time, no
// failure in the engine), so it neither waits for the pool nor ends early with
// "length". Without max_tokens it runs, ending at the pool ("length").
TEST(KvExhaustionTest, ARequestThePoolCannotHoldIsRefusedAtOnce) {
  ServerOptions o = test_options();
  o.loop.engine.forward.kv_memory = uint64_t{256} << 10;  // 4 blocks: 128 positions
  const auto server = start_server(o);
  const uint16_t port = server->port();
  ASSERT_EQ(server->loop().max_positions(), 128);
  const HttpReply too_long =
      post(port, "/v1/completions", Json{{"prompt", ids(20, 5)}, {"max_tokens", 500}, {"ignore_eos", true}}.dump());
  EXPECT_EQ(too_long.status, 400) << too_long.body;
  const Json error = Json::parse(too_long.body)["error"];
  EXPECT_EQ(error["param"], "max_tokens") << too_long.body;
  EXPECT_EQ(error["code"], "context_length_exceeded") << too_long.body;
  EXPECT_EQ(error["message"],
            "the prompt's 20 tokens and max_tokens 500 need 519 positions; the KV pool holds 128 "
            "(--kv-memory)");
  const HttpReply too_big = post(port, "/v1/completions", Json{{"prompt", ids(130, 5)}, {"max_tokens", 1}}.dump());
  EXPECT_EQ(too_big.status, 400) << too_big.body;
  EXPECT_EQ(Json::parse(too_big.body)["error"]["param"], "prompt") << too_big.body;
  const std::string metrics = get(port, "/metrics").body;
  EXPECT_EQ(metric_value(metrics, "request_queue_time_seconds_count"), 0) << metrics;
  EXPECT_EQ(metric_value(metrics, "request_failure_total"), 0) << metrics;

  // Exactly the pool: 20 + 109 - 1 = 128 positions. Without max_tokens: as far as the pool goes.
  const Json fits = answer(port, {{"prompt", ids(20, 5)}, {"max_tokens", 109}, {"ignore_eos", true}});
  ASSERT_TRUE(fits.is_object());
  EXPECT_EQ(fits["usage"]["completion_tokens"], 109);
  const HttpReply chat =
      post(port, "/v1/chat/completions",
           Json{{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"ignore_eos", true}}.dump());
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(chat.json()["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(chat.json()["usage"]["prompt_tokens"].get<int>() + chat.json()["usage"]["completion_tokens"].get<int>(),
            129);  // the last token needs no position
}

// Requests held for KV blocks count as waiting in /metrics, not running, as in
// vLLM: two requests that each grow to the whole pool start together; the
// newer is preempted when the older needs its blocks, and until the older ends
// /metrics shows one running and one waiting.
TEST(KvExhaustionTest, PreemptedRequestsCountAsWaiting) {
  ServerOptions o = test_options();
  o.loop.engine.forward.kv_memory = uint64_t{512} << 10;  // 8 blocks: 256 positions
  o.loop.prefix_caching = false;
  const auto server = start_server(o);
  const uint16_t port = server->port();
  std::vector<std::future<Json>> clients;
  for (int i = 0; i < 2; ++i) {
    const Json r = {{"prompt", ids(20, 11 * i + 3)}, {"max_tokens", 230}, {"ignore_eos", true}};
    clients.push_back(std::async(std::launch::async, [port, r] { return answer(port, r); }));
  }
  bool held_seen = false;
  const auto done = [](std::future<Json>& f) {
    return f.wait_for(std::chrono::milliseconds(2)) == std::future_status::ready;
  };
  while (!done(clients[0]) || !done(clients[1])) {
    const std::string metrics = get(port, "/metrics").body;
    if (metric_value(metrics, "num_preemptions_total") >= 1 && metric_value(metrics, "num_requests_running") == 1 &&
        metric_value(metrics, "num_requests_waiting") == 1)
      held_seen = true;
  }
  for (auto& client : clients) EXPECT_EQ(client.get()["usage"]["completion_tokens"], 230);
  EXPECT_GE(metric(port, "num_preemptions_total"), 1);
  EXPECT_TRUE(held_seen) << "no /metrics showed the preempted request waiting";
  const LoopStats& stats = server->loop().stats();
  EXPECT_TRUE(eventually([&] { return stats.running.load() == 0 && stats.waiting.load() == 0; }));
}

}  // namespace
}  // namespace tessera::serve
