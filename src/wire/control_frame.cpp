#include "wire/control_frame.h"

#include <iterator>
#include <string_view>

#include "core/text_file.h"

namespace tessera::wire {

std::vector<uint8_t> encode_control(uint64_t request_id, const nlohmann::json& message) {
  const std::string text = message.dump();
  return wire::encode_frame(wire::MessageKind::kControl, request_id, {},
                            {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
}

namespace {

// The wire's names, by the enums' values: appending to ErrorKind or Cause breaks
// the build here until the name is added.
constexpr std::string_view kKindNames[] = {"ok",         "invalid_input", "not_found", "unsupported",
                                           "overloaded", "disconnected",  "internal"};
static_assert(std::size(kKindNames) == static_cast<size_t>(ErrorKind::kInternal) + 1);
constexpr std::string_view kCauseNames[] = {"none", "interrupted", "closed_cleanly", "timed_out"};
static_assert(std::size(kCauseNames) == static_cast<size_t>(Cause::kTimedOut) + 1);

// The index of `name` among `names`, or -1.
template <size_t N>
int name_index(const std::string_view (&names)[N], std::string_view name) {
  for (size_t i = 0; i < N; ++i) {
    if (names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

nlohmann::json error_message(const std::string& stage, const Status& status) {
  return {{"type", "error"},
          {"stage", stage},
          {"kind", kKindNames[static_cast<size_t>(status.kind())]},
          {"cause", kCauseNames[static_cast<size_t>(status.cause())]},
          {"message", status.message()}};
}

Result<ErrorReport> error_from_message(const nlohmann::json& message) {
  TS_ASSIGN_OR_RETURN(const std::string kind_name, field<std::string>(message, "kind"));
  TS_ASSIGN_OR_RETURN(const std::string cause_name, field<std::string>(message, "cause"));
  const int kind = name_index(kKindNames, kind_name);
  if (kind <= 0) {  // "ok" is no error
    return Status::invalid_input("control message error: kind '" + kind_name.substr(0, 64) + "' unknown");
  }
  const int cause = name_index(kCauseNames, cause_name);
  if (cause < 0)
    return Status::invalid_input("control message error: cause '" + cause_name.substr(0, 64) + "' unknown");
  return ErrorReport{Status(static_cast<ErrorKind>(kind), text_or(message, "message", "?"), static_cast<Cause>(cause))};
}

Result<nlohmann::json> decode_control(const wire::Frame& frame) {
  if (frame.prefix.kind != wire::MessageKind::kControl) {
    return Status::invalid_input("frame kind " + std::to_string(static_cast<uint32_t>(frame.prefix.kind)) +
                                 ": expected a control message");
  }
  if (!frame.header.empty()) return Status::invalid_input("control message: unexpected message header");
  const std::string_view text(reinterpret_cast<const char*>(frame.payload.data()), frame.payload.size());
  TS_ASSIGN_OR_RETURN(nlohmann::json message, parse_json(text, "control message"));
  if (!message.is_object() || !message.contains("type") || !message["type"].is_string()) {
    return Status::invalid_input("control message: not a JSON object with a string \"type\"");
  }
  return message;
}

}  // namespace tessera::wire
