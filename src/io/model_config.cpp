// Reads the fields every family shares from a Hugging Face config.json; the
// family's own fields are read by its file in model/arch/ from ModelConfig::raw.
#include "io/model_config.h"

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/text_file.h"
#include "io/gguf_model.h"

namespace tessera {

using nlohmann::json;

Status read_config_int(const json& j, const char* key, int64_t min, int64_t max, std::optional<int64_t> fallback,
                       int64_t& out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!fallback) return Status::invalid_input(std::string("field '") + key + "' is missing");
    out = *fallback;
    return {};
  }
  if (!it->is_number_integer()) return Status::invalid_input(std::string("field '") + key + "' is not an integer");
  const auto value = it->get<int64_t>();
  if (value < min || value > max)
    return Status::invalid_input(std::string("field '") + key + "' = " + std::to_string(value) + " is outside [" +
                                 std::to_string(min) + ", " + std::to_string(max) + "]");
  out = value;
  return {};
}

Status read_config_double(const json& j, const char* key, double fallback, double& out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    out = fallback;
    return {};
  }
  if (!it->is_number()) return Status::invalid_input(std::string("field '") + key + "' is not a number");
  out = it->get<double>();
  return {};
}

Status read_config_bool(const json& j, const char* key, bool fallback, bool& out) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    out = fallback;
    return {};
  }
  if (!it->is_boolean()) return Status::invalid_input(std::string("field '") + key + "' is not a boolean");
  out = it->get<bool>();
  return {};
}

namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;

Status read_factors(const json& params, const char* key, std::vector<double>& out) {
  const auto it = params.find(key);
  if (it == params.end() || !it->is_array() || it->empty())
    return Status::invalid_input(std::string("longrope '") + key + "' is missing or not a list of numbers");
  out.clear();
  for (const json& value : *it) {
    if (!value.is_number() || !(value.get<double>() > 0))
      return Status::invalid_input(std::string("longrope '") + key + "' holds a value that is not a positive number");
    out.push_back(value.get<double>());
  }
  return {};
}

// longrope (Phi-3): transformers' _compute_longrope_parameters. `top` is the
// config object, where Phi-3's 4.x configs keep original_max_position_embeddings.
Status read_longrope(const json& params, const json& top, RopeConfig& rope) {
  TS_RETURN_IF_ERROR(read_factors(params, "short_factor", rope.short_factor));
  TS_RETURN_IF_ERROR(read_factors(params, "long_factor", rope.long_factor));
  if (rope.short_factor.size() != rope.long_factor.size())
    return Status::invalid_input("longrope 'short_factor' and 'long_factor' differ in length");
  int64_t top_original = 0;
  TS_RETURN_IF_ERROR(read_config_int(top, "original_max_position_embeddings", 1, kMaxDim, 0, top_original));
  TS_RETURN_IF_ERROR(read_config_int(params, "original_max_position_embeddings", 1, kMaxDim,
                                     top_original > 0 ? std::optional<int64_t>(top_original) : std::nullopt,
                                     rope.original_max_position_embeddings));
  int64_t max_positions = 0;
  TS_RETURN_IF_ERROR(read_config_int(top, "max_position_embeddings", 1, int64_t{1} << 30, 2048, max_positions));
  const double original = static_cast<double>(rope.original_max_position_embeddings);
  TS_RETURN_IF_ERROR(read_config_double(params, "factor", static_cast<double>(max_positions) / original, rope.factor));
  const double suggested = rope.factor <= 1.0 ? 1.0 : std::sqrt(1 + std::log(rope.factor) / std::log(original));
  TS_RETURN_IF_ERROR(read_config_double(params, "attention_factor", suggested, rope.attention_factor));
  return {};
}

// `params` is rope_parameters (5.x) or rope_scaling (4.x); theta is read by the caller.
Status read_rope_scaling(const json& params, const json& top, RopeConfig& rope) {
  if (params.is_null()) return {};
  if (!params.is_object()) return Status::invalid_input("rope scaling parameters are not an object");
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    const auto it = params.find(key);
    if (it != params.end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  if (type == "default") {
    rope.type = RopeType::kDefault;
  } else if (type == "linear") {
    rope.type = RopeType::kLinear;
  } else if (type == "llama3") {
    rope.type = RopeType::kLlama3;
  } else if (type == "longrope") {
    rope.type = RopeType::kLongRope;
    return read_longrope(params, top, rope);
  } else {
    return Status::unsupported("rope type '" + type +
                               "' is not supported (supported: default, linear, llama3, longrope)");
  }
  if (rope.type == RopeType::kDefault) return {};
  TS_RETURN_IF_ERROR(read_config_double(params, "factor", 1.0, rope.factor));
  if (!(rope.factor >= 1.0)) return Status::invalid_input("rope 'factor' must be >= 1");
  if (rope.type == RopeType::kLlama3) {
    TS_RETURN_IF_ERROR(read_config_double(params, "low_freq_factor", 1.0, rope.low_freq_factor));
    TS_RETURN_IF_ERROR(read_config_double(params, "high_freq_factor", 4.0, rope.high_freq_factor));
    TS_RETURN_IF_ERROR(read_config_int(params, "original_max_position_embeddings", 1, kMaxDim, 8192,
                                       rope.original_max_position_embeddings));
    if (!(rope.high_freq_factor > rope.low_freq_factor))
      return Status::invalid_input("rope 'high_freq_factor' must exceed 'low_freq_factor'");
  }
  return {};
}

// One transformers 5 rope_parameters object.
Status read_rope_parameters(const json& params, const json& top, RopeConfig& rope) {
  if (!params.is_object()) return Status::invalid_input("field 'rope_parameters' is not an object");
  TS_RETURN_IF_ERROR(read_config_double(params, "rope_theta", 10000.0, rope.theta));
  TS_RETURN_IF_ERROR(read_rope_scaling(params, top, rope));
  if (!(rope.theta > 1.0)) return Status::invalid_input("field 'rope_theta' must be > 1");
  return {};
}

Status read_rope(const json& j, RopeConfig& rope, std::optional<RopeConfig>& sliding_rope) {
  const auto params = j.find("rope_parameters");
  if (params != j.end() && !params->is_null()) {  // transformers 5.x
    const auto full = params->is_object() ? params->find("full_attention") : params->end();
    if (full == params->end()) return read_rope_parameters(*params, j, rope);
    TS_RETURN_IF_ERROR(read_rope_parameters(*full, j, rope).with_context("rope_parameters.full_attention"));
    const auto sliding = params->find("sliding_attention");
    if (sliding != params->end()) {
      sliding_rope.emplace();
      TS_RETURN_IF_ERROR(
          read_rope_parameters(*sliding, j, *sliding_rope).with_context("rope_parameters.sliding_attention"));
    }
    return {};
  }
  // transformers 4.x
  TS_RETURN_IF_ERROR(read_config_double(j, "rope_theta", 10000.0, rope.theta));
  const auto scaling = j.find("rope_scaling");
  if (scaling != j.end()) TS_RETURN_IF_ERROR(read_rope_scaling(*scaling, j, rope));
  if (!(rope.theta > 1.0)) return Status::invalid_input("field 'rope_theta' must be > 1");
  return {};
}

}  // namespace

const json& ModelConfig::fields() const {
  static const json kEmpty = json::object();
  return raw ? *raw : kEmpty;
}

Result<ModelConfig> parse_model_config(const json& root, ModelTypeCheck check) {
  if (!root.is_object()) return Status::invalid_input("config is not a JSON object");
  const auto text = root.find("text_config");
  const json& j = (text != root.end() && text->is_object()) ? *text : root;

  ModelConfig c;
  const auto type = j.find("model_type");
  if (type == j.end() || !type->is_string()) return Status::invalid_input("field 'model_type' is missing");
  c.model_type = type->get<std::string>();
  if (check) TS_RETURN_IF_ERROR(check(c.model_type));

  TS_RETURN_IF_ERROR(read_config_int(j, "vocab_size", 1, int64_t{1} << 31, std::nullopt, c.vocab_size));
  TS_RETURN_IF_ERROR(read_config_int(j, "hidden_size", 1, kMaxDim, std::nullopt, c.hidden_size));
  TS_RETURN_IF_ERROR(read_config_int(j, "intermediate_size", 1, kMaxDim, std::nullopt, c.intermediate_size));
  TS_RETURN_IF_ERROR(read_config_int(j, "num_hidden_layers", 1, 4096, std::nullopt, c.num_hidden_layers));
  TS_RETURN_IF_ERROR(read_config_int(j, "num_attention_heads", 1, 4096, std::nullopt, c.num_attention_heads));
  TS_RETURN_IF_ERROR(read_config_int(j, "num_key_value_heads", 1, 4096, c.num_attention_heads, c.num_key_value_heads));
  if (c.hidden_size % c.num_attention_heads != 0 && j.find("head_dim") == j.end())
    return Status::invalid_input("'hidden_size' is not a multiple of 'num_attention_heads' and 'head_dim' is absent");
  TS_RETURN_IF_ERROR(read_config_int(j, "head_dim", 2, 4096, c.hidden_size / c.num_attention_heads, c.head_dim));
  if (c.head_dim % 2 != 0) return Status::invalid_input("'head_dim' must be even for rotary embeddings");
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    return Status::invalid_input("'num_attention_heads' (" + std::to_string(c.num_attention_heads) +
                                 ") is not a multiple of 'num_key_value_heads' (" +
                                 std::to_string(c.num_key_value_heads) + ")");
  TS_RETURN_IF_ERROR(
      read_config_int(j, "max_position_embeddings", 1, int64_t{1} << 30, 2048, c.max_position_embeddings));
  TS_RETURN_IF_ERROR(read_config_double(j, "rms_norm_eps", 1e-6, c.rms_norm_eps));
  if (!(c.rms_norm_eps > 0)) return Status::invalid_input("field 'rms_norm_eps' must be > 0");
  TS_RETURN_IF_ERROR(read_rope(j, c.rope, c.sliding_rope));

  // Multimodal wrappers often keep tie_word_embeddings at the top level only.
  const json& tie_source = j.contains("tie_word_embeddings") ? j : root;
  TS_RETURN_IF_ERROR(read_config_bool(tie_source, "tie_word_embeddings", false, c.tie_word_embeddings));

  c.raw = std::make_shared<const json>(j);
  return c;
}

Result<ModelConfig> load_model_config(const std::string& dir, ModelTypeCheck check) {
  if (is_gguf_file(dir)) {
    TS_ASSIGN_OR_RETURN(const GgufFile file, GgufFile::open(dir));
    auto json = gguf_hf_config(file);
    auto config = json.ok() ? parse_model_config(*json, check) : Result<ModelConfig>(json.status());
    if (!config.ok()) return config.status().with_context(dir);
    return config;
  }
  return load_model_config_file(dir + "/config.json", check);
}

Result<ModelConfig> load_model_config_file(const std::string& path, ModelTypeCheck check) {
  TS_ASSIGN_OR_RETURN(const json j, read_json_file(path));
  auto config = parse_model_config(j, check);
  if (!config.ok()) return config.status().with_context(path);
  return config;
}

}  // namespace tessera
