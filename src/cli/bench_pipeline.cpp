// `tessera bench-pipeline`: a pipeline of N stages on this machine (StageService
// threads of this process, each with its own identity, threads and mutual-TLS
// loopback connections) against one process, in the same run:
//   - the decode step of one request, one process vs the pipeline, and the
//     latency each hop adds (hops = stages + 1: coordinator -> stage 0 -> ... ->
//     coordinator);
//   - decode tokens/s of R requests run one at a time vs all at once (the stages
//     work on different requests concurrently).
// Each round runs the three in turn (one process, the pipeline one request at a
// time, the pipeline all at once), so a change in the host's load falls on all
// of them alike; the figures are per round and their medians.
//   tessera bench-pipeline --model DIR --stages 2 --requests 4 --tokens 32 --threads 4 --rounds 3
#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "backend/device.h"
#include "cli/commands.h"
#include "engine/generation.h"
#include "engine/local_engine.h"
#include "engine/sequence_runner.h"
#include "model/model.h"
#include "net/local_cluster.h"
#include "pipeline/coordinator.h"
#include "pipeline/stage_service.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchPipelineOptions {
  std::string model_dir;
  int stages = 2;
  int requests = 4;
  int64_t tokens = 32;
  int64_t prompt_tokens = 16;
  size_t threads = 2;  // per stage, and for the one-process baseline
  int rounds = 3;
};

std::vector<int32_t> prompt(int64_t n, int seed) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>(1 + (i * 7 + seed * 13) % 200));
  return ids;
}

// Greedy decode of `tokens` steps after the prompt, through the one generation
// loop (a pipeline samples on its last stage, as `tessera generate` does);
// returns the seconds of the decode steps.
Result<double> decode(SequenceRunner& runner, int64_t vocab, const std::vector<int32_t>& ids, int64_t tokens) {
  GenerationRequest request;
  request.prompt = ids;
  request.max_tokens = tokens + 1;  // the prompt's token, then one per decode step
  TS_ASSIGN_OR_RETURN(const GenerationResult result, generate(runner, vocab, request, [](int32_t) { return true; }));
  return result.decode_seconds;
}

// Layer cuts that balance the stages' decode work, which is their weight bytes:
// every layer costs the same, and the last stage also runs the LM head (for a
// 1B Llama the head is as large as 4 layers). Minimizes the largest stage.
std::vector<int64_t> balanced_cuts(const ModelConfig& c, int stages) {
  const int64_t layers = c.num_hidden_layers;
  const double q = static_cast<double>(c.num_attention_heads * c.head_dim);
  const double kv = static_cast<double>(c.num_key_value_heads * c.head_dim);
  const double h = static_cast<double>(c.hidden_size);
  const double layer = h * (2 * q + 2 * kv) + 3 * h * static_cast<double>(c.intermediate_size);
  const double head = static_cast<double>(c.vocab_size) * h;
  std::vector<int64_t> cuts = {0};
  double remaining = static_cast<double>(layers) * layer + head;
  for (int s = 0; s < stages - 1; ++s) {
    const double target = remaining / (stages - s);
    const int64_t left = layers - (stages - s - 1);  // leave a layer for each later stage
    int64_t end = cuts.back() + 1;
    while (end < left && (end + 1 - cuts.back()) * layer <= target + layer / 2) ++end;
    remaining -= static_cast<double>(end - cuts.back()) * layer;
    cuts.push_back(end);
  }
  cuts.push_back(layers);
  return cuts;
}

Status bench_pipeline(const BenchPipelineOptions& o) {
  TS_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config_file(o.model_dir + "/config.json", check_model_type));
  const int64_t layers = config.num_hidden_layers;
  if (o.stages < 1 || o.stages > layers) return Status::invalid_input("--stages must be in [1, layers]");
  const int64_t context = o.prompt_tokens + o.tokens + 1;

  // One process, loaded once for every round; one engine (own threads) per
  // stage, for the side-by-side run below.
  TS_ASSIGN_OR_RETURN(const Model model, Model::load(o.model_dir));
  std::vector<LocalEngine> engines;
  for (int s = 0; s < o.stages; ++s) {
    TS_ASSIGN_OR_RETURN(LocalEngine engine, LocalEngine::create(model, {.threads = o.threads}));
    engines.push_back(std::move(engine));
  }

  // The pipeline: stages as threads of this process.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessera-bench-pipeline-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::vector<net::LocalNode> nodes = {{"coordinator", "127.0.0.1:1"}};
  std::vector<pipeline::StagePlan> plan;
  const std::vector<int64_t> cuts = balanced_cuts(config, o.stages);
  for (int s = 0; s < o.stages; ++s) {
    TS_ASSIGN_OR_RETURN(const uint16_t port, net::free_loopback_port());
    nodes.push_back({"stage" + std::to_string(s), "127.0.0.1:" + std::to_string(port)});
    plan.push_back({nodes.back().name, o.model_dir, cuts[s], cuts[s + 1]});
  }
  TS_RETURN_IF_ERROR(net::write_local_cluster(dir, nodes));
  TS_ASSIGN_OR_RETURN(const net::TrustFile trust, net::read_trust_file(dir / "trust.json"));
  std::vector<std::unique_ptr<pipeline::StageService>> services;
  std::vector<std::thread> threads;
  for (int s = 0; s < o.stages; ++s) {
    pipeline::StageOptions options;
    TS_ASSIGN_OR_RETURN(options.listen, net::parse_endpoint(nodes[s + 1].address));
    TS_ASSIGN_OR_RETURN(options.identity, net::load_identity(dir / nodes[s + 1].name));
    options.trust = trust;
    options.engine.threads = o.threads;
    services.push_back(std::make_unique<pipeline::StageService>(std::move(options)));
    TS_RETURN_IF_ERROR(services.back()->bind());
    threads.emplace_back([service = services.back().get()] { (void)service->run(); });
  }
  auto stop = [&] {
    for (auto& service : services) service->stop();
    for (auto& thread : threads) thread.join();
    std::filesystem::remove_all(dir);
  };
  TS_ASSIGN_OR_RETURN(const net::Identity identity, net::load_identity(dir / "coordinator"));
  pipeline::PipelineOptions pipeline_options;
  pipeline_options.context = context;
  pipeline_options.model_dir = o.model_dir;
  Result<std::unique_ptr<pipeline::Pipeline>> pipeline =
      pipeline::Pipeline::connect(identity, trust, config, plan, pipeline_options);
  if (!pipeline.ok()) {
    stop();
    return pipeline.status();
  }
  // R requests one at a time (decode seconds, wall seconds), on `make_runner`'s runners.
  auto one_at_a_time = [&](auto make_runner, double& decode_s, double& wall_s) -> Status {
    decode_s = 0;
    const auto start = Clock::now();
    for (int r = 0; r < o.requests; ++r) {
      auto runner = make_runner();
      TS_ASSIGN_OR_RETURN(const double seconds,
                          decode(*runner, config.vocab_size, prompt(o.prompt_tokens, r), o.tokens));
      decode_s += seconds;
    }
    wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    return {};
  };
  auto all_at_once = [&](double& wall_s) -> Status {
    std::vector<Result<double>> results(o.requests, Status::internal("not run"));
    const auto start = Clock::now();
    std::vector<std::thread> clients;
    for (int r = 0; r < o.requests; ++r) {
      clients.emplace_back([&, r] {
        pipeline::PipelineRunner runner(**pipeline, context, SamplingParams{});
        results[r] = decode(runner, config.vocab_size, prompt(o.prompt_tokens, r), o.tokens);
      });
    }
    for (auto& client : clients) client.join();
    wall_s = std::chrono::duration<double>(Clock::now() - start).count();
    for (auto& result : results) TS_RETURN_IF_ERROR(result.status());
    return {};
  };
  // The gain this host allows without batching: as many one-process decodes at
  // once as there are stages, each on its own threads. They share this host's
  // memory bandwidth and cores as the stages do when all are busy, with no
  // pipeline involved: unbatched = stages x local step / their step. Stages that
  // step several requests at once (reading their weights once) can beat it.
  auto side_by_side = [&](double& step_s) -> Status {
    std::vector<Result<double>> seconds(o.stages, Status::internal("not run"));
    std::vector<std::thread> threads;
    for (int s = 0; s < o.stages; ++s) {
      threads.emplace_back([&, s] {
        LocalRunner runner(*engines[s].scheduler, context);
        seconds[s] = decode(runner, config.vocab_size, prompt(o.prompt_tokens, s), o.tokens);
      });
    }
    for (auto& thread : threads) thread.join();
    step_s = 0;
    for (auto& s : seconds) {
      TS_RETURN_IF_ERROR(s.status());
      step_s += *s / static_cast<double>(o.stages * o.tokens);
    }
    return {};
  };
  struct Round {
    double local_step = 0, pipeline_step = 0, sequential_wall = 0, concurrent_wall = 0, side_by_side_step = 0;
  };
  std::vector<Round> rounds;
  Status status;
  const double total_tokens = static_cast<double>(o.tokens) * o.requests;
  for (int i = 0; i < o.rounds && status.ok(); ++i) {
    Round round;
    double local_wall = 0;
    status = one_at_a_time([&] { return std::make_unique<LocalRunner>(*engines[0].scheduler, context); },
                           round.local_step, local_wall);
    if (status.ok()) {
      status = one_at_a_time(
          [&] { return std::make_unique<pipeline::PipelineRunner>(**pipeline, context, SamplingParams{}); },
          round.pipeline_step, round.sequential_wall);
    }
    if (status.ok()) status = all_at_once(round.concurrent_wall);
    if (status.ok()) status = side_by_side(round.side_by_side_step);
    round.local_step /= total_tokens;
    round.pipeline_step /= total_tokens;
    rounds.push_back(round);
  }
  pipeline->reset();
  stop();
  TS_RETURN_IF_ERROR(status);

  const int hops = o.stages + 1;
  std::string split;
  for (const pipeline::StagePlan& stage : plan) {
    split += (split.empty() ? "" : ", ") + std::string("[") + std::to_string(stage.begin) + ", " +
             std::to_string(stage.end) + ")";
  }
  std::printf(
      "%s: %lld layers in %d stages (%s, balancing weight bytes with the LM head), %zu threads each, loopback, "
      "mutual TLS 1.3\n",
      o.model_dir.c_str(), static_cast<long long>(layers), o.stages, split.c_str(), o.threads);
  std::printf(
      "%d requests x %lld tokens per run; each round: one process, then the pipeline one request at a time, "
      "then all at once, then %d one-process decodes side by side (the gain this host allows without batching)\n",
      o.requests, static_cast<long long>(o.tokens), o.stages);
  std::printf("%-6s %14s %15s %12s %10s %14s %14s %8s %8s\n", "round", "local_step_ms", "pipeline_step_ms",
              "per_hop_ms", "per_hop_%", "one_at_a_time", "all_at_once", "gain", "unbatched");
  std::vector<double> hop_fractions, gains, ceilings;
  for (size_t i = 0; i < rounds.size(); ++i) {
    const Round& r = rounds[i];
    const double per_hop = (r.pipeline_step - r.local_step) / hops;
    hop_fractions.push_back(per_hop / r.local_step);
    gains.push_back(r.sequential_wall / r.concurrent_wall);
    ceilings.push_back(o.stages * r.local_step / r.side_by_side_step);
    std::printf("%-6zu %14.3f %15.3f %12.3f %10.2f %10.1f tok/s %10.1f tok/s %7.2fx %7.2fx\n", i + 1,
                r.local_step * 1e3, r.pipeline_step * 1e3, per_hop * 1e3, 100.0 * hop_fractions.back(),
                total_tokens / r.sequential_wall, total_tokens / r.concurrent_wall, gains.back(), ceilings.back());
  }
  std::printf(
      "median over %zu rounds: each of %d hops adds %.2f %% to the decode step; %d requests at once give "
      "%.2fx the tokens/s of one at a time (wall time, prefill included); without batching this host allows %.2fx\n",
      rounds.size(), hops, 100.0 * median(hop_fractions), o.requests, median(gains), median(ceilings));
  return {};
}

}  // namespace

void register_bench_pipeline(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BenchPipelineOptions>();
  CLI::App* cmd = app.add_subcommand("bench-pipeline", "A local pipeline vs one process: hop latency, concurrency");
  cmd->add_option("--model", o->model_dir, "Checkpoint directory")->required();
  cmd->add_option("--stages", o->stages, "Stages")->capture_default_str();
  cmd->add_option("--requests", o->requests, "Concurrent requests")->capture_default_str();
  cmd->add_option("-n,--tokens", o->tokens, "Decode steps per request")->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "Prompt length")->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads per stage and for the one-process run")->capture_default_str();
  cmd->add_option("--rounds", o->rounds, "Rounds (each: one process, one at a time, all at once)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->callback([o, &exit_code] {
    const Status status = bench_pipeline(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
