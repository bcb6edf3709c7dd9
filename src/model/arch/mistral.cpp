// Mistral (transformers MistralForCausalLM): the Llama layer without biases,
// with sliding-window attention on every layer when config.json sets
// `sliding_window` (absent or null: full causal attention).
#include "model/arch/arch.h"

namespace tessera {

Result<ArchSpec> mistral_arch(const ModelConfig& config) {
  const auto& fields = config.fields();
  ArchSpec spec{.family = "mistral"};
  TS_ASSIGN_OR_RETURN(spec.activation, read_activation(fields));
  TS_RETURN_IF_ERROR(read_config_int(fields, "sliding_window", 1, int64_t{1} << 30, 0, spec.sliding_window));
  return spec;
}

}  // namespace tessera
