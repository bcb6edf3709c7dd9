// generate_text: the single-sequence generation loop on one host — prefill the
// prompt, then sample, stream text and stop at a stop id, a stop string, the
// token limit, the KV cache's end or a cancel request. The pipeline coordinator
// and the server reuse it with their own Forward and callbacks.
// Runs on the calling (inference) thread.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/text_model.h"
#include "model/sequence_runner.h"
#include "sampling/sampler.h"

namespace tessera {

struct GenerationRequest {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 256;
  SamplingParams sampling;
  std::vector<std::string> stop_strings;
  const std::atomic<bool>* cancel = nullptr;  // set by another thread (Ctrl-C) to stop early
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids, the stop id excluded
  std::string finish_reason;    // "stop", "length" or "cancelled"
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

// `runner` may already hold a prefix of `request.prompt` (its length() tokens), which is reused.
Result<GenerationResult> generate_text(const TextModel& model, SequenceRunner& runner, const GenerationRequest& request,
                                       const std::function<void(std::string_view)>& on_text);

}  // namespace tessera
