// `tessera generate`: greedy generation from token ids on one host.
//   tessera generate --model DIR --prompt-ids 1,2,3 -n 16 [--logits-out FILE.npy]
// Prints the generated ids, comma-separated, on stdout. --logits-out writes f32
// [n + 1, vocab]: row 0 after the prompt, row i after the i-th generated token.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/device.h"
#include "cli/commands.h"
#include "cli/npy.h"
#include "model/forward.h"

namespace tessera {

namespace {

struct GenerateOptions {
  std::string model_dir;
  std::vector<int32_t> prompt_ids;
  int64_t tokens = 16;
  std::string logits_out;
  size_t threads = 0;
  std::string device = "cpu";
};

int32_t argmax(std::span<const float> row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

Status generate(const GenerateOptions& o) {
  using Clock = std::chrono::steady_clock;
  TS_ASSIGN_OR_RETURN(const Model model, Model::load(o.model_dir));
  TS_ASSIGN_OR_RETURN(auto device, make_device(o.device, o.threads));
  Forward forward(model, *device);
  KvCache cache = forward.make_cache(static_cast<int64_t>(o.prompt_ids.size()) + o.tokens);
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> all_logits;
  std::vector<int32_t> generated;

  const auto t0 = Clock::now();
  TS_ASSIGN_OR_RETURN(std::vector<float> logits, forward.run_ids(o.prompt_ids, cache));
  const auto t1 = Clock::now();
  for (int64_t i = 0;; ++i) {
    if (!o.logits_out.empty()) all_logits.insert(all_logits.end(), logits.begin(), logits.end());
    if (i == o.tokens) break;
    const int32_t next = argmax(logits);
    generated.push_back(next);
    // The last token is fed back only when its logits are asked for.
    if (i + 1 == o.tokens && o.logits_out.empty()) break;
    TS_ASSIGN_OR_RETURN(logits, forward.run_ids(std::span(&generated.back(), 1), cache));
  }
  const auto t2 = Clock::now();

  std::string line;
  for (const int32_t id : generated) {
    if (!line.empty()) line += ',';
    line += std::to_string(id);
  }
  std::printf("%s\n", line.c_str());
  if (!o.logits_out.empty())
    TS_RETURN_IF_ERROR(write_npy_f32(o.logits_out, all_logits, {o.tokens + 1, vocab}));
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  std::fprintf(stderr, "[generate] %s; prompt %zu tokens in %.3f s; %lld tokens in %.3f s (%.1f tok/s)\n",
               device->name().c_str(), o.prompt_ids.size(), prefill_s, static_cast<long long>(generated.size()),
               decode_s, decode_s > 0 ? static_cast<double>(generated.size()) / decode_s : 0.0);
  return {};
}

}  // namespace

void register_generate(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<GenerateOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate tokens greedily from prompt token ids");
  cmd->add_option("--model", options->model_dir, "Checkpoint directory (config.json + safetensors)")->required();
  cmd->add_option("--prompt-ids", options->prompt_ids, "Prompt token ids, comma-separated")
      ->required()
      ->delimiter(',');
  cmd->add_option("-n,--tokens", options->tokens, "Number of tokens to generate")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--logits-out", options->logits_out, "Write f32 logits [n+1, vocab] to this .npy file");
  cmd->add_option("--threads", options->threads, "CPU threads (default: all cores)");
  cmd->add_option("--device", options->device, "cpu or cuda[:N]");
  cmd->callback([options, &exit_code] {
    const Status status = generate(*options);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
