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
// Pure functions; safe from any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "core/status.h"
#include "sampling/sampler.h"

namespace tessera::dist {

nlohmann::json start_message(const SamplingParams& params, std::span<const int32_t> prompt);
// Both validate against the vocabulary and name the field they refuse.
Result<SamplingParams> sampling_from_json(const nlohmann::json& start, int64_t vocab_size);
Result<std::vector<int32_t>> prompt_from_json(const nlohmann::json& start, int64_t vocab_size);

}  // namespace tessera::dist
