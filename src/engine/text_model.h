// TextModel: what a model directory holds for text in and text out — the
// weights, the tokenizer (tokenizer.json), the chat template and special tokens
// (tokenizer_config.json), and the ids that end a generation (eos_token_id of
// generation_config.json and config.json, a number or a list, plus the EOS
// token of tokenizer_config.json). A GGUF file (io/gguf_model.h) holds all of
// these itself: tokenizer.ggml.*, tokenizer.chat_template and the eos/eot/eom
// ids (tokenizer/gguf_tokenizer.h). Immutable after loading.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"
#include "template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tessera {

struct TextModel {
  Model model;
  Tokenizer tokenizer;
  std::optional<ChatTemplate> chat_template;                                 // absent when the model has none
  nlohmann::ordered_json special_tokens = nlohmann::ordered_json::object();  // bos_token, eos_token, ...
  std::vector<int32_t> stop_ids;

  // Renders `messages` ([{role, content}, ...]) with the chat template; kNotFound without one.
  Result<std::string> render_chat(const nlohmann::ordered_json& messages, bool add_generation_prompt) const;
};

Result<TextModel> load_text_model(const std::string& dir);

}  // namespace tessera
