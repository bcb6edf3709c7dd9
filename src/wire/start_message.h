// The `start` control message of a request whose tokens are sampled on the last
// pipeline stage (control_frame.h): the sampling parameters, and the prompt when
// a repetition penalty needs it. Stage 0 passes it along ahead of the request's
// hidden states; the last stage keeps a Sampler seeded as the coordinator's
// would be, so a pipeline samples exactly the tokens one process would.
//
//   {"type": "start", "temperature": f, "top_k": i, "top_p": f, "min_p": f,
//    "repetition_penalty": f, "presence_penalty": f, "frequency_penalty": f,
//    "seed": u, "logit_bias": [[id, bias], ...], "prompt": [ids], "output": [ids]}
//
// "output" (optional; stage revision 3, control_frame.h) resumes a request the
// stages preempted: the answer so far, which the penalties count, and one draw
// of the sampler's generator skipped for each of its tokens, so the Sampler is
// in the state of the uninterrupted run's (Sampler::skip).
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

// The prompt travels only when the repetition penalty (!= 1) looks at it; the
// output when not empty.
nlohmann::json start_message(const SamplingParams& params, std::span<const int32_t> prompt,
                             std::span<const int32_t> output = {});
// Each refusal names the field: present, of its type; logit_bias entries are
// [integer id, number]. Ranges are the caller's (validate()).
Result<SamplingParams> sampling_from_json(const nlohmann::json& start);
// Every id in [0, vocab_size).
Result<std::vector<int32_t>> prompt_from_json(const nlohmann::json& start, int64_t vocab_size);
// "output" (absent: none): at most max_ids ids (checked on the array's length
// before an id is read), each in [0, vocab_size).
Result<std::vector<int32_t>> output_from_json(const nlohmann::json& start, int64_t vocab_size, size_t max_ids);

}  // namespace tessera::wire
