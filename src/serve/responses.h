// The OpenAI response bodies of /v1/completions and /v1/chat/completions, whole
// and as Server-Sent Events chunks:
//
//   completions  {"id": "cmpl-..", "object": "text_completion", "created", "model",
//                 "choices": [{"index": 0, "text", "logprobs", "finish_reason"}], "usage"}
//   chat         {"id": "chatcmpl-..", "object": "chat.completion", ...,
//                 "choices": [{"index": 0, "message": {"role": "assistant", "content"},
//                              "logprobs", "finish_reason"}], "usage"}
//   logprobs     null unless asked; then logprobs.h's shape (in a chunk: its tokens')
//   chat chunks  "object": "chat.completion.chunk", choices[0].delta: {"role"} first,
//                then {"content"}; completion chunks are "text_completion" objects.
//   n > 1        one choice per sequence, "index" 0..n-1; a chunk carries one choice.
//   usage        {"prompt_tokens", "completion_tokens", "total_tokens"}; streamed as a
//                last chunk with "choices": [] when stream_options.include_usage.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "serve/request.h"

namespace tessera::serve {

struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // "cmpl-<hex>" or "chatcmpl-<hex>"
  int64_t created = 0;
  std::string model;
};

// A fresh header: a random id and the current time.
ResponseHeader new_response_header(Endpoint endpoint, std::string model);
// Seconds since the Unix epoch: the `created` of responses and of /v1/models' entries.
int64_t unix_seconds();

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens);
struct Choice {
  std::string text;
  std::string finish_reason;
  nlohmann::json logprobs = nullptr;  // logprobs.h's shape, or null when not asked
};
nlohmann::json full_response(const ResponseHeader& h, const std::vector<Choice>& choices, int64_t prompt_tokens,
                             int64_t completion_tokens);
// One streamed chunk of choice `index`; `role` adds the chat delta's role (a choice's first chunk).
nlohmann::json stream_chunk(const ResponseHeader& h, size_t index, const std::string& text,
                            const std::optional<std::string>& finish_reason, bool role = false,
                            nlohmann::json logprobs = nullptr);
nlohmann::json usage_chunk(const ResponseHeader& h, int64_t prompt_tokens, int64_t completion_tokens);

// JSON as text; invalid UTF-8 from a model becomes U+FFFD rather than an exception.
std::string dump(const nlohmann::json& json);
// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& json);

}  // namespace tessera::serve
