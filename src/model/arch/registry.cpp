// The registry: model_type -> family, the one place that lists the families,
// and the readers every family shares.
#include <nlohmann/json.hpp>
#include <string_view>

#include "model/arch/arch.h"

namespace tessera {

namespace {

struct Family {
  std::string_view model_type;
  Result<ArchSpec> (*make)(const ModelConfig&);
};

constexpr Family kFamilies[] = {
    {"llama", llama_arch}, {"mistral", mistral_arch}, {"qwen2", qwen2_arch},
    {"qwen3", qwen3_arch}, {"mixtral", mixtral_arch}, {"qwen3_moe", qwen3_moe_arch},
};

const Family* find_family(std::string_view model_type) {
  for (const Family& family : kFamilies)
    if (family.model_type == model_type) return &family;
  return nullptr;
}

}  // namespace

Status check_model_type(const std::string& model_type) {
  if (find_family(model_type)) return {};
  std::string supported;
  for (const Family& family : kFamilies) {
    if (!supported.empty()) supported += ", ";
    supported += family.model_type;
  }
  return Status::unsupported("model_type '" + model_type + "' is not supported (supported: " + supported + ")");
}

Result<ArchSpec> arch_for(const ModelConfig& config) {
  const Family* family = find_family(config.model_type);
  if (!family) return check_model_type(config.model_type);
  return family->make(config);
}

Result<Activation> read_activation(const nlohmann::json& fields) {
  const auto act = fields.find("hidden_act");
  if (act != fields.end() && !(act->is_string() && act->get<std::string>() == "silu"))
    return Status::unsupported("hidden_act '" + act->dump() + "' is not supported (supported: silu)");
  return Activation::kSilu;
}

}  // namespace tessera
