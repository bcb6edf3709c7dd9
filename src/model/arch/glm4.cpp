// GLM-4 (transformers Glm4ForCausalLM): the Llama layer with a norm on each
// block's output before the residual add (post_self_attn_layernorm,
// post_mlp_layernorm; the MLP's input norm is post_attention_layernorm), gate
// and up fused into one mlp.gate_up_proj (gate rows first), biases on q, k and v
// (`attention_bias`, default true; never on o), and rotary embeddings on the
// first `partial_rotary_factor` (default 0.5) of each head in GLM's interleaved
// layout: pairs (2i, 2i + 1), rotated by frequency i of the rotary dimensions.
#include "model/arch/arch.h"

namespace tessera {

Result<ArchSpec> glm4_arch(const ModelConfig& config) {
  const auto& fields = config.fields();
  ArchSpec spec{
      .family = "glm4", .norm = NormPlacement::kSandwich, .rope = RopeStyle::kInterleaved, .fused_gate_up = true};
  TS_ASSIGN_OR_RETURN(spec.activation, read_activation(fields));
  TS_RETURN_IF_ERROR(read_config_bool(fields, "attention_bias", true, spec.qkv_bias));
  TS_ASSIGN_OR_RETURN(spec.partial_rotary_factor, read_partial_rotary(config, 0.5));
  spec.names.post_attn_norm = "post_self_attn_layernorm.weight";
  spec.names.post_ffn_norm = "post_mlp_layernorm.weight";
  return spec;
}

}  // namespace tessera
