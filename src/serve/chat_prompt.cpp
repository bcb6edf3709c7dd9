#include "serve/chat_prompt.h"

#include <string>

namespace tessera::serve {

namespace {

bool holds_special_text(const Tokenizer& tokenizer, const std::string& text) {
  const auto as_tokens = tokenizer.encode(text, {.parse_special = true, .add_special = false});
  const auto as_text = tokenizer.encode(text, {.parse_special = false, .add_special = false});
  return !as_tokens.ok() || !as_text.ok() || *as_tokens != *as_text;
}

// Unlikely in any text and kept whole by any template that passes content through.
std::string sentinel(size_t i) {
  return "\x1f"
         "tessera-content-" +
         std::to_string(i) + "\x1f";
}

Status append(const Tokenizer& tokenizer, const std::string& text, bool parse_special, std::vector<int32_t>& ids) {
  TS_ASSIGN_OR_RETURN(std::vector<int32_t> part,
                      tokenizer.encode(text, {.parse_special = parse_special, .add_special = false}));
  ids.insert(ids.end(), part.begin(), part.end());
  return {};
}

}  // namespace

Result<std::vector<int32_t>> chat_prompt_ids(const TextModel& model, const nlohmann::ordered_json& messages) {
  const Tokenizer& tokenizer = model.tokenizer;
  TS_ASSIGN_OR_RETURN(const std::string rendered, model.render_chat(messages, /*add_generation_prompt=*/true));
  bool special = false;
  for (const auto& m : messages) special = special || holds_special_text(tokenizer, m["content"].get<std::string>());
  if (!special) return tokenizer.encode(rendered, {.parse_special = true, .add_special = false});

  nlohmann::ordered_json marked = messages;
  for (size_t i = 0; i < marked.size(); ++i) marked[i]["content"] = sentinel(i);
  TS_ASSIGN_OR_RETURN(const std::string layout, model.render_chat(marked, /*add_generation_prompt=*/true));
  std::vector<int32_t> ids;
  std::string verbatim;  // the layout with the contents put back: must be what the template rendered
  size_t at = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const std::string mark = sentinel(i);
    const size_t found = layout.find(mark, at);
    const std::string& content = messages[i]["content"].get_ref<const std::string&>();
    if (found == std::string::npos || layout.find(mark, found + mark.size()) != std::string::npos)
      return Status::invalid_input("messages[" + std::to_string(i) +
                                   "].content holds special-token text, and the chat template does not place it "
                                   "once as given, so it cannot be kept as plain text");
    TS_RETURN_IF_ERROR(append(tokenizer, layout.substr(at, found - at), true, ids));
    TS_RETURN_IF_ERROR(append(tokenizer, content, false, ids));
    verbatim += layout.substr(at, found - at) + content;
    at = found + mark.size();
  }
  TS_RETURN_IF_ERROR(append(tokenizer, layout.substr(at), true, ids));
  verbatim += layout.substr(at);
  if (verbatim != rendered)
    return Status::invalid_input(
        "a message holds special-token text, and the chat template changes message contents, so they cannot be "
        "kept as plain text");
  return ids;
}

}  // namespace tessera::serve
