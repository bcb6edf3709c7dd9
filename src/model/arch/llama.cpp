// Llama 2, 3, 3.1, 3.2 (transformers LlamaForCausalLM): the layer every other
// family here starts from. Pre-norm RMSNorm, rotary attention (rotate-half) with
// grouped KV heads, SwiGLU MLP. Its own config.json fields: `attention_bias`
// (bias on q, k, v and o) and `mlp_bias` (bias on gate, up and down). Rotary
// scaling (default, linear, llama3) is shared and handled by rope.cpp.
#include "model/arch/arch.h"

namespace tessera {

Result<ArchSpec> llama_arch(const ModelConfig& config) {
  const auto& fields = config.fields();
  ArchSpec spec{.family = "llama"};
  TS_ASSIGN_OR_RETURN(spec.activation, read_activation(fields));
  bool attention_bias = false;
  TS_RETURN_IF_ERROR(read_config_bool(fields, "attention_bias", false, attention_bias));
  TS_RETURN_IF_ERROR(read_config_bool(fields, "mlp_bias", false, spec.mlp_bias));
  spec.qkv_bias = attention_bias;
  spec.o_bias = attention_bias;
  return spec;
}

}  // namespace tessera
