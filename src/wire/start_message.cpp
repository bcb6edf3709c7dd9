#include "wire/start_message.h"

#include <cstdint>
#include <string>
#include <utility>

#include "wire/control_frame.h"

namespace tessera::wire {

using json = nlohmann::json;

json start_message(const SamplingParams& params, std::span<const int32_t> prompt, std::span<const int32_t> output) {
  json bias = json::array();
  for (const auto& [id, value] : params.logit_bias) bias.push_back({id, value});
  json message = {{"type", "start"},
                  {"temperature", params.temperature},
                  {"top_k", params.top_k},
                  {"top_p", params.top_p},
                  {"min_p", params.min_p},
                  {"repetition_penalty", params.repetition_penalty},
                  {"presence_penalty", params.presence_penalty},
                  {"frequency_penalty", params.frequency_penalty},
                  {"seed", params.seed},
                  {"logit_bias", bias},
                  {"prompt", json::array()}};
  // Only the repetition penalty looks at the prompt.
  if (params.repetition_penalty != 1.0f) message["prompt"] = std::vector<int32_t>(prompt.begin(), prompt.end());
  if (!output.empty()) message["output"] = std::vector<int32_t>(output.begin(), output.end());
  return message;
}

namespace {

Result<float> number(const json& start, const char* name) {
  auto it = start.find(name);
  if (it == start.end() || !it->is_number())
    return Status::invalid_input(std::string("start: ") + name + " must be a number");
  return it->get<float>();
}

}  // namespace

Result<SamplingParams> sampling_from_json(const json& start) {
  SamplingParams params;
  TS_ASSIGN_OR_RETURN(params.temperature, number(start, "temperature"));
  TS_ASSIGN_OR_RETURN(params.top_k, field<int32_t>(start, "top_k"));
  TS_ASSIGN_OR_RETURN(params.top_p, number(start, "top_p"));
  TS_ASSIGN_OR_RETURN(params.min_p, number(start, "min_p"));
  TS_ASSIGN_OR_RETURN(params.repetition_penalty, number(start, "repetition_penalty"));
  TS_ASSIGN_OR_RETURN(params.presence_penalty, number(start, "presence_penalty"));
  TS_ASSIGN_OR_RETURN(params.frequency_penalty, number(start, "frequency_penalty"));
  TS_ASSIGN_OR_RETURN(params.seed, field<uint64_t>(start, "seed"));
  auto bias = start.find("logit_bias");
  if (bias == start.end() || !bias->is_array()) return Status::invalid_input("start: logit_bias must be an array");
  for (const json& pair : *bias) {
    if (!pair.is_array() || pair.size() != 2 || !pair[0].is_number_integer() || !pair[1].is_number()) {
      return Status::invalid_input("start: logit_bias entries must be [token id, bias]");
    }
    if (pair[0].is_number_unsigned() ? !std::in_range<int32_t>(pair[0].get<uint64_t>())
                                     : !std::in_range<int32_t>(pair[0].get<int64_t>()))
      return Status::invalid_input("start: logit_bias token id " + pair[0].dump() + " is out of range");
    params.logit_bias[pair[0].get<int32_t>()] = pair[1].get<float>();
  }
  return params;
}

namespace {

Result<std::vector<int32_t>> token_ids(const json& array, const std::string& name, int64_t vocab_size) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (const json& id : array) {
    if (!id.is_number_integer() || (id.is_number_unsigned() && id.get<uint64_t>() > INT64_MAX) ||
        id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size) {
      return Status::invalid_input("start: " + name + "[" + std::to_string(ids.size()) + "] is not a token id below " +
                                   std::to_string(vocab_size));
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

}  // namespace

Result<std::vector<int32_t>> prompt_from_json(const json& start, int64_t vocab_size) {
  auto prompt = start.find("prompt");
  if (prompt == start.end() || !prompt->is_array()) return Status::invalid_input("start: prompt must be an array");
  return token_ids(*prompt, "prompt", vocab_size);
}

Result<std::vector<int32_t>> output_from_json(const json& start, int64_t vocab_size, size_t max_ids) {
  auto output = start.find("output");
  if (output == start.end()) return std::vector<int32_t>{};
  if (!output->is_array()) return Status::invalid_input("start: output must be an array");
  if (output->size() > max_ids)
    return Status::invalid_input("start: output has " + std::to_string(output->size()) + " ids, more than the " +
                                 std::to_string(max_ids) + " positions of a request");
  return token_ids(*output, "output", vocab_size);
}

}  // namespace tessera::wire
