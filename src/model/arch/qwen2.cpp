// Qwen2 / Qwen2.5 (transformers Qwen2ForCausalLM): biases on q, k and v (never on
// o or the MLP). Sliding window (`use_sliding_window`) is refused by the config
// reader.
#include "model/arch/arch.h"

namespace tessera {

ArchSpec qwen2_arch(const ModelConfig& /*config*/) { return ArchSpec{.family = "qwen2", .qkv_bias = true}; }

}  // namespace tessera
