// GLM-4.5 / GLM-4.5-Air (transformers Glm4MoeForCausalLM, model_type glm4_moe).
// Unlike GLM-4 (glm4.cpp) its layer is Llama's pre-norm layer (no post-block
// norms, separate gate_proj and up_proj) with
//   - biases on q, k and v when `attention_bias` (never on o), RMSNorm over
//     each head of q and k when `use_qk_norm`;
//   - rotary embeddings on the first `partial_rotary_factor` (default 0.5) of
//     each head in the rotate-half layout (transformers takes GPT-NeoX's
//     apply_rotary_pos_emb here, not GLM-4's interleaved one);
//   - the dense MLP of `intermediate_size` on the first `first_k_dense_replace`
//     layers, and on every later layer a mixture of `n_routed_experts` SwiGLU
//     experts of `moe_intermediate_size` plus one shared expert of
//     `n_shared_experts` x `moe_intermediate_size` that every token passes through.
// Routing (Glm4MoeMoE.route_tokens_to_experts; MoeSpec's kSigmoidGroupTopK):
// sigmoid scores; the choice adds the router's `e_score_correction_bias`, keeps
// the `topk_group` best of `n_group` groups (each scored by its two best
// experts) and takes the top `num_experts_per_tok`; the weights are the
// uncorrected scores, renormalized when `norm_topk_prob`, times
// `routed_scaling_factor`. Defaults are Glm4MoeConfig's.
// Tensors: mlp.gate.weight, mlp.gate.e_score_correction_bias,
// mlp.experts.<e>.{gate,up,down}_proj.weight, mlp.shared_experts.{gate,up,down}_proj.weight.
// The multi-token-prediction layers published after the last layer
// (`num_nextn_predict_layers`) are not read, as transformers does not.
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"

namespace tessera {

namespace {

// A routing field transformers' Glm4Moe does not read, refused unless it names
// what it runs (DeepSeek-style configs carry them).
Status check_field(const nlohmann::json& fields, const char* key, const char* supported) {
  const auto it = fields.find(key);
  if (it == fields.end() || it->is_null() || (it->is_string() && it->get<std::string>() == supported)) return {};
  return Status::unsupported(std::string("field '") + key + "' = " + it->dump() + " is not supported for glm4_moe" +
                             " (supported: " + supported + ")");
}

Status read_glm4_moe(const ModelConfig& config, MoeSpec& moe) {
  const nlohmann::json& fields = config.fields();
  moe.routing = Routing::kSigmoidGroupTopK;
  TS_RETURN_IF_ERROR(read_config_int(fields, "n_routed_experts", 1, 4096, 128, moe.experts));
  TS_RETURN_IF_ERROR(read_config_int(fields, "num_experts_per_tok", 1, moe.experts, 8, moe.top_k));
  TS_RETURN_IF_ERROR(read_config_int(fields, "moe_intermediate_size", 1, int64_t{1} << 24, 1408, moe.intermediate));
  TS_RETURN_IF_ERROR(read_config_bool(fields, "norm_topk_prob", true, moe.norm_topk_prob));
  TS_RETURN_IF_ERROR(read_config_int(fields, "n_group", 1, moe.experts, 1, moe.groups));
  if (moe.experts % moe.groups != 0 || moe.experts / moe.groups < 2)
    return Status::invalid_input("field 'n_group' = " + std::to_string(moe.groups) + " does not split " +
                                 std::to_string(moe.experts) +
                                 " routed experts into equal groups of at least 2 (each group is scored by its two "
                                 "best)");
  TS_RETURN_IF_ERROR(read_config_int(fields, "topk_group", 1, moe.groups, 1, moe.top_groups));
  double scaling = 1.0;
  TS_RETURN_IF_ERROR(read_config_double(fields, "routed_scaling_factor", 1.0, scaling));
  if (!(scaling > 0 && scaling < 1e6))
    return Status::invalid_input("field 'routed_scaling_factor' = " + std::to_string(scaling) + " is outside (0, 1e6)");
  moe.scaling = static_cast<float>(scaling);
  int64_t shared = 1;
  TS_RETURN_IF_ERROR(read_config_int(fields, "n_shared_experts", 0, 64, 1, shared));
  moe.shared_intermediate = shared * moe.intermediate;
  int64_t dense = 1;
  TS_RETURN_IF_ERROR(read_config_int(fields, "first_k_dense_replace", 0, config.num_hidden_layers, 1, dense));
  for (int64_t layer = 0; layer < dense; ++layer) moe.dense_layers.push_back(layer);
  TS_RETURN_IF_ERROR(check_field(fields, "scoring_func", "sigmoid"));
  return check_field(fields, "topk_method", "noaux_tc");
}

}  // namespace

Result<ArchSpec> glm4_moe_arch(const ModelConfig& config) {
  const auto& fields = config.fields();
  ArchSpec spec{.family = "glm4_moe"};
  TS_ASSIGN_OR_RETURN(spec.activation, read_activation(fields));
  TS_RETURN_IF_ERROR(read_config_bool(fields, "attention_bias", false, spec.qkv_bias));
  TS_RETURN_IF_ERROR(read_config_bool(fields, "use_qk_norm", false, spec.qk_norm));
  TS_ASSIGN_OR_RETURN(spec.partial_rotary_factor, read_partial_rotary(config, 0.5));
  TS_RETURN_IF_ERROR(read_glm4_moe(config, spec.moe));
  return spec;
}

}  // namespace tessera
