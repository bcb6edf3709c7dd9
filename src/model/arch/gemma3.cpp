// Gemma 3 text (transformers Gemma3ForCausalLM; the language model of a gemma3
// checkpoint, read from its text_config): the Llama layer with
//   - embeddings multiplied by sqrt(hidden_size) (in the weights' dtype);
//   - RMSNorm weights stored as w - 1 (every norm computes x_normed * (1 + w));
//   - norms before and after attention and the MLP (input_layernorm,
//     post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm);
//   - q/k norm per head, GELU-tanh MLP (`hidden_activation`);
//   - scores scaled by `query_pre_attn_scalar`^-0.5;
//   - `layer_types` (or every `sliding_window_pattern`-th layer full) mixing
//     windowed layers, rotated with the local base (`rope_local_base_freq`, or
//     rope_parameters.sliding_attention), and full layers with the global rope;
//   - the logits soft-capped when `final_logit_softcapping` is set
//     (`attn_logit_softcapping` is read by transformers' Gemma3 but never
//     applied to the scores; tessera does the same).
// `use_bidirectional_attention: true` (EmbeddingGemma) is refused, and so is a
// config silent on rope_theta or head_dim, whose Gemma3TextConfig defaults
// differ from the shared ones.
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"

namespace tessera {

namespace {

// layer_types, or the pattern transformers derives when it is absent.
Status read_layer_types(const ModelConfig& config, std::vector<bool>& sliding) {
  const nlohmann::json& fields = config.fields();
  const auto types = fields.find("layer_types");
  sliding.clear();
  if (types != fields.end() && !types->is_null()) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != config.num_hidden_layers)
      return Status::invalid_input("field 'layer_types' is not a list of num_hidden_layers entries");
    for (const nlohmann::json& type : *types) {
      const std::string name = type.is_string() ? type.get<std::string>() : type.dump();
      if (name != "sliding_attention" && name != "full_attention")
        return Status::unsupported("layer_types entry '" + name +
                                   "' is not supported (supported: sliding_attention, full_attention)");
      sliding.push_back(name == "sliding_attention");
    }
    return {};
  }
  int64_t pattern = 6;
  const char* key = fields.contains("sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
  TS_RETURN_IF_ERROR(read_config_int(fields, key, 1, 1 << 20, 6, pattern));
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) sliding.push_back((l + 1) % pattern != 0);
  return {};
}

}  // namespace

Result<ArchSpec> gemma3_arch(const ModelConfig& config) {
  const auto& fields = config.fields();
  ArchSpec spec{.family = "gemma3_text",
                .norm = NormPlacement::kSandwich,
                .activation = Activation::kGeluTanh,
                .qk_norm = true,
                .norm_offset = 1.0f,
                .scale_embeddings = true};
  const auto act = fields.find("hidden_activation");
  if (act != fields.end() && !(act->is_string() && act->get<std::string>() == "gelu_pytorch_tanh"))
    return Status::unsupported("hidden_activation '" + act->dump() +
                               "' is not supported (supported: gelu_pytorch_tanh)");
  // Gemma3TextConfig's defaults for two shared fields are not the ones io applies
  // (rope_theta 1,000,000 against 10,000; head_dim 256 against hidden / heads):
  // a config silent on them would rotate with the wrong base or miss the shapes.
  const auto stated = [&](const char* key) {
    const auto it = fields.find(key);
    return it != fields.end() && !it->is_null();
  };
  if (!stated("rope_theta") && !stated("rope_parameters"))
    return Status::invalid_input(
        "field 'rope_theta' is missing: gemma3's default (1000000) is not the shared one (10000); state it");
  if (!stated("head_dim"))
    return Status::invalid_input(
        "field 'head_dim' is missing: gemma3's default (256) is not hidden_size / "
        "num_attention_heads; state it");
  bool attention_bias = false, bidirectional = false;
  TS_RETURN_IF_ERROR(read_config_bool(fields, "attention_bias", false, attention_bias));
  spec.qkv_bias = spec.o_bias = attention_bias;
  TS_RETURN_IF_ERROR(read_config_bool(fields, "use_bidirectional_attention", false, bidirectional));
  if (bidirectional) return Status::unsupported("'use_bidirectional_attention: true' is not supported for gemma3");
  TS_RETURN_IF_ERROR(read_config_double(fields, "query_pre_attn_scalar", 256, spec.query_pre_attn_scalar));
  if (!(spec.query_pre_attn_scalar > 0)) return Status::invalid_input("field 'query_pre_attn_scalar' must be > 0");
  // transformers' Gemma3Attention keeps attn_logit_softcapping but never passes
  // it to the attention: the scores are not capped, whatever the field says.
  TS_RETURN_IF_ERROR(read_config_double(fields, "final_logit_softcapping", 0, spec.final_softcap));
  if (spec.final_softcap < 0) return Status::invalid_input("field 'final_logit_softcapping' must be positive or null");
  TS_RETURN_IF_ERROR(read_config_int(fields, "sliding_window", 1, int64_t{1} << 30, 4096, spec.sliding_window));
  TS_RETURN_IF_ERROR(read_layer_types(config, spec.sliding_layers));
  if (config.sliding_rope) {
    spec.sliding_rope = config.sliding_rope;
  } else {
    spec.sliding_rope = RopeConfig{};
    TS_RETURN_IF_ERROR(read_config_double(fields, "rope_local_base_freq", 10000.0, spec.sliding_rope->theta));
    if (!(spec.sliding_rope->theta > 1.0)) return Status::invalid_input("field 'rope_local_base_freq' must be > 1");
  }
  // Gemma3TextConfig ties the LM head to the embedding unless told otherwise
  // (the published gemma-3 configs leave it out of text_config).
  const auto tied = fields.find("tie_word_embeddings");
  if (tied == fields.end() || tied->is_null()) spec.tie_word_embeddings = true;
  spec.names.post_attn_norm = "post_attention_layernorm.weight";
  spec.names.ffn_norm = "pre_feedforward_layernorm.weight";
  spec.names.post_ffn_norm = "post_feedforward_layernorm.weight";
  return spec;
}

}  // namespace tessera
