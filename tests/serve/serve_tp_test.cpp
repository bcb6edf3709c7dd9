// `tessera serve --tp` as real processes: the server is rank 0 of a 2-rank
// tensor-parallel group, `tessera rank` rank 1, each in its own network
// namespace when run as root (loopback otherwise; tests/support/cluster.h), and
// curl the client in the server's namespace. A chat request (greedy) gets the answer
// of one process's server, and a seeded completion with logprobs beside it the answer
// it got alone (the o and down projections sum in another order over ranks than in one
// process, docs/distributed.md, which moves a sampled token now and then); a
// rank killed mid-answer reaches a streaming and a whole client in under a
// second (an SSE error event; a 503); once the rank is back the next request
// forms the group anew and gets the same answer; SIGTERM ends it with exit 0.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "net/local_cluster.h"
#include "serve/http_client.h"
#include "serve/serve_process.h"
#include "serve/test_server.h"
#include "support/cluster.h"
#include "support/run_tessera.h"

namespace tessera::serve {
namespace {

using Json = nlohmann::json;
using tessera::test::Cluster;
using testing::kCurl;
using testing::ServeProcess;
using testing::slurp;
using Clock = std::chrono::steady_clock;

// Rank 1 on node 1 (tessera rank), until killed.
int start_rank(Cluster& cluster) {
  return cluster.spawn(1,
                       {TESSERA_BINARY, "rank", "--model", kModel, "--members", cluster.members(), "--identity",
                        cluster.identity(1).string(), "--trust", cluster.trust_file().string(), "--threads", "1"},
                       cluster.dir() / "rank1.log");
}

std::vector<std::string> serve_args(Cluster& cluster) {
  return {"--model",
          kModel,
          "--tp",
          cluster.members(),
          "--identity",
          cluster.identity(0).string(),
          "--trust",
          cluster.trust_file().string(),
          "--threads",
          "1",
          "--kv-memory",
          "16MiB",
          "--shutdown-timeout",
          "5"};
}

const Json kChat = {{"messages", {{{"role", "user"}, {"content", "Tell me a story about a cat."}}}},
                    {"max_tokens", 12}};
const Json kSeeded = {{"prompt", "Once upon a time"},
                      {"max_tokens", 16},
                      {"temperature", 0.8},
                      {"top_k", 40},
                      {"seed", 7},
                      {"logprobs", 2}};

TEST(ServeTpTest, AnswersAsOneProcessAKilledRankReachesTheClientsAndTheGroupFormsAnew) {
  if (access(kCurl, X_OK) != 0) GTEST_SKIP() << "needs curl, as the client in the server's network namespace";
  // One process's greedy answer: the in-process server over the whole model.
  Json chat_expected;
  {
    const auto local = start_server(test_options());
    const tessera::testing::HttpReply chat =
        tessera::testing::post(local->port(), "/v1/chat/completions", kChat.dump());
    ASSERT_EQ(chat.status, 200) << chat.body;
    chat_expected = chat.json()["choices"][0];
  }

  Cluster cluster(2);
  std::cout << (cluster.in_namespaces() ? "in network namespaces\n" : "on loopback\n");
  int rank = start_rank(cluster);
  // Node 0's address in the trust file is rank 0's, for the group: HTTP on another port.
  const std::string host = cluster.address(0).substr(0, cluster.address(0).rfind(':'));
  const uint16_t port = cluster.in_namespaces() ? 8000 : *net::free_loopback_port();
  ServeProcess server(cluster, serve_args(cluster), host + ":" + std::to_string(port));
  ASSERT_TRUE(server.wait_ready()) << server.log();
  EXPECT_NE(server.log().find("rank 0 of 2 (sealed)"), std::string::npos) << server.log();

  // The seeded completion alone, then both at once: the chat's greedy text is one process's,
  // the seeded completion's text and logprobs those it got alone.
  const ServeProcess::Reply alone = server.finish(server.start("/v1/completions", kSeeded.dump()));
  ASSERT_EQ(alone.status, 200) << alone.body << server.log();
  const Json seeded_expected = Json::parse(alone.body)["choices"][0];
  const int chat = server.start("/v1/chat/completions", kChat.dump());
  const int seeded = server.start("/v1/completions", kSeeded.dump());
  const ServeProcess::Reply chat_reply = server.finish(chat), seeded_reply = server.finish(seeded);
  ASSERT_EQ(chat_reply.status, 200) << chat_reply.body << server.log();
  ASSERT_EQ(seeded_reply.status, 200) << seeded_reply.body << server.log();
  EXPECT_EQ(Json::parse(chat_reply.body)["choices"][0]["message"]["content"], chat_expected["message"]["content"]);
  const Json seeded_choice = Json::parse(seeded_reply.body)["choices"][0];
  EXPECT_EQ(seeded_choice["text"], seeded_expected["text"]);
  EXPECT_EQ(seeded_choice["logprobs"]["tokens"], seeded_expected["logprobs"]["tokens"]);

  // Rank 1 dies while a streamed and a whole answer run: both clients hear within a second.
  const auto [stream, whole] = server.start_endless_answers();
  cluster.kill(rank, SIGKILL);
  const auto killed = Clock::now();
  const ServeProcess::Reply stream_reply = server.finish(stream, std::chrono::seconds(10));
  const ServeProcess::Reply whole_reply = server.finish(whole, std::chrono::seconds(10));
  const double seconds = std::chrono::duration<double>(Clock::now() - killed).count();
  std::cout << "the clients heard of the dead rank after " << seconds << " s\n";
  EXPECT_LT(seconds, 1.0);
  EXPECT_EQ(stream_reply.status, 200);
  const std::vector<std::string> events = tessera::testing::sse_data(stream_reply.body);
  ASSERT_GE(events.size(), 2u) << stream_reply.body;
  EXPECT_EQ(events.back(), "[DONE]");
  const Json error = Json::parse(events[events.size() - 2]);
  ASSERT_TRUE(error.contains("error")) << stream_reply.body;
  EXPECT_NE(error["error"]["message"].get<std::string>().find("tensor-parallel group failed"), std::string::npos)
      << error.dump();
  EXPECT_EQ(whole_reply.status, 503) << whole_reply.body;
  EXPECT_NE(whole_reply.body.find("tensor-parallel group failed"), std::string::npos) << whole_reply.body;
  cluster.wait(rank, std::chrono::seconds(5));

  // The rank is back: the next request forms the group anew and gets one process's answer.
  rank = start_rank(cluster);
  const ServeProcess::Reply again = server.request("/v1/chat/completions", kChat.dump());
  ASSERT_EQ(again.status, 200) << again.body << server.log();
  EXPECT_EQ(Json::parse(again.body)["choices"][0]["message"]["content"], chat_expected["message"]["content"]);

  cluster.kill(server.process(), SIGTERM);
  EXPECT_EQ(cluster.wait(server.process(), std::chrono::seconds(20)), 0) << server.log();
  cluster.kill(rank, SIGKILL);
}

// The server leads as rank 0 only, and not beside --pipeline: refused with the reason.
TEST(ServeTpTest, ServeLeadsOnlyAsRankZeroAndNotBesideAPipeline) {
  Cluster cluster(2);
  const std::string common =
      "serve --model " + kModel + " --port 0 --tp " + cluster.members() + " --trust " + cluster.trust_file().string();
  tessera::testing::expect_refused(
      tessera::testing::run_tessera(common + " --identity " + cluster.identity(1).string()),
      {"--tp runs rank 0", "'node1' is rank 1"});
  tessera::testing::expect_refused(
      tessera::testing::run_tessera(common + " --identity " + cluster.identity(0).string() +
                                    " --pipeline /nonexistent.json"),
      {"--tp with --pipeline", "tessera stage --tp"});
}

}  // namespace
}  // namespace tessera::serve
