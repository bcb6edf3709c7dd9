// Qwen2 / Qwen2.5 (transformers Qwen2ForCausalLM): the Llama layer with biases
// on q, k and v (never on o or the MLP). Its sliding window
// (`use_sliding_window: true`, on the upper layers only) is refused.
#include "model/arch/arch.h"

namespace tessera {

Result<ArchSpec> qwen2_arch(const ModelConfig& config) {
  const auto& fields = config.fields();
  ArchSpec spec{.family = "qwen2", .qkv_bias = true};
  TS_ASSIGN_OR_RETURN(spec.activation, read_activation(fields));
  bool use_sliding_window = false;
  TS_RETURN_IF_ERROR(read_config_bool(fields, "use_sliding_window", false, use_sliding_window));
  if (use_sliding_window) return Status::unsupported("'use_sliding_window: true' is not supported for qwen2");
  return spec;
}

}  // namespace tessera
