#include <string_view>

#include "model/arch/arch.h"

namespace tessera {

Result<ArchSpec> arch_for(const ModelConfig& config) {
  struct Entry {
    std::string_view model_type;
    ArchSpec (*make)(const ModelConfig&);
  };
  static constexpr Entry kFamilies[] = {
      {"llama", llama_arch}, {"mistral", mistral_arch}, {"qwen2", qwen2_arch}, {"qwen3", qwen3_arch}};
  for (const auto& family : kFamilies)
    if (family.model_type == config.model_type) return family.make(config);
  return Status::unsupported("model_type '" + config.model_type + "' is not supported");
}

}  // namespace tessera
