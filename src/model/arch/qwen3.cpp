// Qwen3 (transformers Qwen3ForCausalLM): the Llama layer with RMSNorm over each
// head of q and k (q_norm, k_norm, weight [head_dim]) before rotary; head_dim is
// its own config field and often differs from hidden_size / num_attention_heads.
// `attention_bias` puts biases on q, k, v and o; `use_sliding_window: true` is
// refused.
#include "model/arch/arch.h"

namespace tessera {

Result<ArchSpec> qwen3_arch(const ModelConfig& config) {
  const auto& fields = config.fields();
  ArchSpec spec{.family = "qwen3", .qk_norm = true};
  TS_ASSIGN_OR_RETURN(spec.activation, read_activation(fields));
  bool attention_bias = false;
  TS_RETURN_IF_ERROR(read_config_bool(fields, "attention_bias", false, attention_bias));
  spec.qkv_bias = attention_bias;
  spec.o_bias = attention_bias;
  bool use_sliding_window = false;
  TS_RETURN_IF_ERROR(read_config_bool(fields, "use_sliding_window", false, use_sliding_window));
  if (use_sliding_window) return Status::unsupported("'use_sliding_window: true' is not supported for qwen3");
  return spec;
}

}  // namespace tessera
