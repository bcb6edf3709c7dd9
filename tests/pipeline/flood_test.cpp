// Strangers cannot starve peers (issue 14, point 2), with every node a process:
// 1,000 connections from a host outside the pipeline (tests/pipeline/flood_main.cpp),
// half idle and half dripping a ClientHello a byte every 300 ms, reopened as the
// stages close them for the whole run, while 50 `tessera generate --pipeline` runs
// go through 3 stages. Every run succeeds with the ids of one process, and the
// stages' logs stay short: refusals are rate-limited.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "model/fixtures.h"
#include "support/cluster.h"
#include "support/pipeline_cluster.h"
#include "support/run_tessera.h"

namespace {

using tessera::test::Cluster;
using tessera::testing::ids_line;
using tessera::testing::run_tessera;
using tessera::testing::slurp;

constexpr int kStages = 3;          // nodes 1..3; node 0 coordinates
constexpr int kFloodNode = 4;       // a host of its own, never in the plan
constexpr int kRuns = 50;           // legitimate generations under the flood
constexpr int kConnections = 1000;  // the flood's connections, all open at once where the stages allow

std::string last_line_with(const std::string& text, const std::string& prefix) {
  std::istringstream in(text);
  std::string last;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(prefix)) last = line;
  }
  return last;
}

size_t count_lines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

TEST(FloodTest, FiftyRunsSucceedWhileAThousandStrangerConnectionsAreRenewed) {
  Cluster cluster(1 + kStages + 1);
  std::cout << (cluster.in_namespaces() ? "stages in network namespaces\n" : "stages on loopback\n");
  for (int node = 1; node <= kStages; ++node) {
    cluster.spawn(node,
                  {TESSERA_BINARY, "stage", "--listen", cluster.address(node), "--identity",
                   cluster.identity(node).string(), "--trust", cluster.trust_file().string(), "--threads", "1"},
                  cluster.dir() / ("stage" + std::to_string(node) + ".log"));
  }
  const std::string dir = tessera::testing::fixture_dir(tessera::testing::kShippedModel);
  nlohmann::json stages = nlohmann::json::array();
  const int cuts[] = {0, 1, 3, 4};
  for (int i = 0; i < kStages; ++i)
    stages.push_back({{"name", cluster.name(i + 1)}, {"model", dir}, {"layers", {cuts[i], cuts[i + 1]}}});
  const auto plan = cluster.dir() / "plan.json";
  std::ofstream(plan) << nlohmann::json{{"stages", stages}}.dump();
  const std::string prompt = "1,5,9,2";
  const auto local = run_tessera("generate --model " + dir + " --prompt-ids " + prompt + " -n 3 --threads 1");
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const std::string expected = ids_line(local.out);
  ASSERT_FALSE(expected.empty());

  // On loopback every node is 127.0.0.1, so the flood takes another address of 127/8.
  std::vector<std::string> flood = {
      TESSERA_FLOOD_BINARY, "--connections", std::to_string(kConnections), "--seconds", "600", "--drip-ms", "300"};
  if (!cluster.in_namespaces()) {
    flood.push_back("--source");
    flood.push_back("127.0.0.2");
  }
  for (int node = 1; node <= kStages; ++node) flood.push_back(cluster.address(node));
  const auto flood_log = cluster.dir() / "flood.log";
  const int flood_process = cluster.spawn(kFloodNode, flood, flood_log);
  // Let the flood take every place it can before the first run.
  for (int i = 0; i < 100 && last_line_with(slurp(flood_log), "open ").empty(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::this_thread::sleep_for(std::chrono::seconds(1));

  const auto start = std::chrono::steady_clock::now();
  int succeeded = 0;
  for (int run = 0; run < kRuns; ++run) {
    std::vector<std::string> argv = {TESSERA_BINARY, "generate",
                                     "--model",      dir,
                                     "--prompt-ids", prompt,
                                     "-n",           "3",
                                     "--threads",    "1",
                                     "--pipeline",   plan.string(),
                                     "--identity",   cluster.identity(0).string(),
                                     "--trust",      cluster.trust_file().string()};
    const auto log = cluster.dir() / ("coordinator" + std::to_string(run));
    const int code = cluster.wait(cluster.spawn(0, argv, log), std::chrono::seconds(60));
    const std::string out = slurp(log);
    EXPECT_EQ(code, 0) << "run " << run << ":\n" << out;
    EXPECT_EQ(ids_line(out), expected) << "run " << run << ":\n" << out;
    succeeded += code == 0 && ids_line(out) == expected;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string flood_counts = last_line_with(slurp(flood_log), "open ");
  std::cout << succeeded << " of " << kRuns << " runs in " << seconds << " s under the flood; flood: " << flood_counts
            << "\n";
  EXPECT_EQ(succeeded, kRuns);

  // The flood ran the whole time: still running, and it reopened what the stages closed.
  cluster.kill(flood_process, SIGTERM);
  EXPECT_EQ(cluster.wait(flood_process, std::chrono::seconds(5)), 0) << slurp(flood_log);
  unsigned long long open = 0, opened = 0, closed = 0, failed = 0;
  ASSERT_EQ(std::sscanf(last_line_with(slurp(flood_log), "open ").c_str(),
                        "open %llu opened %llu closed %llu failed %llu", &open, &opened, &closed, &failed),
            4)
      << slurp(flood_log);
  EXPECT_GT(opened, static_cast<unsigned long long>(kConnections)) << "the flood was never renewed";
  EXPECT_GT(closed, static_cast<unsigned long long>(kConnections) / 2);

  // Each stage logged its refusals, but at most about one line per second of each kind.
  for (int node = 1; node <= kStages; ++node) {
    const std::string log = slurp(cluster.dir() / ("stage" + std::to_string(node) + ".log"));
    EXPECT_NE(log.find("more like it"), std::string::npos) << "stage " << node << " logged no held-back refusals";
    EXPECT_LT(count_lines(log), static_cast<size_t>(5 * seconds) + 20) << "stage " << node << ":\n" << log;
    if (node == 1) std::cout << "stage 1 logged " << count_lines(log) << " lines:\n" << log.substr(0, 2000);
  }
}

// A stranger holds the only stranger slot of a stage (--max-unauthenticated 1)
// for its --handshake-timeout of 1 s: the coordinator's first connections are
// closed at once, and it retries with backoff until the slot frees. (Without
// the retry the run fails at its first refusal: checked.)
TEST(FloodTest, TheCoordinatorRetriesUntilAStrangersSlotFrees) {
  Cluster cluster(3);  // node 0 coordinates, node 1 is the stage, node 2 the stranger
  cluster.spawn(
      1,
      {TESSERA_BINARY, "stage", "--listen", cluster.address(1), "--identity", cluster.identity(1).string(), "--trust",
       cluster.trust_file().string(), "--threads", "1", "--max-unauthenticated", "1", "--handshake-timeout", "1"},
      cluster.dir() / "stage1.log");
  const std::string dir = tessera::testing::fixture_dir(tessera::testing::kShippedModel);
  const auto plan = cluster.dir() / "plan.json";
  std::ofstream(plan)
      << nlohmann::json{{"stages", {{{"name", cluster.name(1)}, {"model", dir}, {"layers", {0, 4}}}}}}.dump();
  // The stage is up once a probe answers.
  const auto probe_log = cluster.dir() / "probe";
  ASSERT_EQ(cluster.wait(cluster.spawn(0,
                                       {TESSERA_BINARY, "probe", "--stage", cluster.name(1), "--identity",
                                        cluster.identity(0).string(), "--trust", cluster.trust_file().string()},
                                       probe_log),
                         std::chrono::seconds(30)),
            0)
      << slurp(probe_log);
  std::vector<std::string> stranger = {TESSERA_FLOOD_BINARY, "--connections", "1", "--seconds", "30",
                                       "--reopen-ms",        "60000"};
  if (!cluster.in_namespaces()) {
    stranger.push_back("--source");
    stranger.push_back("127.0.0.2");
  }
  stranger.push_back(cluster.address(1));
  const auto stranger_log = cluster.dir() / "stranger.log";
  const int stranger_process = cluster.spawn(2, stranger, stranger_log);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // its connection is in
  const auto log = cluster.dir() / "coordinator";
  const auto start = std::chrono::steady_clock::now();
  const int code = cluster.wait(cluster.spawn(0,
                                              {TESSERA_BINARY, "generate", "--model", dir, "--prompt-ids", "1,5,9",
                                               "-n", "2", "--threads", "1", "--pipeline", plan.string(), "--identity",
                                               cluster.identity(0).string(), "--trust", cluster.trust_file().string()},
                                              log),
                                std::chrono::seconds(60));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(code, 0) << slurp(log) << "\nstage:\n" << slurp(cluster.dir() / "stage1.log");
  EXPECT_NE(slurp(log).find("retrying"), std::string::npos) << slurp(log);
  EXPECT_LT(seconds, 10.0);
  EXPECT_NE(slurp(cluster.dir() / "stage1.log").find("no handshake within"), std::string::npos);
  cluster.kill(stranger_process, SIGTERM);
}

}  // namespace
