#include "pipeline/start_message.h"

namespace tessera::pipeline {

nlohmann::json start_message(const SamplingParams& params, std::span<const int32_t> prompt) {
  wire::StartParams start;
  start.temperature = params.temperature;
  start.top_k = params.top_k;
  start.top_p = params.top_p;
  start.min_p = params.min_p;
  start.repetition_penalty = params.repetition_penalty;
  start.presence_penalty = params.presence_penalty;
  start.frequency_penalty = params.frequency_penalty;
  start.logit_bias = params.logit_bias;
  start.seed = params.seed;
  return wire::start_message(start, prompt);
}

Result<SamplingParams> sampling_from_json(const nlohmann::json& start, int64_t vocab_size) {
  TS_ASSIGN_OR_RETURN(wire::StartParams fields, wire::start_params_from_json(start));
  SamplingParams params;
  params.temperature = fields.temperature;
  params.top_k = fields.top_k;
  params.top_p = fields.top_p;
  params.min_p = fields.min_p;
  params.repetition_penalty = fields.repetition_penalty;
  params.presence_penalty = fields.presence_penalty;
  params.frequency_penalty = fields.frequency_penalty;
  params.logit_bias = std::move(fields.logit_bias);
  params.seed = fields.seed;
  TS_RETURN_IF_ERROR(validate(params, vocab_size).with_context("start"));
  return params;
}

}  // namespace tessera::pipeline
