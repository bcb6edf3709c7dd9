// Field readers for tokenizer.json (see json_util.h).
#include "tokenizer/json_util.h"

#include "tokenizer/unicode_text.h"

namespace tessera::tok {

namespace {

Status field_error(std::string_view where, std::string_view key, std::string_view want) {
  return Status::invalid_input(std::string(where) + ": field '" + std::string(key) + "' must be " + std::string(want));
}

}  // namespace

Result<std::string> get_string(const nlohmann::json& object, std::string_view key, std::string_view where) {
  if (!object.is_object()) return Status::invalid_input(std::string(where) + ": must be a JSON object");
  const auto it = object.find(key);
  if (it == object.end() || !it->is_string()) return field_error(where, key, "a string");
  std::string value = it->get<std::string>();
  if (!is_valid_utf8(value)) return field_error(where, key, "valid UTF-8");
  return value;
}

Result<bool> get_bool(const nlohmann::json& object, std::string_view key, std::string_view where, bool fallback) {
  if (!object.is_object()) return Status::invalid_input(std::string(where) + ": must be a JSON object");
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) return field_error(where, key, "true or false");
  return it->get<bool>();
}

Result<int64_t> get_int(const nlohmann::json& object, std::string_view key, std::string_view where) {
  if (!object.is_object()) return Status::invalid_input(std::string(where) + ": must be a JSON object");
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number_integer()) return field_error(where, key, "an integer");
  return it->get<int64_t>();
}

Result<std::string> get_type(const nlohmann::json& object, std::string_view where) {
  if (!object.is_object()) return Status::invalid_input(std::string(where) + ": must be a JSON object or null");
  return get_string(object, "type", where);
}

Result<std::string> get_pattern(const nlohmann::json& object, std::string_view where, bool& is_regex) {
  const auto it = object.find("pattern");
  if (it == object.end() || !it->is_object() || it->size() != 1)
    return field_error(where, "pattern", "{\"String\": ...} or {\"Regex\": ...}");
  if (it->contains("String")) {
    is_regex = false;
    return get_string(*it, "String", where);
  }
  if (it->contains("Regex")) {
    is_regex = true;
    return get_string(*it, "Regex", where);
  }
  return field_error(where, "pattern", "{\"String\": ...} or {\"Regex\": ...}");
}

}  // namespace tessera::tok
