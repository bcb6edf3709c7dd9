// Small readers of tokenizer.json fields that turn a missing or mistyped field into
// an invalid_input Status naming it ("normalizer Replace: field 'content' ...").
// Pure functions; safe from any thread.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tessera::tok {

inline std::string json_type_name(const nlohmann::json& j) { return j.type_name(); }

Result<std::string> get_string(const nlohmann::json& object, std::string_view key, std::string_view where);
Result<bool> get_bool(const nlohmann::json& object, std::string_view key, std::string_view where, bool fallback);
Result<int64_t> get_int(const nlohmann::json& object, std::string_view key, std::string_view where);
// The "type" of a component object, e.g. "Sequence".
Result<std::string> get_type(const nlohmann::json& object, std::string_view where);
// HF pattern objects: {"String": "..."} or {"Regex": "..."}; sets is_regex.
Result<std::string> get_pattern(const nlohmann::json& object, std::string_view where, bool& is_regex);

}  // namespace tessera::tok
