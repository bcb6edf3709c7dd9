// ModelConfig: the fields of a Hugging Face `config.json` that every supported
// family shares (sizes, heads, rotary, norm epsilon, tied embeddings), and the
// JSON object they came from, so that a family (model/arch/<family>.cpp) reads
// its own fields there. This file knows no family by name.
//
// Both config styles in the wild are read:
//   transformers 4.x: top-level "rope_theta" and "rope_scaling" ({"rope_type" or
//                     legacy "type", "factor", ...} or null)
//   transformers 5.x: "rope_parameters": {"rope_type", "rope_theta", ...}, or one
//                     such object per layer type (sliding_rope below)
// A multimodal config that nests the language model under "text_config" is read
// from there. An unsupported rope type is refused with kUnsupported naming it; a
// missing or out-of-range field with kInvalidInput naming the field. Value type.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/status.h"

namespace tessera {

enum class RopeType { kDefault, kLinear, kLlama3, kLongRope };

struct RopeConfig {
  RopeType type = RopeType::kDefault;
  double theta = 10000.0;
  double factor = 1.0;  // linear, llama3 and longrope
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  // llama3 and longrope (longrope: from the rope parameters or the top level, as Phi-3 writes it):
  int64_t original_max_position_embeddings = 8192;
  // longrope only: one factor per rotary pair, the short ones for positions up
  // to original_max_position_embeddings, the long ones past it; cos and sin
  // multiplied by attention_factor (absent: sqrt(1 + ln(factor) / ln(original)),
  // with factor absent: max_position_embeddings / original).
  std::vector<double> short_factor, long_factor;
  double attention_factor = 1.0;
};

struct ModelConfig {
  std::string model_type;  // as written; the model layer's registry says whether it is supported
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
  // transformers 5 writes rope_parameters per layer type for models that mix
  // them ({"full_attention": {...}, "sliding_attention": {...}}): `rope` is then
  // the full layers' and this the sliding layers'.
  std::optional<RopeConfig> sliding_rope;
  bool tie_word_embeddings = false;
  // The language model's JSON object (text_config when nested); null for a config
  // built in code. Read it through fields().
  std::shared_ptr<const nlohmann::json> raw;

  // The language model's JSON object, or an empty object when there is none.
  const nlohmann::json& fields() const;
};

// Called with model_type before any other field is read, so that an unknown family
// is refused by its name rather than by whichever shared field it happens to lack.
// io knows no family: the model layer passes its registry (check_model_type in
// model/arch/arch.h). Null: any model_type is accepted here.
using ModelTypeCheck = Status (*)(const std::string& model_type);

Result<ModelConfig> parse_model_config(const nlohmann::json& json, ModelTypeCheck check = nullptr);
// Reads DIR/config.json, or the metadata of DIR when it is a GGUF file (io/gguf_model.h);
// errors are prefixed with the file's path.
Result<ModelConfig> load_model_config(const std::string& dir, ModelTypeCheck check = nullptr);
Result<ModelConfig> load_model_config_file(const std::string& path, ModelTypeCheck check = nullptr);

// Readers of one field of a config object, shared with the families' own fields.
// Absent or null: `fallback` (for read_int, nullopt makes the field required).
// A value of the wrong type or outside [min, max] is kInvalidInput naming the field.
Status read_config_int(const nlohmann::json& object, const char* key, int64_t min, int64_t max,
                       std::optional<int64_t> fallback, int64_t& out);
Status read_config_double(const nlohmann::json& object, const char* key, double fallback, double& out);
Status read_config_bool(const nlohmann::json& object, const char* key, bool fallback, bool& out);

}  // namespace tessera
