// Mistral (transformers MistralForCausalLM): the Llama layer without biases, with
// sliding-window attention when config.json sets `sliding_window`.
#include "model/arch/arch.h"

namespace tessera {

ArchSpec mistral_arch(const ModelConfig& config) {
  return ArchSpec{.family = "mistral", .sliding_window = config.sliding_window};
}

}  // namespace tessera
