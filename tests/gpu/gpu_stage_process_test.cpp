// Mixed hardware as processes: `tessera stage --device cuda` beside CPU stages,
// each in its own network namespace when run as root (loopback otherwise),
// driven by `tessera generate --pipeline` (issue 16, point 7). A GPU stage serves
// the same protocol as a CPU stage, as the last stage or in the middle; the
// pipeline's greedy tokens are one CPU process's on the fixtures. Skips, saying
// so, without a GPU.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "model/fixtures.h"
#include "support/pipeline_cluster.h"
#include "support/run_tessera.h"

namespace {

using tessera::test::PipelineCluster;
using tessera::testing::ids_line;
using tessera::testing::run_tessera;

TEST(GpuStageProcesses, AGpuStageBesideCpuStagesGivesTheGreedyTokensOfOneProcess) {
  // Whether this build and machine have a GPU, asked of tessera itself.
  const auto probe = run_tessera("generate --device cuda --model " + tessera::testing::fixture_dir("llama3_f32") +
                                 " --prompt-ids 1 -n 1 --threads 1");
  if (probe.exit_code != 0) GTEST_SKIP() << "needs a GPU: " << probe.err;
  // Node 2 (the second stage of two, the middle of three) runs on the GPU.
  PipelineCluster pipeline({}, [](int node) {
    return node == 2 ? std::vector<std::string>{"--device", "cuda"} : std::vector<std::string>{};
  });
  std::cout << (pipeline.cluster().in_namespaces() ? "stages in network namespaces\n" : "stages on loopback\n");
  for (const std::string name : {"llama3_f32", "llama3_bf16", "qwen3_moe_bf16", "gemma3_f32"}) {
    const std::string dir = tessera::testing::fixture_dir(name);
    std::ifstream config_file(dir + "/config.json");
    const nlohmann::json config = nlohmann::json::parse(config_file);
    const int layers = config.contains("num_hidden_layers") ? config["num_hidden_layers"].get<int>()
                                                            : config["text_config"]["num_hidden_layers"].get<int>();
    const auto local = run_tessera("generate --model " + dir + " --prompt-ids 1,5,9,2,7,3 -n 6 --threads 1");
    ASSERT_EQ(local.exit_code, 0) << local.err;
    ASSERT_FALSE(ids_line(local.out).empty());
    for (const std::vector<int>& cuts : {std::vector<int>{0, layers / 2, layers}, {0, 1, layers - 1, layers}}) {
      if (cuts.size() == 4 && layers < 3) continue;
      SCOPED_TRACE(name + " in " + std::to_string(cuts.size() - 1) + " stages, the second on the GPU");
      const auto run =
          pipeline.coordinate({"--model", dir, "--prompt-ids", "1,5,9,2,7,3", "-n", "6"}, pipeline.plan(dir, cuts));
      ASSERT_EQ(run.exit_code, 0) << run.err;
      EXPECT_EQ(ids_line(run.out), ids_line(local.out));
    }
  }
}

}  // namespace
