// Bounded reading of what comes from outside as files and JSON: configs,
// tokenizer files, prompts, pipeline plans, trust files. A file must be a
// regular file (a directory, FIFO or device is refused without blocking) of at
// most `max_bytes`, checked before a byte is read; JSON must nest at most
// kMaxJsonDepth levels (deeper values are never built, so a 100,000-deep
// document costs no stack and no memory). Errors name the file.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tessera {

inline constexpr uint64_t kMaxTextFileBytes = uint64_t{256} << 20;  // the largest tokenizer.json seen is 33 MB
inline constexpr int kMaxJsonDepth = 64;                            // real configs and tokenizers nest < 10

Result<std::string> read_text_file(const std::string& path, uint64_t max_bytes = kMaxTextFileBytes);

// Options of parse_json beyond the depth limit, which always holds.
template <class Json>
struct JsonReadOptions {
  // Sees every parse event after the depth check (to find duplicate keys, to
  // record keys in file order); returning false skips the value.
  typename Json::parser_callback_t observe = nullptr;
  bool allow_comments = false;  // operators annotate their trust files
};

// The one JSON reader of tessera: every document from a file or a peer goes
// through it. `what` names the document in errors ("config.json: not valid
// JSON: ...", with the parser's position).
template <class Json = nlohmann::json>
Result<Json> parse_json(std::string_view text, std::string_view what, const JsonReadOptions<Json>& options = {}) {
  bool too_deep = false;
  const typename Json::parser_callback_t limit_depth =
      [&too_deep, &options](int depth, typename Json::parse_event_t event, Json& parsed) {
        if (depth > kMaxJsonDepth) {
          too_deep = true;
          return false;  // the value is skipped, not built
        }
        return !options.observe || options.observe(depth, event, parsed);
      };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), limit_depth, /*allow_exceptions=*/true, options.allow_comments);
  } catch (const typename Json::exception& e) {
    if (!too_deep) return Status::invalid_input(std::string(what) + ": not valid JSON: " + e.what());
  }
  if (too_deep)
    return Status::invalid_input(std::string(what) + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                 " levels");
  return json;
}

// read_text_file, then parse_json.
template <class Json = nlohmann::json>
Result<Json> read_json_file(const std::string& path) {
  TS_ASSIGN_OR_RETURN(const std::string text, read_text_file(path));
  return parse_json<Json>(text, path);
}

}  // namespace tessera
