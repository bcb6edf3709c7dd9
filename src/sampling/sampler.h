// Sampler: turns one row of logits into the next token id, with the controls
// serving engines share (OpenAI, vLLM, transformers):
//
//   logit_bias -> repetition penalty -> presence/frequency penalties
//   -> temperature (0: greedy) -> top-k -> top-p -> min-p -> draw
//
// Repetition penalty follows transformers (over prompt and output: a positive
// logit is divided by it, a negative one multiplied); presence and frequency
// penalties follow OpenAI (over output tokens: subtract presence once, and
// frequency times the count). Draws come from a generator seeded by `seed`, so
// the same seed, logits and history give the same tokens. One Sampler per
// sequence; not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"
#include "sampling/sampling_params.h"

namespace tessera {

// kInvalidInput naming the parameter when a value is out of range.
Status validate(const SamplingParams& params, int64_t vocab_size);

class Sampler {
 public:
  // `params` must have passed validate().
  Sampler(SamplingParams params, int64_t vocab_size);

  // Picks the next token. `logits` [vocab] is modified (biases, penalties, scaling).
  // `prompt` and `output` are the tokens so far, for the penalties.
  int32_t sample(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output);
  // Puts the generator where `samples` calls of sample() leave it: a sample
  // with a temperature takes exactly one draw (greedy ones none), whatever its
  // logits. How a preempted request's sampler resumes on another process.
  void skip(uint64_t samples);
  // Whether sample() is the argmax of the raw logits: greedy, with no bias and
  // no penalty. A caller may then take the argmax where the logits are.
  bool plain_greedy() const;

 private:
  void apply_penalties(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output);

  SamplingParams params_;
  int64_t vocab_size_;
  std::mt19937_64 rng_;
  std::vector<int32_t> counts_;                        // scratch: output count per token
  std::vector<std::pair<float, int32_t>> candidates_;  // scratch: (probability, id)
};

}  // namespace tessera
