// Chaos, with every node a process (tests/support/pipeline_cluster.h): each
// stage of a 3-stage pipeline is killed (SIGKILL) or frozen (SIGSTOP) at a
// random point of a running generation's decode. Expected, for every stage and
// both signals, with the default timeouts:
//   - the run fails with exit code 2, naming the stage: at once for a killed
//     stage (its connections drop), within --heartbeat-timeout (3 s) for a frozen
//     one (its heartbeats stop; before heartbeats, after the fixed 30 s wait);
//   - the stage restarted (or continued) serves the next run with the ids of a
//     run that nothing disturbed.
// The random delays come from a seed printed in the output; TESSERA_CHAOS_SEED
// replays one.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>

#include "model/fixtures.h"
#include "support/pipeline_cluster.h"

namespace {

using tessera::test::ids_line;
using tessera::test::kStages;
using tessera::test::PipelineCluster;
using tessera::testing::slurp;
using Clock = std::chrono::steady_clock;

constexpr double kHeartbeatTimeoutS = 3;  // the default --heartbeat-timeout
constexpr double kSlackS = 2;             // process exit and a loaded CI machine

uint64_t chaos_seed() {
  if (const char* seed = std::getenv("TESSERA_CHAOS_SEED")) return std::strtoull(seed, nullptr, 10);
  return std::random_device{}();
}

TEST(PipelineChaos, EachStageKilledOrFrozenAtARandomPointFailsTheRunInTimeAndTheNextRunMatches) {
  PipelineCluster pipeline;
  const std::string dir = tessera::testing::fixture_dir(tessera::testing::kShippedModel);
  const std::string plan = pipeline.plan(dir, {0, 1, 3, 4});
  auto short_run = [&] { return pipeline.coordinate({"--model", dir, "--prompt-ids", "1,5,9", "-n", "8"}, plan); };
  const PipelineCluster::Run reference = short_run();
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  ASSERT_FALSE(ids_line(reference.out).empty()) << reference.out;

  const uint64_t seed = chaos_seed();
  std::cout << "TESSERA_CHAOS_SEED=" << seed << "\n";
  std::mt19937_64 random(seed);
  for (int node = 1; node <= kStages; ++node) {
    for (const int signal : {SIGKILL, SIGSTOP}) {
      const auto delay = std::chrono::milliseconds(std::uniform_int_distribution<int>(0, 800)(random));
      SCOPED_TRACE("node" + std::to_string(node) + (signal == SIGKILL ? " SIGKILL" : " SIGSTOP") + " after " +
                   std::to_string(delay.count()) + " ms");
      const auto log = pipeline.next_coordinator_log();
      std::atomic<bool> finished{false};
      PipelineCluster::Run run{};
      Clock::time_point ended;
      std::thread coordinator([&] {  // EOS (id 1) is biased away: it decodes for longer than the longest delay
        run = pipeline.coordinate({"--model", dir, "--prompt-ids", "1,5,9", "-n", "2000", "--logit-bias", "1", "-100"},
                                  plan, 60);
        ended = Clock::now();
        finished = true;
      });
      // The pipeline is set up once the coordinator prints its layout.
      for (int i = 0; i < 3000 && !finished.load() && slurp(log).find("layers [3, 4)") == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      std::this_thread::sleep_for(delay);
      if (finished.load()) {
        coordinator.join();
        FAIL() << "the generation ended before the signal:\n" << slurp(log);
      }
      const Clock::time_point signalled = Clock::now();
      pipeline.signal_stage(node, signal);
      coordinator.join();
      const double seconds = std::chrono::duration<double>(ended - signalled).count();
      std::cout << "node" << node << (signal == SIGKILL ? " SIGKILL" : " SIGSTOP") << " after " << delay.count()
                << " ms: the run failed " << seconds << " s later\n";
      EXPECT_EQ(run.exit_code, 2) << slurp(log);
      EXPECT_NE(run.err.find("node" + std::to_string(node)), std::string::npos) << run.err;  // the stage is named
      EXPECT_LT(seconds, (signal == SIGKILL ? 0 : kHeartbeatTimeoutS) + kSlackS) << slurp(log);
      if (signal == SIGKILL) {
        pipeline.wait_stage(node);
        pipeline.start_stage(node);
      } else {
        pipeline.signal_stage(node, SIGCONT);
      }
      const PipelineCluster::Run again = short_run();
      EXPECT_EQ(again.exit_code, 0) << again.err;
      EXPECT_EQ(ids_line(again.out), ids_line(reference.out)) << again.err;
    }
  }
}

// KV exhaustion: with a 1 MiB KV budget per stage (16 blocks of 32 positions on
// the stage of two layers), a 600-token prompt cannot get its blocks: that run
// fails at once with `overloaded` naming --kv-memory, every stage stays up, and
// the next run is served with the ids of one process.
TEST(PipelineChaos, KvExhaustionFailsTheRequestThatDoesNotFitAndTheNextRunIsServed) {
  PipelineCluster pipeline({"--kv-memory", "1MiB"});
  const std::string dir = tessera::testing::fixture_dir(tessera::testing::kShippedModel);
  const std::string plan = pipeline.plan(dir, {0, 1, 3, 4});
  std::string long_prompt;
  for (int i = 0; i < 600; ++i) long_prompt += (i ? "," : "") + std::to_string(2 + i % 5000);
  const auto too_long = pipeline.coordinate({"--model", dir, "--prompt-ids", long_prompt, "-n", "2"}, plan);
  EXPECT_EQ(too_long.exit_code, 2) << too_long.err;
  EXPECT_NE(too_long.err.find("KV cache is full"), std::string::npos) << too_long.err;
  EXPECT_NE(too_long.err.find("--kv-memory"), std::string::npos) << too_long.err;
  const auto local = tessera::testing::run_tessera("generate --model " + dir + " --prompt-ids 1,5,9 -n 8 --threads 1");
  const auto fits = pipeline.coordinate({"--model", dir, "--prompt-ids", "1,5,9", "-n", "8"}, plan);
  EXPECT_EQ(fits.exit_code, 0) << fits.err;
  EXPECT_EQ(ids_line(fits.out), ids_line(local.out));
  EXPECT_FALSE(ids_line(local.out).empty());
}

}  // namespace
