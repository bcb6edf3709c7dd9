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
// wire knows no Sampler: the SamplingParams (plain numbers) are checked here for
// presence and type only; their ranges are the receiver's (sampling's validate(),
// which Scheduler::start runs).
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <vector>

#include "core/status.h"
#include "sampling/sampling_params.h"

namespace tessera::wire {

// The prompt travels only when the repetition penalty (!= 1) looks at it.
nlohmann::json start_message(const SamplingParams& params, std::span<const int32_t> prompt);
// Each refusal names the field: present, of its type; logit_bias entries are
// [integer id, number]. Ranges are the caller's (validate()).
Result<SamplingParams> sampling_from_json(const nlohmann::json& start);
// Every id in [0, vocab_size).
Result<std::vector<int32_t>> prompt_from_json(const nlohmann::json& start, int64_t vocab_size);

}  // namespace tessera::wire
