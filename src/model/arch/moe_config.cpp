// The fields every mixture-of-experts family shares, and which layers have experts.
#include <algorithm>
#include <nlohmann/json.hpp>

#include "model/arch/arch.h"

namespace tessera {

bool ArchSpec::has_experts(int64_t layer) const {
  if (moe.experts == 0 || (layer + 1) % moe.sparse_step != 0) return false;
  return std::find(moe.dense_layers.begin(), moe.dense_layers.end(), layer) == moe.dense_layers.end();
}

namespace {

// A routing field that, when present, must name what tessera implements.
Status check_routing_field(const nlohmann::json& fields, const char* key, const char* supported) {
  const auto it = fields.find(key);
  if (it == fields.end() || it->is_null()) return {};
  if (it->is_string() && it->get<std::string>() == supported) return {};
  return Status::unsupported(std::string("field '") + key + "' = " + it->dump() +
                             " is not supported (supported: " + supported + ")");
}

}  // namespace

Result<MoeSpec> read_moe(const nlohmann::json& fields) {
  MoeSpec moe;
  const char* count = fields.contains("num_local_experts") ? "num_local_experts" : "num_experts";
  TS_RETURN_IF_ERROR(read_config_int(fields, count, 1, 4096, std::nullopt, moe.experts));
  TS_RETURN_IF_ERROR(read_config_int(fields, "num_experts_per_tok", 1, moe.experts, std::nullopt, moe.top_k));
  TS_RETURN_IF_ERROR(check_routing_field(fields, "scoring_func", "softmax"));
  TS_RETURN_IF_ERROR(check_routing_field(fields, "topk_method", "greedy"));
  return moe;
}

}  // namespace tessera
