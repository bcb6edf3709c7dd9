// The pipeline as separate processes: `tessera stage` workers and a `tessera
// generate --pipeline` coordinator, each in its own network namespace when run
// as root (loopback otherwise). The pipeline's logits and greedy tokens must be
// bitwise those of one process, for every fixture model and the shipped model;
// failures must reach the coordinator at once.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "io/gguf.h"
#include "model/fixtures.h"
#include "support/pipeline_cluster.h"
#include "support/run_tessera.h"

namespace {

using tessera::test::PipelineCluster;
using tessera::testing::ids_line;
using tessera::testing::run_tessera;
using tessera::testing::slurp;

TEST(PipelineProcesses, LogitsAndGreedyTokensAreBitwiseThoseOfOneProcess) {
  PipelineCluster pipeline;
  std::cout << (pipeline.cluster().in_namespaces() ? "stages in network namespaces\n" : "stages on loopback\n");
  const std::string prompt = "--prompt-ids 1,5,9,2,7,3";
  for (const std::string& name : tessera::testing::fixture_names()) {
    const std::string dir = tessera::testing::fixture_dir(name);
    std::ifstream config_file(dir + "/config.json");
    const nlohmann::json config = nlohmann::json::parse(config_file);
    const int layers = config.contains("num_hidden_layers") ? config["num_hidden_layers"].get<int>()
                                                            : config["text_config"]["num_hidden_layers"].get<int>();
    const auto reference_npy = std::filesystem::path(::testing::TempDir()) / ("pipeline_ref_" + name + ".npy");
    const auto local = run_tessera("generate --model " + dir + " " + prompt + " -n 6 --threads 1 --logits-out " +
                                   reference_npy.string());
    ASSERT_EQ(local.exit_code, 0) << local.err;
    std::vector<std::vector<int>> splits = {{0, layers / 2, layers}};
    if (layers >= 3) splits.push_back({0, 1, layers - 1, layers});
    for (const auto& cuts : splits) {
      SCOPED_TRACE(name + " in " + std::to_string(cuts.size() - 1) + " stages");
      const auto npy = pipeline.cluster().dir() / ("logits_" + name + std::to_string(cuts.size()) + ".npy");
      const auto run =
          pipeline.coordinate({"--model", dir, "--prompt-ids", "1,5,9,2,7,3", "-n", "6", "--logits-out", npy.string()},
                              pipeline.plan(dir, cuts));
      ASSERT_EQ(run.exit_code, 0) << run.err;
      EXPECT_EQ(ids_line(run.out), ids_line(local.out));
      EXPECT_FALSE(ids_line(local.out).empty());
      const std::string expected = slurp(reference_npy), got = slurp(npy);
      EXPECT_FALSE(expected.empty());
      EXPECT_TRUE(got == expected) << "logits differ from one process";
    }
  }
}

// The shipped model's sampled text through 3 stages equals one process's: the
// last stage samples with the parameters and seed the coordinator sent it (and
// the prompt, for the repetition penalty), and each stage's KV cache is bf16.
TEST(PipelineProcesses, ShippedModelSampledTextMatchesOneProcess) {
  PipelineCluster pipeline;
  const std::string dir = tessera::testing::fixture_dir(tessera::testing::kShippedModel);
  const std::string sampling = "--temperature 0.8 --top-k 40 --seed 7 --repetition-penalty 1.2 --frequency-penalty 0.3";
  const auto local =
      run_tessera("generate --model " + dir + " --prompt \"It is a truth\" -n 40 --threads 1 " + sampling);
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const auto run =
      pipeline.coordinate({"--model", dir, "--prompt", "It is a truth", "-n", "40", "--temperature", "0.8", "--top-k",
                           "40", "--seed", "7", "--repetition-penalty", "1.2", "--frequency-penalty", "0.3"},
                          pipeline.plan(dir, {0, 1, 3, 4}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::string text = local.out.substr(0, local.out.find('\n'));
  ASSERT_FALSE(text.empty());
  EXPECT_NE(run.out.find(text), std::string::npos) << run.out << "\nvs\n" << local.out;
  // Every stage keeps the checkpoint's own (bf16) KV cache by default, as one process does.
  EXPECT_NE(local.err.find("KV cache bf16"), std::string::npos) << local.err;
  for (int node = 1; node <= tessera::test::kStages; ++node) {
    const std::string log = slurp(pipeline.cluster().dir() / ("stage" + std::to_string(node) + ".log"));
    EXPECT_NE(log.find("KV cache bf16"), std::string::npos) << log;
  }
}

// --plain (trusted links): still mutual TLS to set up, frames on plain TCP
// connections bound by sealed hellos; the logits stay bitwise those of one process.
TEST(PipelineProcesses, PlainLinksGiveTheSameLogits) {
  PipelineCluster pipeline;
  const std::string dir = tessera::testing::fixture_dir(tessera::testing::kShippedModel);
  const auto reference = std::filesystem::path(::testing::TempDir()) / "pipeline_plain_ref.npy";
  const auto local = run_tessera("generate --model " + dir + " --prompt-ids 5,6,7 -n 5 --threads 1 --logits-out " +
                                 reference.string());
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const auto npy = pipeline.cluster().dir() / "plain.npy";
  const auto run =
      pipeline.coordinate({"--model", dir, "--prompt-ids", "5,6,7", "-n", "5", "--logits-out", npy.string(), "--plain"},
                          pipeline.plan(dir, {0, 1, 3, 4}));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(ids_line(run.out), ids_line(local.out));
  EXPECT_TRUE(slurp(npy) == slurp(reference));
  // Text too, sampled on the last stage over plain links.
  const auto text =
      pipeline.coordinate({"--model", dir, "--prompt", "It is", "-n", "8", "--plain"}, pipeline.plan(dir, {0, 2, 4}));
  EXPECT_EQ(text.exit_code, 0) << text.err;
}

// --ship-weights: stages read no checkpoint; the coordinator sends their layers.
// Unquantized, the logits stay bitwise those of one process; int8 + LZ4 runs too.
TEST(PipelineProcesses, ShippedWeightsGiveTheSameLogits) {
  PipelineCluster pipeline;
  const std::string dir = tessera::testing::fixture_dir(tessera::testing::kShippedModel);
  const auto reference = std::filesystem::path(::testing::TempDir()) / "pipeline_ship_ref.npy";
  const auto local = run_tessera("generate --model " + dir + " --prompt-ids 5,6,7 -n 5 --threads 1 --logits-out " +
                                 reference.string());
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const std::string plan = pipeline.plan("/nonexistent", {0, 1, 3, 4});  // stage paths unused when shipping
  const auto npy = pipeline.cluster().dir() / "ship.npy";
  const auto run = pipeline.coordinate(
      {"--model", dir, "--prompt-ids", "5,6,7", "-n", "5", "--logits-out", npy.string(), "--ship-weights", "none"},
      plan);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(ids_line(run.out), ids_line(local.out));
  EXPECT_TRUE(slurp(npy) == slurp(reference));
  const auto quantized =
      pipeline.coordinate({"--model", dir, "--prompt", "It is", "-n", "8", "--ship-weights", "int8+lz4"}, plan);
  EXPECT_EQ(quantized.exit_code, 0) << quantized.err;
}

// The bytes of `file`'s tensors that a stage of layers [begin, end) of `layers`
// holds: its blocks, the embedding on the first stage, the final norm and the
// LM head on the last.
uint64_t gguf_stage_bytes(const std::string& file, int begin, int end, int layers) {
  auto gguf = tessera::GgufFile::open(file);
  EXPECT_TRUE(gguf.ok()) << gguf.status().to_string();
  if (!gguf.ok()) return 0;
  uint64_t bytes = 0;
  for (const tessera::GgufTensorInfo& t : gguf->header().tensors) {
    const std::string name(t.name);
    bool mine = (begin == 0 && name == "token_embd.weight") ||
                (end == layers && (name == "output_norm.weight" || name == "output.weight"));
    for (int layer = begin; layer < end; ++layer) mine |= name.starts_with("blk." + std::to_string(layer) + ".");
    if (mine) bytes += t.nbytes;
  }
  return bytes;
}

// What the stage's last "[stage NAME] weights: N bytes" line says it holds.
uint64_t logged_weight_bytes(const std::string& log) {
  const size_t at = log.rfind("] weights: ");
  return at == std::string::npos ? 0 : std::stoull(log.substr(at + 11));
}

// --ship-weights from a GGUF (issue 19, point 7): each stage is shipped its
// layers in the file's own blocks (Q4_K_M: q4_k and q6_k matrices beside f32
// norms; Q8_0) and computes on them as they are, so it holds the file's bytes
// of its tensors, not a widened copy; the greedy tokens and the logits are
// bitwise one process's on the same file. INT8/INT4 would re-encode the blocks:
// refused, naming why.
TEST(PipelineProcesses, ShippedGgufBlocksGiveOneProcesssLogits) {
  PipelineCluster pipeline;
  const std::string plan = pipeline.plan("/nonexistent", {0, 1, 2});  // 2 stages of llama256's 2 layers
  for (const std::string name : {"llama256_f16_q4_k_m", "llama256_f16_q8_0"}) {
    SCOPED_TRACE(name);
    const std::string file = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/gguf/models/" + name + ".gguf";
    const auto reference = std::filesystem::path(::testing::TempDir()) / ("pipeline_gguf_ref_" + name + ".npy");
    const auto local = run_tessera("generate --model " + file + " --prompt-ids 5,6,7,9 -n 6 --threads 1 --logits-out " +
                                   reference.string());
    ASSERT_EQ(local.exit_code, 0) << local.err;
    const auto npy = pipeline.cluster().dir() / ("gguf_" + name + ".npy");
    const auto run = pipeline.coordinate(
        {"--model", file, "--prompt-ids", "5,6,7,9", "-n", "6", "--logits-out", npy.string(), "--ship-weights", "lz4"},
        plan);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_FALSE(ids_line(local.out).empty());
    EXPECT_EQ(ids_line(run.out), ids_line(local.out));
    const std::string expected = slurp(reference);
    EXPECT_FALSE(expected.empty());
    EXPECT_TRUE(slurp(npy) == expected) << "logits differ from one process";
    for (int node = 1; node <= 2; ++node) {
      const uint64_t blocks = gguf_stage_bytes(file, node - 1, node, 2);
      EXPECT_GT(blocks, 0u);
      EXPECT_EQ(logged_weight_bytes(slurp(pipeline.cluster().dir() / ("stage" + std::to_string(node) + ".log"))),
                blocks)
          << "stage " << node;
    }
  }
  const std::string q4_k_m = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/gguf/models/llama256_f16_q4_k_m.gguf";
  const auto int8 =
      pipeline.coordinate({"--model", q4_k_m, "--prompt-ids", "5,6", "-n", "2", "--ship-weights", "int8+lz4"}, plan);
  EXPECT_NE(int8.exit_code, 0);
  EXPECT_NE(int8.err.find("holds GGUF quantized blocks, which ship as they are: use none or lz4"), std::string::npos)
      << int8.err;
}

// A plan without layer ranges: the coordinator asks each stage for its free
// memory and splits the layers in proportion (equal machines here: 2 and 2).
TEST(PipelineProcesses, SplitsLayersByFreeMemoryWhenThePlanGivesNone) {
  PipelineCluster pipeline;
  const std::string dir = tessera::testing::fixture_dir(tessera::testing::kShippedModel);
  const auto path = pipeline.cluster().dir() / "auto.json";
  std::ofstream(path) << nlohmann::json{{"stages",
                                         {{{"name", pipeline.cluster().name(1)}, {"model", dir}},
                                          {{"name", pipeline.cluster().name(2)}, {"model", dir}}}}}
                             .dump();
  const auto local = run_tessera("generate --model " + dir + " --prompt \"It is a truth\" -n 12 --threads 1");
  const auto run = pipeline.coordinate({"--model", dir, "--prompt", "It is a truth", "-n", "12"}, path.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.err.find("layers [0, 2)"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("layers [2, 4)"), std::string::npos) << run.err;
  EXPECT_NE(run.out.find(local.out.substr(0, local.out.find('\n'))), std::string::npos);
}

// kill -9 of the middle stage while the coordinator streams text: the
// coordinator fails within a second, naming the stage; a restarted stage rejoins
// and the next generation works without restarting anything else.
// A stage whose copy of the checkpoint differs from the coordinator's (same
// shape and dtype, other weights) refuses the setup, naming the digests, and
// the coordinator exits 2 naming the stage instead of printing garbage. (With
// the digest check removed the run exits 0: checked.)
TEST(PipelineProcesses, AStageOnAnotherCheckpointOfTheSameShapeIsRefused) {
  PipelineCluster pipeline;
  const std::string dir = tessera::testing::fixture_dir("llama3_f32");
  const std::string other = (pipeline.cluster().dir() / "other_weights").string();
  const auto made =
      run_tessera("random-checkpoint --config " + dir + "/config.json --seed 7 --dtype f32 --out " + other);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  nlohmann::json stages = nlohmann::json::array();
  const int cuts[] = {0, 1, 2};
  for (int i = 0; i < 2; ++i)
    stages.push_back({{"name", pipeline.cluster().name(i + 1)},
                      {"model", i == 1 ? other : dir},
                      {"layers", {cuts[i], cuts[i + 1]}}});
  const auto plan = pipeline.cluster().dir() / "mixed_plan.json";
  std::ofstream(plan) << nlohmann::json{{"stages", stages}}.dump();
  const auto run = pipeline.coordinate({"--model", dir, "--prompt-ids", "1,5,9", "-n", "2"}, plan.string());
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_NE(run.err.find("not the coordinator's checkpoint"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find(pipeline.cluster().name(2)), std::string::npos) << run.err;
  // The same plan over the coordinator's own checkpoint runs.
  stages[1]["model"] = dir;
  std::ofstream(plan) << nlohmann::json{{"stages", stages}}.dump();
  const auto good = pipeline.coordinate({"--model", dir, "--prompt-ids", "1,5,9", "-n", "2"}, plan.string());
  EXPECT_EQ(good.exit_code, 0) << good.err;
}

TEST(PipelineProcesses, KilledMiddleStageFailsTheRequestAtOnceAndARestartRejoins) {
  PipelineCluster pipeline;
  const std::string dir = tessera::testing::fixture_dir(tessera::testing::kShippedModel);
  const std::string plan = pipeline.plan(dir, {0, 1, 3, 4});
  std::atomic<bool> finished{false};
  PipelineCluster::Run run{};
  std::chrono::steady_clock::time_point killed, ended;
  // EOS (id 1) is biased away, so the generation runs until the kill.
  std::thread coordinator([&] {
    run =
        pipeline.coordinate({"--model", dir, "--prompt", "It is", "-n", "2000", "--logit-bias", "1", "-100"}, plan, 60);
    ended = std::chrono::steady_clock::now();
    finished = true;
  });
  // Wait until text streams (the pipeline is set up and generating), then kill.
  const auto log = pipeline.cluster().dir() / "coordinator0";
  for (int i = 0; i < 3000 && !finished.load() && slurp(log).find("layers [3, 4)") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (finished.load()) {
    coordinator.join();
    FAIL() << "the generation ended before the kill:\n" << slurp(log);
  }
  killed = std::chrono::steady_clock::now();
  pipeline.kill_stage(2);
  // When the coordinator first names the dead stage (its failure seen), as against when it exits.
  double named_after = -1;
  while (!finished.load()) {
    if (named_after < 0 && slurp(log).find(pipeline.cluster().name(2)) != std::string::npos)
      named_after = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  coordinator.join();
  EXPECT_EQ(run.exit_code, 2) << run.err;
  // Named by the coordinator (its connection to node2 dropped) or by node3 (its
  // upstream, node2, vanished), whichever report comes first.
  EXPECT_NE(run.err.find(pipeline.cluster().name(2)), std::string::npos) << run.err;
  // On failure, what each process said (a rare 30 s here in CI, not yet explained: the coordinator's --timeout).
  std::string logs = "named node2 " + std::to_string(named_after) + " s after the kill; coordinator:\n" + run.err;
  for (int node = 1; node <= 3; ++node) {
    const std::string log = slurp(pipeline.cluster().dir() / ("stage" + std::to_string(node) + ".log"));
    logs +=
        "\nstage" + std::to_string(node) + ".log (its end):\n" + log.substr(log.size() > 3000 ? log.size() - 3000 : 0);
  }
  EXPECT_LT(std::chrono::duration<double>(ended - killed).count(), 1.0) << logs;
  // The surviving stages released the request's KV cache (their session ended).
  for (int node : {1, 3}) {
    PipelineCluster::Run status{};
    for (int attempt = 0; attempt < 20; ++attempt) {  // the session ends as the coordinator's connection closes
      status = pipeline.run_as_coordinator({"probe", "--stage", pipeline.cluster().name(node)});
      if (status.out.find("\"requests\":0") != std::string::npos) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(status.exit_code, 0) << status.out;
    EXPECT_NE(status.out.find("\"requests\":0"), std::string::npos) << status.out;
  }
  pipeline.start_stage(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto again = pipeline.coordinate({"--model", dir, "--prompt", "It is", "-n", "8"}, plan);
  EXPECT_EQ(again.exit_code, 0) << again.err;
}

}  // namespace

// Liveness without false alarms: a prefill that takes several times every
// timeout (a 3-layer model of width 512, a 2,000-token prompt, one thread per
// stage) completes, because the stages heartbeat while they compute, and gives
// the ids of one process. With the coordinator's old fixed wait for an answer
// (--timeout) the run failed after 1 s: checked.
TEST(PipelineProcesses, APrefillLongerThanEveryTimeoutCompletesWhileTheStagesHeartbeat) {
  PipelineCluster pipeline;
  const auto dir = pipeline.cluster().dir() / "wide";
  const auto config = pipeline.cluster().dir() / "wide_config.json";
  std::ofstream(config) << nlohmann::json{
      {"model_type", "llama"},
      {"architectures", {"LlamaForCausalLM"}},
      {"hidden_size", 512},
      {"intermediate_size", 2048},
      {"num_hidden_layers", 3},
      {"num_attention_heads", 8},
      {"num_key_value_heads", 8},
      {"vocab_size", 1000},
      {"max_position_embeddings", 4096},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", 10000.0},
      {"tie_word_embeddings",
       false}}.dump();
  const auto made =
      run_tessera("random-checkpoint --config " + config.string() + " --seed 3 --dtype f32 --out " + dir.string());
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::string prompt;
  for (int i = 0; i < 2000; ++i) prompt += (i ? "," : "") + std::to_string(1 + i * 7 % 997);
  const std::vector<std::string> args = {"--model", dir.string(), "--prompt-ids", prompt, "-n", "2", "--threads", "1"};
  const auto local = run_tessera("generate --model " + dir.string() + " --prompt-ids " + prompt + " -n 2 --threads 1");
  ASSERT_EQ(local.exit_code, 0) << local.err;
  std::vector<std::string> pipelined = args;
  for (const char* flag : {"--timeout", "1", "--heartbeat-timeout", "1"}) pipelined.push_back(flag);
  const auto started = std::chrono::steady_clock::now();
  const auto run = pipeline.coordinate(pipelined, pipeline.plan(dir.string(), {0, 1, 2, 3}));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::cout << "the pipelined run took " << seconds << " s\n";
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(ids_line(run.out), ids_line(local.out));
}
