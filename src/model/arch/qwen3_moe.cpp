// Qwen3-MoE (transformers Qwen3MoeForCausalLM): the Qwen3 layer (q/k norm,
// head_dim of its own) with a mixture of `num_experts` SwiGLU experts of
// `moe_intermediate_size` on layer l when (l + 1) % `decoder_sparse_step` == 0
// and l is not in `mlp_only_layers`; other layers keep the dense MLP of
// `intermediate_size`. Routing: softmax, the top `num_experts_per_tok`,
// renormalized only when `norm_topk_prob` (default false, as transformers).
// Tensors: mlp.gate.weight and mlp.experts.<e>.{gate,up,down}_proj.weight.
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"

namespace tessera {

Result<ArchSpec> qwen3_moe_arch(const ModelConfig& config) {
  const auto& fields = config.fields();
  TS_ASSIGN_OR_RETURN(ArchSpec spec, qwen3_arch(config));
  spec.family = "qwen3_moe";
  TS_ASSIGN_OR_RETURN(spec.moe, read_moe(fields));
  MoeSpec& moe = spec.moe;
  TS_RETURN_IF_ERROR(
      read_config_int(fields, "moe_intermediate_size", 1, int64_t{1} << 24, std::nullopt, moe.intermediate));
  TS_RETURN_IF_ERROR(read_config_bool(fields, "norm_topk_prob", false, moe.norm_topk_prob));
  TS_RETURN_IF_ERROR(read_config_int(fields, "decoder_sparse_step", 1, 4096, 1, moe.sparse_step));
  const auto dense = fields.find("mlp_only_layers");
  if (dense != fields.end() && !dense->is_null()) {
    if (!dense->is_array()) return Status::invalid_input("field 'mlp_only_layers' is not an array");
    for (const auto& layer : *dense) {
      if (!layer.is_number_integer() || layer.get<int64_t>() < 0 || layer.get<int64_t>() >= config.num_hidden_layers)
        return Status::invalid_input("field 'mlp_only_layers' holds " + layer.dump() + ", not a layer index below " +
                                     std::to_string(config.num_hidden_layers));
      moe.dense_layers.push_back(layer.get<int64_t>());
    }
  }
  return spec;
}

}  // namespace tessera
