#include "engine/text_model.h"

#include <algorithm>
#include <filesystem>

#include "core/text_file.h"

namespace tessera {

namespace {

// Parses an optional JSON file: null when it does not exist.
Result<nlohmann::ordered_json> read_optional_json(const std::string& path) {
  if (!std::filesystem::exists(path)) return nlohmann::ordered_json();
  return read_json_file<nlohmann::ordered_json>(path);
}

void add_eos_ids(const nlohmann::ordered_json& config, std::vector<int32_t>& ids) {
  if (!config.is_object() || !config.contains("eos_token_id")) return;
  const auto& eos = config["eos_token_id"];
  for (const auto& id : eos.is_array() ? eos : nlohmann::ordered_json::array({eos}))
    if (id.is_number_integer()) ids.push_back(id.get<int32_t>());
}

}  // namespace

Result<std::string> TextModel::render_chat(const nlohmann::ordered_json& messages, bool add_generation_prompt) const {
  if (!chat_template) return Status::not_found("the model has no chat_template in tokenizer_config.json");
  nlohmann::ordered_json context = special_tokens;
  context["messages"] = messages;
  context["add_generation_prompt"] = add_generation_prompt;
  return chat_template->render(context);
}

Result<TextModel> load_text_model(const std::string& dir) {
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
    add_eos_ids(config, text.stop_ids);
  }
  std::sort(text.stop_ids.begin(), text.stop_ids.end());
  text.stop_ids.erase(std::unique(text.stop_ids.begin(), text.stop_ids.end()), text.stop_ids.end());
  return text;
}

}  // namespace tessera
