// ChatTemplate: renders a Hugging Face chat template (tokenizer_config.json's
// `chat_template`, a Jinja template) into the prompt text the model was trained
// on, exactly as transformers' apply_chat_template renders it with Python's
// jinja2: ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
// extensions=[loopcontrols, {% generation %}]), the globals raise_exception and
// strftime_now, and a tojson filter that is json.dumps(x, ensure_ascii=False,
// indent, separators, sort_keys).
//
//   TS_ASSIGN_OR_RETURN(ChatTemplate t, ChatTemplate::parse(source));
//   TS_ASSIGN_OR_RETURN(std::string prompt, t.render(context));
//
// The context holds the template's variables: messages, tools,
// add_generation_prompt, bos_token, eos_token, and whatever else the template
// reads. Key order matters (tojson writes keys in order): pass
// nlohmann::ordered_json to keep the caller's order.
//
// Errors:
//   invalid_input  syntax errors (with line:column), runtime errors such as an
//                  undefined variable used as a value ("template error at
//                  line:column: ..."), a raise_exception('msg') call (the message
//                  as the template wrote it), invalid UTF-8, exceeded limits;
//   unsupported    a construct tessera does not implement, named:
//                  "filter 'wordwrap' is not supported".
// Templates come from model files and are untrusted: output size, work and call
// depth are bounded (RenderOptions), and so is nesting when parsing.
//
// Thread-safety: a ChatTemplate is immutable once parsed; render() may be called
// from several threads at once. Copies share the parsed template.
#pragma once

#include <cstdint>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace tessera {
namespace tmpl {
struct Program;
}

class ChatTemplate {
 public:
  struct RenderOptions {
    // The time strftime_now() formats; local time at render when unset.
    std::optional<std::tm> now;
    std::size_t max_output_bytes = 16u << 20;
    // Expressions, statements and loop iterations; ~30M steps take a second.
    std::uint64_t max_steps = 100'000'000;
    int max_call_depth = 256;
  };

  // Templates larger than this are refused.
  static constexpr std::size_t kMaxSourceBytes = 1u << 20;

  static Result<ChatTemplate> parse(std::string_view source);

  Result<std::string> render(const nlohmann::ordered_json& context, const RenderOptions& options) const;
  Result<std::string> render(const nlohmann::ordered_json& context) const { return render(context, RenderOptions{}); }
  // nlohmann::json sorts object keys, so tojson output follows that order.
  Result<std::string> render(const nlohmann::json& context, const RenderOptions& options) const;
  Result<std::string> render(const nlohmann::json& context) const { return render(context, RenderOptions{}); }

 private:
  explicit ChatTemplate(std::shared_ptr<const tmpl::Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const tmpl::Program> program_;
};

// What a tokenizer_config.json declares for chat: the template (the "default"
// one when it lists named templates) and the special tokens transformers passes
// to it (bos_token, eos_token, unk_token, pad_token: strings, or the content of
// an AddedToken object; absent when null).
struct TokenizerChatConfig {
  std::string chat_template;
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();
};

// not_found when the config has no chat_template.
Result<TokenizerChatConfig> read_tokenizer_chat_config(const nlohmann::ordered_json& tokenizer_config);

}  // namespace tessera
