// SamplingParams: the controls of one request's sampler (sampler.h), as plain
// numbers, so that codecs (wire/start_message.h) can carry them without the
// sampler. Value type.
#pragma once

#include <cstdint>
#include <map>

namespace tessera {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax after biases and penalties)
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::map<int32_t, float> logit_bias;
  uint64_t seed = 0;
};

}  // namespace tessera
