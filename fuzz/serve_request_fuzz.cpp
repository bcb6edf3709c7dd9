// libFuzzer target for the HTTP request parser of tessera serve (src/serve/request.h).
// The first byte picks the route (completions, chat, tokenize, detokenize), the
// rest is the body. Any input is either refused with a 400 ApiError that has a
// message (and the OpenAI error shape), or is a request whose every field is in
// the range the parser promises: token ids inside the vocabulary, sampling
// values in their ranges, at most kMaxStopStrings non-empty stop strings, and
// chat messages whose content is a string. Seeds: fuzz/corpus/serve_request_fuzz.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/check.h"
#include "serve/request.h"

namespace {

using namespace tessera::serve;
constexpr int64_t kVocab = 512;

void check_error(const ApiError& e) {
  TS_CHECK_EQ(e.http_status, 400);
  TS_CHECK(!e.message.empty());
  const nlohmann::json json = e.to_json();
  TS_CHECK(json["error"]["message"].is_string() && json["error"].contains("param"));
  (void)json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void check_completion(const CompletionRequest& r) {
  if (r.endpoint == Endpoint::kChat) {
    TS_CHECK(r.messages.is_array() && !r.messages.empty());
    for (const auto& m : r.messages) TS_CHECK(m["role"].is_string() && m["content"].is_string());
  } else {
    TS_CHECK(!r.prompt.empty() || !r.prompt_ids.empty());
    for (const int32_t id : r.prompt_ids) TS_CHECK(id >= 0 && id < kVocab, id);
  }
  if (r.max_tokens) TS_CHECK(*r.max_tokens >= 1, *r.max_tokens);
  const tessera::SamplingParams& s = r.sampling;
  TS_CHECK(s.temperature >= 0 && s.temperature <= 2, s.temperature);
  TS_CHECK(s.top_p > 0 && s.top_p <= 1, s.top_p);
  TS_CHECK(s.top_k >= 0 && s.top_k <= kVocab, s.top_k);
  TS_CHECK(s.min_p >= 0 && s.min_p <= 1, s.min_p);
  TS_CHECK(std::abs(s.presence_penalty) <= 2 && std::abs(s.frequency_penalty) <= 2);
  TS_CHECK(s.repetition_penalty > 0 && s.repetition_penalty <= 10, s.repetition_penalty);
  for (const auto& [id, bias] : s.logit_bias) TS_CHECK(id >= 0 && id < kVocab && std::abs(bias) <= 100, id);
  TS_CHECK_LE(r.stop.size(), kMaxStopStrings);
  for (const std::string& stop : r.stop) TS_CHECK(!stop.empty());
  TS_CHECK(!r.include_usage || r.stream);
  TS_CHECK(r.n >= 1 && r.n <= kMaxChoices, r.n);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view body(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
    case 0:
    case 1: {
      const Endpoint endpoint = data[0] % 4 == 0 ? Endpoint::kCompletions : Endpoint::kChat;
      auto parsed = parse_completion_request(body, endpoint, kVocab);
      if (auto* e = std::get_if<ApiError>(&parsed)) {
        check_error(*e);
      } else {
        check_completion(std::get<CompletionRequest>(parsed));
      }
      break;
    }
    case 2: {
      auto parsed = parse_tokenize_request(body);
      if (auto* e = std::get_if<ApiError>(&parsed)) {
        check_error(*e);
      } else {
        const TokenizeRequest& r = std::get<TokenizeRequest>(parsed);
        TS_CHECK(r.prompt.has_value() || (r.messages.is_array() && !r.messages.empty()));
      }
      break;
    }
    default: {
      auto parsed = parse_detokenize_request(body, kVocab);
      if (auto* e = std::get_if<ApiError>(&parsed)) {
        check_error(*e);
      } else {
        for (const int32_t id : std::get<std::vector<int32_t>>(parsed)) TS_CHECK(id >= 0 && id < kVocab, id);
      }
      break;
    }
  }
  return 0;
}
