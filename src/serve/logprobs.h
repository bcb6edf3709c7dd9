// Logprobs in OpenAI's shapes, from what the inference loop reports per token
// (SampledLogprobs: the log-softmax of the model's raw logits, as vLLM reports
// by default, not of the distribution after temperature, penalties or biases):
//
//   chat         {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
//   completions  {"tokens": [..], "token_logprobs": [..], "top_logprobs": [{token: logprob}],
//                 "text_offset": [..]}  (offsets in characters from the completion's start)
//
// A token's text is its own decoding (special tokens included); "bytes" are its
// UTF-8 bytes, whole even where the text alone would split a character. A
// logprob below -9999 (an underflow to -inf) is written as -9999, as vLLM does.
//
// One writer per choice: a stream calls write() per chunk, and text_offset runs
// on across chunks. Not thread-safe; the tokenizer is.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>

#include "engine/scheduler.h"
#include "serve/request.h"
#include "tokenizer/tokenizer.h"

namespace tessera::serve {

class LogprobsWriter {
 public:
  LogprobsWriter(Endpoint endpoint, const Tokenizer& tokenizer) : endpoint_(endpoint), tokenizer_(&tokenizer) {}
  nlohmann::json write(std::span<const SampledLogprobs> tokens);

 private:
  Endpoint endpoint_;
  const Tokenizer* tokenizer_;
  int64_t text_offset_ = 0;
};

}  // namespace tessera::serve
