// The `start` control message of a request whose tokens are sampled on the last
// pipeline stage (control_frame.h): the sampling parameters, and the prompt when
// a repetition penalty needs it. Stage 0 passes it along ahead of the request's
// hidden states; the last stage keeps a Sampler seeded as the coordinator's
// would be, so a pipeline samples exactly the tokens one process would.
//
//   {"type": "start", "temperature": f, "top_k": i, "top_p": f, "min_p": f,
//    "repetition_penalty": f, "presence_penalty": f, "frequency_penalty": f,
//    "seed": u, "logit_bias": [[id, bias], ...], "prompt": [ids]}
//
// wire knows no Sampler: StartParams holds the sampling parameters as plain
// numbers, checked here for presence and type only. The pipeline converts them
// to SamplingParams and validates their ranges (pipeline/start_message.h).
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "core/status.h"

namespace tessera::wire {

// The fields of sampling/sampler.h's SamplingParams, with the same defaults.
struct StartParams {
  float temperature = 0.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  std::map<int32_t, float> logit_bias;
  uint64_t seed = 0;
};

// The prompt travels only when the repetition penalty (!= 1) looks at it.
nlohmann::json start_message(const StartParams& params, std::span<const int32_t> prompt);
// Each refusal names the field: present, of its type; logit_bias entries are
// [integer id, number]. Ranges are the caller's (SamplingParams' validate).
Result<StartParams> start_params_from_json(const nlohmann::json& start);
// Every id in [0, vocab_size).
Result<std::vector<int32_t>> prompt_from_json(const nlohmann::json& start, int64_t vocab_size);

}  // namespace tessera::wire
