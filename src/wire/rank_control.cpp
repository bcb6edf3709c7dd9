#include "wire/rank_control.h"

#include <algorithm>

#include "wire/byte_io.h"

namespace tessera::wire {

std::vector<uint8_t> encode_control_message(const ControlMessage& message) {
  const size_t length = std::min<size_t>(message.text.size(), kMaxControlText);
  std::vector<uint8_t> bytes;
  bytes.reserve(kControlHeaderBytes + length);
  put_u32(bytes, static_cast<uint32_t>(message.kind));
  put_u64(bytes, message.generation);
  put_u32(bytes, static_cast<uint32_t>(length));
  bytes.insert(bytes.end(), message.text.begin(), message.text.begin() + static_cast<ptrdiff_t>(length));
  return bytes;
}

Result<ControlHeader> decode_control_header(std::span<const uint8_t, kControlHeaderBytes> header) {
  const uint32_t kind = get_u32(header, 0);
  if (kind < 1 || kind > kLastControlKind) {
    return Status::invalid_input("control message kind: " + std::to_string(kind) + " unknown");
  }
  const uint32_t length = get_u32(header, 12);
  if (length > kMaxControlText) {
    return Status::invalid_input("control message length: " + std::to_string(length) + " > max " +
                                 std::to_string(kMaxControlText));
  }
  return ControlHeader{static_cast<ControlKind>(kind), get_u64(header, 4), length};
}

}  // namespace tessera::wire
