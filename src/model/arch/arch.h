// ArchSpec: what distinguishes one model family's decoder layer from another's.
// All supported families share the Llama layer (RMSNorm, rotary attention with
// grouped KV heads, SwiGLU MLP); each family's file (llama.cpp, mistral.cpp,
// qwen2.cpp, qwen3.cpp) states its differences here, and Forward reads them.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "io/model_config.h"

namespace tessera {

struct ArchSpec {
  std::string family;
  bool qkv_bias = false;       // q, k, v projections have biases
  bool o_bias = false;         // the output projection has a bias
  bool mlp_bias = false;       // gate, up and down projections have biases
  bool qk_norm = false;        // RMSNorm over each head of q and k before rotary (Qwen3)
  int64_t sliding_window = 0;  // 0: full causal attention
};

ArchSpec llama_arch(const ModelConfig& config);
ArchSpec mistral_arch(const ModelConfig& config);
ArchSpec qwen2_arch(const ModelConfig& config);
ArchSpec qwen3_arch(const ModelConfig& config);

// The spec for config.model_type, or kUnsupported naming it.
Result<ArchSpec> arch_for(const ModelConfig& config);

}  // namespace tessera
