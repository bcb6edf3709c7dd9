#include "serve/responses.h"

#include <chrono>
#include <random>

namespace tessera::serve {

ResponseHeader new_response_header(Endpoint endpoint, std::string model) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-";
  for (int i = 0; i < 24; ++i) id += kHex[rng() % 16];
  return {endpoint, std::move(id), unix_seconds(), std::move(model)};
}

int64_t unix_seconds() {
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return std::chrono::duration_cast<std::chrono::seconds>(now).count();
}

namespace {

nlohmann::json base(const ResponseHeader& h, const char* object) {
  return {{"id", h.id}, {"object", object}, {"created", h.created}, {"model", h.model}};
}

nlohmann::json finish_json(const std::optional<std::string>& reason) {
  return reason ? nlohmann::json(*reason) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

nlohmann::json full_response(const ResponseHeader& h, const std::vector<Choice>& choices, int64_t prompt_tokens,
                             int64_t completion_tokens) {
  const bool chat = h.endpoint == Endpoint::kChat;
  nlohmann::json json = base(h, chat ? "chat.completion" : "text_completion");
  json["choices"] = nlohmann::json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    nlohmann::json choice = {{"index", i}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", choices[i].text}};
    } else {
      choice["text"] = choices[i].text;
    }
    choice["logprobs"] = choices[i].logprobs;
    choice["finish_reason"] = choices[i].finish_reason;
    json["choices"].push_back(std::move(choice));
  }
  json["usage"] = usage_json(prompt_tokens, completion_tokens);
  return json;
}

nlohmann::json stream_chunk(const ResponseHeader& h, size_t index, const std::string& text,
                            const std::optional<std::string>& finish_reason, bool role, nlohmann::json logprobs) {
  const bool chat = h.endpoint == Endpoint::kChat;
  nlohmann::json json = base(h, chat ? "chat.completion.chunk" : "text_completion");
  nlohmann::json choice = {{"index", index}};
  if (chat) {
    nlohmann::json delta = nlohmann::json::object();
    if (role) delta["role"] = "assistant";
    if (!text.empty() || role) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish_json(finish_reason);
  json["choices"] = nlohmann::json::array({choice});
  return json;
}

nlohmann::json usage_chunk(const ResponseHeader& h, int64_t prompt_tokens, int64_t completion_tokens) {
  nlohmann::json json = base(h, h.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion");
  json["choices"] = nlohmann::json::array();
  json["usage"] = usage_json(prompt_tokens, completion_tokens);
  return json;
}

std::string dump(const nlohmann::json& json) {
  return json.dump(-1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::json& json) { return "data: " + dump(json) + "\n\n"; }

}  // namespace tessera::serve
