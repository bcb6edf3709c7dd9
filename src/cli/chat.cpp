// `tessera chat --model DIR`: an interactive multi-turn chat in the terminal,
// through the model's chat template. Each turn re-renders the whole conversation
// and reuses the KV cache for the tokens it shares with the previous turn.
//   /reset   clears the history      /quit or Ctrl-D   leaves
//   Ctrl-C   stops the current answer (not the program)
// With --tp node0,node1 --identity DIR --trust FILE it leads a tensor-parallel
// group as rank 0 (the other members run tessera rank; docs/distributed.md).
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>

#include "backend/device.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/sampling_options.h"
#include "cli/tp_options.h"
#include "engine/generation.h"

namespace tessera {

namespace {

std::atomic<bool> g_interrupted{false};

extern "C" void on_interrupt(int) { g_interrupted.store(true); }

struct ChatOptions {
  std::string model_dir;
  std::string system;
  int64_t tokens = 512;
  SamplingParams sampling;
  EngineOptions engine;
  TpOptions tp;  // --tp: lead a tensor-parallel group as rank 0
};

Status chat(ChatOptions o) {
  TS_ASSIGN_OR_RETURN(const TextModel model, load_text_model(o.model_dir));
  if (!model.chat_template) return Status::invalid_input(o.model_dir + ": tokenizer_config.json has no chat_template");
  TpEngine tp;
  LocalEngine local;
  if (o.tp.members.empty()) {
    TS_ASSIGN_OR_RETURN(local, LocalEngine::create(model.model, o.engine));
  } else {
    TS_ASSIGN_OR_RETURN(tp, make_tp_engine(model.model, o.tp, o.engine));
    std::fprintf(stderr, "[chat] %s\n", tp.name.c_str());
  }
  LocalEngine& engine = o.tp.members.empty() ? local : tp.engine;
  // One sequence for the whole conversation: each answer reuses the keys and values of the turns before it.
  LocalRunner runner(*engine.scheduler, model.model.config().max_position_embeddings, o.sampling);
  auto messages = nlohmann::ordered_json::array();
  if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
  const size_t base_messages = messages.size();

  struct sigaction action {};
  action.sa_handler = on_interrupt;  // no SA_RESTART: Ctrl-C at the prompt ends the read
  sigaction(SIGINT, &action, nullptr);
  std::fprintf(stderr, "tessera chat: /reset clears the history, /quit or Ctrl-D leaves, Ctrl-C stops an answer\n");
  for (std::string line;;) {
    std::fprintf(stderr, "> ");
    g_interrupted = false;
    if (!std::getline(std::cin, line)) {
      if (g_interrupted) {  // Ctrl-C at the prompt: a fresh prompt
        std::cin.clear();
        std::fprintf(stderr, "\n");
        continue;
      }
      return {};
    }
    if (line == "/quit") return {};
    if (line == "/reset") {
      messages.erase(messages.begin() + static_cast<ptrdiff_t>(base_messages), messages.end());
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    TS_ASSIGN_OR_RETURN(const std::string rendered, model.render_chat(messages, /*add_generation_prompt=*/true));
    GenerationRequest request;
    request.max_tokens = o.tokens;
    request.sampling = o.sampling;
    request.cancel = &g_interrupted;
    TS_ASSIGN_OR_RETURN(request.prompt,
                        model.tokenizer.encode(rendered, {.parse_special = true, .add_special = false}));
    std::string answer;
    auto result = generate_text(model, runner, request, [&](std::string_view piece) {
      answer += piece;
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    });
    std::printf("\n");
    if (!result.ok()) {  // e.g. the conversation outgrew the context: say so and carry on
      report_error(result.status());
      messages.erase(messages.end() - 1);
      continue;
    }
    messages.push_back({{"role", "assistant"}, {"content", answer}});
    if (result->finish_reason == "cancelled") std::fprintf(stderr, "[stopped]\n");
  }
}

}  // namespace

void register_chat(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ChatOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with a model in the terminal, through its chat template");
  cmd->add_option("--model", o->model_dir, "Checkpoint directory with tokenizer files")->required();
  cmd->add_option("--system", o->system, "A system message opening the conversation");
  cmd->add_option("-n,--tokens", o->tokens, "Most tokens per answer")->check(CLI::Range(1, 1 << 20));
  add_sampling_options(*cmd, o->sampling);
  add_engine_options(*cmd, o->engine);
  add_tp_options(*cmd, o->tp, "--tp", /*required=*/false, /*with_identity=*/true);
  cmd->callback([o, &exit_code] {
    const Status status = chat(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
