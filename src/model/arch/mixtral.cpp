// Mixtral (transformers MixtralForCausalLM): the Mistral layer (sliding window
// when `sliding_window` is set) with a mixture of `num_local_experts` SwiGLU
// experts of `intermediate_size` in place of the MLP on every layer: softmax
// over the router's logits, the top `num_experts_per_tok`, renormalized. Its
// tensors, as published: block_sparse_moe.gate.weight (the router) and
// block_sparse_moe.experts.<e>.w1 (gate), w3 (up), w2 (down).
#include "model/arch/arch.h"

namespace tessera {

Result<ArchSpec> mixtral_arch(const ModelConfig& config) {
  TS_ASSIGN_OR_RETURN(ArchSpec spec, mistral_arch(config));
  spec.family = "mixtral";
  TS_ASSIGN_OR_RETURN(spec.moe, read_moe(config.fields()));
  spec.moe.intermediate = config.intermediate_size;
  spec.moe.norm_topk_prob = true;
  spec.names.router = "block_sparse_moe.gate.weight";
  spec.names.experts = "block_sparse_moe.experts.";
  spec.names.expert_gate = "w1";
  spec.names.expert_up = "w3";
  spec.names.expert_down = "w2";
  return spec;
}

}  // namespace tessera
