// ModelConfig: what the engine needs from a Hugging Face `config.json`.
//
// Both config styles in the wild are read:
//   transformers 4.x: top-level "rope_theta" and "rope_scaling" ({"rope_type" or
//                     legacy "type", "factor", ...} or null)
//   transformers 5.x: "rope_parameters": {"rope_type", "rope_theta", ...}
// A multimodal config that nests the language model under "text_config" is read
// from there. An unsupported model_type, rope type or activation is refused with
// kUnsupported naming it; a missing or out-of-range field with kInvalidInput
// naming the field. Value type.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace tessera {

enum class RopeType { kDefault, kLinear, kLlama3 };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;  // linear and llama3
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string model_type;  // "llama", "mistral", "qwen2", "qwen3"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // llama: bias on q, k, v and o projections
  bool mlp_bias = false;        // llama: bias on gate, up and down projections
  int64_t sliding_window = 0;   // mistral; 0 means full attention
};

Result<ModelConfig> parse_model_config(const nlohmann::json& json);
// Reads DIR/config.json; errors are prefixed with the file's path.
Result<ModelConfig> load_model_config(const std::string& dir);
Result<ModelConfig> load_model_config_file(const std::string& path);

}  // namespace tessera
