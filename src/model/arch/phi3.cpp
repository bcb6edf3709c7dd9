// Phi-3 (transformers Phi3ForCausalLM, built on Mistral): the Mistral layer
// (sliding window on every layer when `sliding_window` is set) with q, k and v
// fused into one self_attn.qkv_proj (q rows, then k, then v) and gate and up
// into one mlp.gate_up_proj (gate rows first), split into views at load; no
// biases. `partial_rotary_factor` rotates the first dimensions of each head
// (rotate-half among them, Phi-4-mini). Rotary scaling `longrope` (the 128k
// variants) is read by io/model_config.cpp, its frequencies made by
// model/rope.cpp, and chosen per sequence by Forward (forward.h says how).
#include "model/arch/arch.h"

namespace tessera {

Result<ArchSpec> phi3_arch(const ModelConfig& config) {
  TS_ASSIGN_OR_RETURN(ArchSpec spec, mistral_arch(config));
  spec.family = "phi3";
  spec.fused_qkv = true;
  spec.fused_gate_up = true;
  TS_ASSIGN_OR_RETURN(spec.partial_rotary_factor, read_partial_rotary(config, 1.0));
  return spec;
}

}  // namespace tessera
