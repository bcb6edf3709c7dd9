// Qwen3 (transformers Qwen3ForCausalLM): RMSNorm over each head of q and k
// (q_norm, k_norm, weight [head_dim]) before rotary; head_dim is its own config
// field and often differs from hidden_size / num_attention_heads.
#include "model/arch/arch.h"

namespace tessera {

ArchSpec qwen3_arch(const ModelConfig& config) {
  return ArchSpec{
      .family = "qwen3", .qkv_bias = config.attention_bias, .o_bias = config.attention_bias, .qk_norm = true};
}

}  // namespace tessera
