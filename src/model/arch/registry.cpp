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
    {"llama", llama_arch},        {"mistral", mistral_arch},     {"qwen2", qwen2_arch}, {"qwen3", qwen3_arch},
    {"mixtral", mixtral_arch},    {"qwen3_moe", qwen3_moe_arch}, {"phi3", phi3_arch},   {"glm4", glm4_arch},
    {"gemma3_text", gemma3_arch}, {"glm4_moe", glm4_moe_arch},
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
  TS_ASSIGN_OR_RETURN(ArchSpec spec, family->make(config));
  const auto pairs = static_cast<size_t>(spec.rotary_dim(config.head_dim) / 2);
  if (config.rope.type == RopeType::kLongRope && config.rope.short_factor.size() != pairs)
    return Status::invalid_input("longrope 'short_factor' has " + std::to_string(config.rope.short_factor.size()) +
                                 " values for " + std::to_string(pairs) + " rotary pairs");
  return spec;
}

Result<Activation> read_activation(const nlohmann::json& fields) {
  const auto act = fields.find("hidden_act");
  if (act != fields.end() && !(act->is_string() && act->get<std::string>() == "silu"))
    return Status::unsupported("hidden_act '" + act->dump() + "' is not supported (supported: silu)");
  return Activation::kSilu;
}

Result<double> read_partial_rotary(const ModelConfig& config, double fallback) {
  const nlohmann::json& fields = config.fields();
  const auto params = fields.find("rope_parameters");
  const bool nested = params != fields.end() && params->is_object() && params->contains("partial_rotary_factor");
  double factor = fallback;
  TS_RETURN_IF_ERROR(read_config_double(nested ? *params : fields, "partial_rotary_factor", fallback, factor));
  const auto dim = static_cast<int64_t>(static_cast<double>(config.head_dim) * factor);
  if (!(factor > 0 && factor <= 1) || dim < 2 || dim % 2 != 0)
    return Status::invalid_input("field 'partial_rotary_factor' = " + std::to_string(factor) + " gives " +
                                 std::to_string(dim) + " rotary dimensions of head_dim " +
                                 std::to_string(config.head_dim) + " (must be even, at least 2)");
  return factor;
}

}  // namespace tessera
