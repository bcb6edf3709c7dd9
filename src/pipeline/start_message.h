// The `start` message (wire/start_message.h) as the coordinator writes it and the
// last stage reads it: SamplingParams to and from wire's plain StartParams, with
// the ranges checked by sampling's validate() against the stage's vocabulary.
//
// Pure functions; safe from any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <span>

#include "core/status.h"
#include "sampling/sampler.h"
#include "wire/start_message.h"

namespace tessera::pipeline {

nlohmann::json start_message(const SamplingParams& params, std::span<const int32_t> prompt);
// The fields as wire::start_params_from_json reads them, then validate(); every
// refusal names the field ("start: ...").
Result<SamplingParams> sampling_from_json(const nlohmann::json& start, int64_t vocab_size);
using wire::prompt_from_json;

}  // namespace tessera::pipeline
