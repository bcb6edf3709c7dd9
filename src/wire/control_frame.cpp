#include "wire/control_frame.h"

#include "core/text_file.h"

namespace tessera::wire {

std::vector<uint8_t> encode_control(uint64_t request_id, const nlohmann::json& message) {
  const std::string text = message.dump();
  return wire::encode_frame(wire::MessageKind::kControl, request_id, {},
                            {reinterpret_cast<const uint8_t*>(text.data()), text.size()});
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
