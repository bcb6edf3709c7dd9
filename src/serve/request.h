// The request bodies of POST /v1/completions and POST /v1/chat/completions,
// parsed and checked before anything reaches the engine. Every field's type and
// range is checked here, and an error names the field (ApiError::param), so a
// bad request never costs the engine a step.
//
// Fields read (all others are ignored, as OpenAI's own server ignores unknown ones):
//   model                    string (echoed back; the server runs one model)
//   prompt                   completions: a string, an array of one string, or an array of token ids
//   messages                 chat: [{role, content}], content a string, null or an array of
//                            {"type": "text", "text": ...} parts (joined)
//   max_tokens, max_completion_tokens   integer >= 1 (the second wins when both are given)
//   temperature [0, 2], top_p (0, 1], top_k >= -1 (0 and -1: off), min_p [0, 1],
//   presence_penalty, frequency_penalty [-2, 2], repetition_penalty > 0,
//   logit_bias {"token id": bias in [-100, 100]}, seed (integer)
//   stop                     a string or an array of at most 16 non-empty strings
//   n                        integer in [1, kMaxChoices]: choices, each its own sequence
//   stream, stream_options.include_usage, user
//   logprobs                 chat: a boolean, with top_logprobs in [0, kMaxLogprobs];
//                            completions: an integer in [0, kMaxLogprobs] (top tokens per token)
//   cache_salt               a non-empty string: only requests with the same salt share cached prefixes
//   ignore_eos               a boolean (vLLM's): the model's end-of-text ids do not end the answer
//                            (benchmarks use it for answers of a fixed length)
// Refused with a clear 400 rather than silently ignored: echo, best_of > 1,
// suffix, tools, response_format.
//
// Pure functions; safe from any thread. fuzz/serve_request_fuzz.cpp fuzzes them.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "sampling/sampling_params.h"
#include "serve/api_error.h"

namespace tessera::serve {

enum class Endpoint { kCompletions, kChat };

inline constexpr size_t kMaxStopStrings = 16;
inline constexpr int kMaxChoices = 16;
inline constexpr int kMaxLogprobs = 20;  // top logprobs per token (vLLM's default max_logprobs)

struct CompletionRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;
  std::string prompt;                 // completions: the text (when prompt_ids is empty)
  std::vector<int32_t> prompt_ids;    // completions: token ids given as such
  nlohmann::ordered_json messages;    // chat: [{role, content: string}], normalized
  std::optional<int64_t> max_tokens;  // absent: the server's default
  SamplingParams sampling;
  bool seed_given = false;  // without one, the server draws a seed per request
  std::vector<std::string> stop;
  int n = 1;  // choices, each its own sequence
  bool stream = false;
  bool include_usage = false;
  std::string user;
  std::string cache_salt;   // the prefix cache's salt (vLLM's cache_salt): empty, none
  int logprobs = -1;        // -1: none; else the sampled token's logprob and this many top ones
  bool ignore_eos = false;  // vLLM's: generate past the model's end-of-text ids
};

// `vocab_size` bounds the token ids of prompt and logit_bias.
std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body, Endpoint endpoint,
                                                                   int64_t vocab_size);

// POST /tokenize: {"prompt": string} or {"messages": [...]} (through the chat
// template), optional "add_special_tokens" (bool, default true for a prompt).
struct TokenizeRequest {
  std::optional<std::string> prompt;
  nlohmann::ordered_json messages;  // when prompt is absent
  bool add_special_tokens = true;
};
std::variant<TokenizeRequest, ApiError> parse_tokenize_request(std::string_view body);

// POST /detokenize: {"tokens": [ids]}.
std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(std::string_view body, int64_t vocab_size);

}  // namespace tessera::serve
