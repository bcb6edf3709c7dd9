#include "engine/text_model.h"

#include <algorithm>
#include <filesystem>

#include "core/text_file.h"
#include "io/gguf_model.h"
#include "tokenizer/gguf_tokenizer.h"

namespace tessera {

namespace {

// Parses an optional JSON file: null when it does not exist.
Result<nlohmann::ordered_json> read_optional_json(const std::string& path) {
  if (!std::filesystem::exists(path)) return nlohmann::ordered_json();
  return read_json_file<nlohmann::ordered_json>(path);
}

// The eos_token_id of `file` (one id or a list): each must be a token id of the
// vocabulary, never truncated to fit (2^32 + 1 is not token 1).
Status add_eos_ids(const nlohmann::ordered_json& config, const std::string& file, int64_t vocab_size,
                   std::vector<int32_t>& ids) {
  if (!config.is_object() || !config.contains("eos_token_id") || config["eos_token_id"].is_null()) return {};
  const auto& eos = config["eos_token_id"];
  for (const auto& id : eos.is_array() ? eos : nlohmann::ordered_json::array({eos})) {
    const bool in_vocabulary = id.is_number_unsigned()  ? id.get<uint64_t>() < static_cast<uint64_t>(vocab_size)
                               : id.is_number_integer() ? id.get<int64_t>() >= 0 && id.get<int64_t>() < vocab_size
                                                        : false;
    if (!in_vocabulary)
      return Status::invalid_input(file + ": eos_token_id " + id.dump() + " is not a token id below " +
                                   std::to_string(vocab_size));
    ids.push_back(static_cast<int32_t>(id.get<int64_t>()));
  }
  return {};
}

}  // namespace

Result<std::string> TextModel::render_chat(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  if (!chat_template)
    return Status::not_found("the model has no chat template (tokenizer_config.json or tokenizer.chat_template)");
  nlohmann::ordered_json context = special_tokens;
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  return chat_template->render(context);
}

namespace {

// A GGUF file holds it all: the weights, the tokenizer (tokenizer.ggml.*), the
// chat template (tokenizer.chat_template) and the stop ids (eos, eot, eom).
Result<TextModel> load_gguf_text_model(const std::string& path) {
  TS_ASSIGN_OR_RETURN(Model model, Model::load(path));
  TS_ASSIGN_OR_RETURN(const GgufFile file, GgufFile::open(path));
  TS_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::from_gguf(file.metadata(), path));
  TS_ASSIGN_OR_RETURN(GgufChat chat, gguf_chat(file.metadata()));
  TextModel text{std::move(model), std::move(tokenizer), std::nullopt, std::move(chat.special_tokens),
                 std::move(chat.stop_ids)};
  if (!chat.chat_template.empty()) {
    auto parsed = ChatTemplate::parse(chat.chat_template);
    if (!parsed.ok()) return parsed.status().with_context(path + ": tokenizer.chat_template");
    text.chat_template = std::move(parsed).value();
  }
  return text;
}

}  // namespace

Result<TextModel> load_text_model(const std::string& dir) {
  if (is_gguf_file(dir)) return load_gguf_text_model(dir);
  TS_ASSIGN_OR_RETURN(Model model, Model::load(dir));
  TS_ASSIGN_OR_RETURN(Tokenizer tokenizer, Tokenizer::from_file(dir + "/tokenizer.json"));
  TextModel text{std::move(model), std::move(tokenizer), std::nullopt, nlohmann::ordered_json::object(), {}};

  TS_ASSIGN_OR_RETURN(const auto tokenizer_config, read_optional_json(dir + "/tokenizer_config.json"));
  if (tokenizer_config.is_object()) {
    auto chat = read_tokenizer_chat_config(tokenizer_config);
    if (chat.ok()) {
      auto parsed = ChatTemplate::parse(chat->chat_template);
      if (!parsed.ok()) return parsed.status().with_context(dir + "/tokenizer_config.json: chat_template");
      text.chat_template = std::move(parsed).value();
      text.special_tokens = chat->special_tokens;
    } else if (chat.status().kind() != ErrorKind::kNotFound) {
      return chat.status().with_context(dir + "/tokenizer_config.json");
    }
    const auto eos = tokenizer_config.find("eos_token");
    if (eos != tokenizer_config.end() && eos->is_string())
      if (const auto id = text.tokenizer.token_to_id(eos->get<std::string>())) text.stop_ids.push_back(*id);
  }
  for (const char* name : {"generation_config.json", "config.json"}) {
    TS_ASSIGN_OR_RETURN(const auto config, read_optional_json(dir + "/" + name));
    TS_RETURN_IF_ERROR(add_eos_ids(config, dir + "/" + name, text.model.config().vocab_size, text.stop_ids));
  }
  std::sort(text.stop_ids.begin(), text.stop_ids.end());
  text.stop_ids.erase(std::unique(text.stop_ids.begin(), text.stop_ids.end()), text.stop_ids.end());
  return text;
}

}  // namespace tessera
