// Llama 2, 3, 3.1, 3.2 (transformers LlamaForCausalLM): optional biases on the
// attention and MLP projections (attention_bias, mlp_bias), rotary scaling
// (default, linear, llama3) handled by rope.cpp.
#include "model/arch/arch.h"

namespace tessera {

ArchSpec llama_arch(const ModelConfig& config) {
  return ArchSpec{.family = "llama",
                  .qkv_bias = config.attention_bias,
                  .o_bias = config.attention_bias,
                  .mlp_bias = config.mlp_bias};
}

}  // namespace tessera
