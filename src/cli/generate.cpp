// `tessera generate`: one generation on one host.
//   tessera generate --model DIR --prompt TEXT [--chat] [-n N] [--temperature T] [--top-p P] [--seed S] ...
//     streams the generated text to stdout; prompt and generation tokens/s go to stderr.
//   tessera generate --model DIR --prompt-ids 1,2,3 -n N [--logits-out FILE.npy]
//     for checkpoints without a tokenizer: prints the generated ids, comma-separated;
//     --logits-out writes f32 [n + 1, vocab]: row 0 after the prompt, row i after the
//     i-th generated token.
//   tessera generate ... --pipeline stages.json --identity DIR --trust trust.json
//     runs the layers on pipeline stages (tessera stage) instead of this process;
//     stages.json: {"stages": [{"name": "stage0", "model": DIR, "layers": [0, 8]}, ...]}
//     (without "layers", split by the stages' free memory); --plain for trusted links
//   tessera generate ... --tp node0,node1 --identity keys/node0 --trust trust.json
//     runs the model tensor-parallel: this process is rank 0 (it runs the
//     scheduler and samples), the other members run tessera rank; --plain as above
// Greedy unless a sampling option is given.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/device.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/npy.h"
#include "cli/sampling_options.h"
#include "cli/tp_options.h"
#include "core/text_file.h"
#include "engine/generation.h"
#include "pipeline/coordinator.h"

namespace tessera {

namespace {

struct GenerateOptions {
  std::string model_dir;
  std::vector<int32_t> prompt_ids;
  std::string prompt;
  std::string prompt_file;
  bool chat = false;
  int64_t tokens = 16;
  std::vector<std::string> stop;
  SamplingParams sampling;
  std::string logits_out;
  EngineOptions engine;
  std::string pipeline;  // stages.json: run on pipeline stages
  std::string identity;
  std::string trust;
  bool plain = false;
  std::string ship_weights;        // empty: each stage reads its own checkpoint copy
  double timeout_s = 30;           // connecting to a stage, each write to one
  double heartbeat_timeout_s = 3;  // a stage silent this long is frozen or cut off
  TpOptions tp;                    // --tp: rank 0 of a TP group (identity, trust, plain as above)
};

// Where the layers run: this process's engine (over its shard with --tp), or a pipeline of stages.
struct Runner {
  TpEngine tp;  // --tp: rank 0's shard and engine
  LocalEngine engine;
  std::unique_ptr<pipeline::Pipeline> pipeline;
  std::unique_ptr<SequenceRunner> sequence;
  std::string name;  // for the stats line
};

// The runner samples (in this process's scheduler, or on a pipeline's last
// stage) unless the logits themselves are asked for.
Result<Runner> make_runner(const GenerateOptions& o, const Model& model, int64_t capacity, bool want_logits) {
  Runner runner;
  std::optional<SamplingParams> sampling;
  if (!want_logits) sampling = o.sampling;
  if (!o.tp.members.empty() && !o.pipeline.empty()) return tp_beside_a_pipeline();
  if (!o.tp.members.empty()) {
    TpOptions tp = o.tp;
    tp.identity = o.identity;
    tp.trust = o.trust;
    tp.plain = o.plain;
    TS_ASSIGN_OR_RETURN(runner.tp, make_tp_engine(model, tp, o.engine));
    runner.sequence = std::make_unique<LocalRunner>(*runner.tp.engine.scheduler, capacity, sampling);
    runner.name = runner.tp.name;
    return runner;
  }
  if (o.pipeline.empty()) {
    TS_ASSIGN_OR_RETURN(runner.engine, LocalEngine::create(model, o.engine));
    runner.sequence = std::make_unique<LocalRunner>(*runner.engine.scheduler, capacity, sampling);
    runner.name = runner.engine.device->name() + "; KV cache " + runner.engine.forward->kv_pool().describe();
    return runner;
  }
  if (o.identity.empty() || o.trust.empty()) return Status::invalid_input("--pipeline needs --identity and --trust");
  TS_ASSIGN_OR_RETURN(const net::Identity identity, net::load_identity(o.identity));
  TS_ASSIGN_OR_RETURN(const net::TrustFile trust, net::read_trust_file(o.trust));
  TS_ASSIGN_OR_RETURN(std::vector<pipeline::StagePlan> plan,
                      pipeline::read_pipeline_plan(o.pipeline, model.config().num_hidden_layers));
  pipeline::PipelineOptions options;
  options.context = capacity;
  options.model_dir = o.model_dir;
  options.plain = o.plain;
  options.timeout = std::chrono::milliseconds(std::llround(o.timeout_s * 1000));
  options.heartbeat_timeout = std::chrono::milliseconds(std::llround(o.heartbeat_timeout_s * 1000));
  if (!o.ship_weights.empty()) {
    TS_ASSIGN_OR_RETURN(options.ship, pipeline::parse_ship_encoding(o.ship_weights));
  }
  TS_ASSIGN_OR_RETURN(runner.pipeline,
                      pipeline::Pipeline::connect(identity, trust, model.config(), std::move(plan), options));
  std::fprintf(stderr, "[generate] pipeline of %s:\n%s", o.pipeline.c_str(), runner.pipeline->layout().c_str());
  runner.sequence = std::make_unique<pipeline::PipelineRunner>(*runner.pipeline, capacity, sampling);
  runner.name = "pipeline";
  return runner;
}

// The stats line on stderr: where it ran, prefill and decode speed, why it stopped.
void print_stats(const Runner& runner, int64_t prompt_size, const GenerationResult& result) {
  std::fprintf(stderr, "[generate] %s; prompt %lld tokens at %.1f tok/s; %zu tokens at %.1f tok/s (%s)\n",
               runner.name.c_str(), static_cast<long long>(prompt_size),
               static_cast<double>(prompt_size) / result.prefill_seconds, result.tokens.size(),
               result.decode_seconds > 0 ? static_cast<double>(result.tokens.size()) / result.decode_seconds : 0.0,
               result.finish_reason.c_str());
}

// Token ids in, token ids (and with --logits-out every row of logits) out.
Status generate_ids(const GenerateOptions& o) {
  TS_ASSIGN_OR_RETURN(const Model model, Model::load(o.model_dir));
  const int64_t vocab = model.config().vocab_size;
  TS_RETURN_IF_ERROR(validate(o.sampling, vocab));
  GenerationRequest request;
  request.prompt = o.prompt_ids;
  request.max_tokens = o.tokens;
  request.sampling = o.sampling;
  request.keep_logits = !o.logits_out.empty();
  TS_ASSIGN_OR_RETURN(Runner runner,
                      make_runner(o, model, static_cast<int64_t>(o.prompt_ids.size()) + o.tokens, request.keep_logits));
  TS_ASSIGN_OR_RETURN(const GenerationResult result,
                      generate(*runner.sequence, vocab, request, [](int32_t) { return true; }));
  std::string line;
  for (const int32_t id : result.tokens) {
    if (!line.empty()) line += ',';
    line += std::to_string(id);
  }
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
  print_stats(runner, static_cast<int64_t>(o.prompt_ids.size()), result);
  if (request.keep_logits)
    TS_RETURN_IF_ERROR(
        write_npy_f32(o.logits_out, result.logits, {static_cast<int64_t>(result.logits.size()) / vocab, vocab}));
  return {};
}

// A prompt file is a regular file of at most 64 MiB (core/text_file.h): a
// directory, FIFO or device is refused at once, so nothing hangs or reads forever.
Result<std::string> prompt_text(const GenerateOptions& o) {
  if (o.prompt_file.empty()) return o.prompt;
  return read_text_file(o.prompt_file, uint64_t{64} << 20);
}

// Text in, streamed text out.
Status generate_text(const GenerateOptions& o) {
  TS_ASSIGN_OR_RETURN(const TextModel model, load_text_model(o.model_dir));
  TS_ASSIGN_OR_RETURN(const std::string text, prompt_text(o));
  GenerationRequest request;
  request.max_tokens = o.tokens;
  request.sampling = o.sampling;
  request.stop_strings = o.stop;
  if (o.chat) {
    TS_ASSIGN_OR_RETURN(const std::string rendered,
                        model.render_chat(nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}}),
                                          /*add_generation_prompt=*/true));
    TS_ASSIGN_OR_RETURN(request.prompt,
                        model.tokenizer.encode(rendered, {.parse_special = true, .add_special = false}));
  } else {
    auto ids = model.tokenizer.encode(text);
    if (!ids.ok()) return ids.status().with_context(o.prompt_file.empty() ? "--prompt" : o.prompt_file);
    request.prompt = std::move(ids).value();
  }
  const int64_t context = model.model.config().max_position_embeddings;
  const auto prompt_size = static_cast<int64_t>(request.prompt.size());
  if (prompt_size >= context)
    return Status::invalid_input("the prompt has " + std::to_string(prompt_size) + " tokens; the model's context is " +
                                 std::to_string(context));
  TS_ASSIGN_OR_RETURN(Runner runner,
                      make_runner(o, model.model, std::min(context, prompt_size + o.tokens), /*want_logits=*/false));
  TS_ASSIGN_OR_RETURN(const GenerationResult result,
                      tessera::generate_text(model, *runner.sequence, request, [](std::string_view piece) {
                        std::fwrite(piece.data(), 1, piece.size(), stdout);
                        std::fflush(stdout);
                      }));
  std::printf("\n");
  std::fflush(stdout);
  print_stats(runner, prompt_size, result);
  return {};
}

}  // namespace

void register_generate(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate text (or token ids) from a prompt");
  cmd->add_option("--model", o->model_dir, "Checkpoint directory (config.json, safetensors, tokenizer.json)")
      ->required();
  auto* text = cmd->add_option("--prompt", o->prompt, "Prompt text");
  auto* file = cmd->add_option("--prompt-file", o->prompt_file, "Read the prompt text from this file");
  auto* ids = cmd->add_option("--prompt-ids", o->prompt_ids, "Prompt token ids, comma-separated (no tokenizer needed)")
                  ->delimiter(',');
  text->excludes(file)->excludes(ids);
  file->excludes(ids);
  cmd->add_flag("--chat", o->chat, "Wrap the prompt as a user message in the model's chat template")->excludes(ids);
  cmd->add_option("-n,--tokens", o->tokens, "Most tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--stop", o->stop, "Stop when this text appears (repeatable)")->excludes(ids);
  add_sampling_options(*cmd, o->sampling);
  cmd->add_option("--logits-out", o->logits_out, "With --prompt-ids: write f32 logits [n+1, vocab] to this .npy");
  add_engine_options(*cmd, o->engine);
  cmd->add_option("--pipeline", o->pipeline, "Run the layers on the pipeline stages this JSON file names");
  cmd->add_option("--identity", o->identity,
                  "With --pipeline or --tp: this node's identity directory (tessera keygen)");
  cmd->add_option("--trust", o->trust, "With --pipeline or --tp: the cluster trust file");
  add_tp_options(*cmd, o->tp, "--tp", /*required=*/false, /*with_identity=*/false);
  cmd->add_option(
      "--ship-weights", o->ship_weights,
      "With --pipeline: send each stage its layers from --model (none, lz4, int8, int8+lz4, int4, int4+lz4)");
  cmd->add_flag(
      "--plain", o->plain,
      "With --pipeline or --tp, for trusted links: peers are still authenticated (mutual TLS), but frames travel "
      "unsealed");
  cmd->add_option("--timeout", o->timeout_s, "With --pipeline: seconds to connect to a stage and for each write to one")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--heartbeat-timeout", o->heartbeat_timeout_s,
                  "With --pipeline: seconds a stage may stay silent (it heartbeats every third of this) before its "
                  "requests fail as frozen; a busy stage still heartbeats")
      ->check(CLI::Range(0.05, 180.0))
      ->capture_default_str();
  cmd->callback([o, &exit_code, text, file, ids] {
    Status status;
    if (ids->count() > 0) {
      status = generate_ids(*o);
    } else if (text->count() > 0 || file->count() > 0) {
      status = generate_text(*o);
    } else {
      status = Status::invalid_input("give --prompt, --prompt-file or --prompt-ids");
    }
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
