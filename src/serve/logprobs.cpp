#include "serve/logprobs.h"

#include <algorithm>
#include <string>

namespace tessera::serve {

namespace {

constexpr float kFloor = -9999.0f;

nlohmann::json chat_entry(const std::string& text, float logprob) {
  nlohmann::json bytes = nlohmann::json::array();
  for (const unsigned char c : text) bytes.push_back(c);
  return {{"token", text}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
}

// Characters as a client counts them: UTF-8 lead bytes (a stray byte becomes one U+FFFD).
int64_t characters(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace

nlohmann::json LogprobsWriter::write(std::span<const SampledLogprobs> tokens) {
  auto text = [&](int32_t id) { return tokenizer_->decode(std::span(&id, 1), /*skip_special=*/false).value_or(""); };
  auto value = [](float logprob) { return logprob >= kFloor ? logprob : kFloor; };
  if (endpoint_ == Endpoint::kChat) {
    nlohmann::json content = nlohmann::json::array();
    for (const SampledLogprobs& t : tokens) {
      nlohmann::json entry = chat_entry(text(t.sampled.token), value(t.sampled.logprob));
      entry["top_logprobs"] = nlohmann::json::array();
      for (const TokenLogprob& top : t.top)
        entry["top_logprobs"].push_back(chat_entry(text(top.token), value(top.logprob)));
      content.push_back(std::move(entry));
    }
    return {{"content", std::move(content)}};
  }
  nlohmann::json out = {{"tokens", nlohmann::json::array()},
                        {"token_logprobs", nlohmann::json::array()},
                        {"top_logprobs", nlohmann::json::array()},
                        {"text_offset", nlohmann::json::array()}};
  for (const SampledLogprobs& t : tokens) {
    const std::string token = text(t.sampled.token);
    out["tokens"].push_back(token);
    out["token_logprobs"].push_back(value(t.sampled.logprob));
    nlohmann::json top = nlohmann::json::object();
    for (const TokenLogprob& alt : t.top) top.emplace(text(alt.token), value(alt.logprob));  // first (likeliest) wins
    out["top_logprobs"].push_back(std::move(top));
    out["text_offset"].push_back(text_offset_);
    text_offset_ += characters(token);
  }
  return out;
}

}  // namespace tessera::serve
