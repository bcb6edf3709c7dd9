// The one generation loop: prefill the prompt (reusing what the runner already
// holds of it), then take the next token — sampled where the runner samples, or
// here from its logits — and stop at a stop id, when the caller says so (a stop
// string), at the token limit, at the runner's capacity or on cancel. A single
// process (LocalRunner on its Scheduler), a pipeline coordinator (its
// PipelineRunner) and, next, the server all generate through it; the command
// line only parses options and prints.
// Runs on the calling thread.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/sequence_runner.h"
#include "engine/text_model.h"
#include "sampling/sampler.h"

namespace tessera {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 256;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;              // generation ends before one of these (it is not returned)
  std::vector<std::string> stop_strings;      // generate_text only
  const std::atomic<bool>* cancel = nullptr;  // set by another thread (Ctrl-C) to stop early
  // Score as well: keep the logits [vocab] after the prompt and after each
  // generated token, including the last (max_tokens + 1 rows when nothing stops
  // it), sampling here. The runner must return logits (made without sampling).
  bool keep_logits = false;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids, the stop id excluded
  std::string finish_reason;    // "stop", "length" or "cancelled"
  std::vector<float> logits;    // with keep_logits: f32 [rows, vocab]
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// Token ids in, token ids out. `on_token` sees each token as it is taken and
// returns false to stop there (finish "stop"). What `runner` already holds of
// `request.prompt` (the common prefix of its tokens()) is reused; the rest of
// what it holds is dropped.
Result<GenerationResult> generate(SequenceRunner& runner, int64_t vocab_size, const GenerationRequest& request,
                                  const std::function<bool(int32_t)>& on_token);

// Text out: generate() with the model's stop ids, streaming decoded text to
// `on_text` (never inside a UTF-8 character) and stopping at a stop string,
// which is not streamed.
Result<GenerationResult> generate_text(const TextModel& model, SequenceRunner& runner, GenerationRequest request,
                                       const std::function<void(std::string_view)>& on_text);

}  // namespace tessera
