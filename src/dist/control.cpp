#include "dist/control.h"

#include <vector>

#include "wire/byte_io.h"

namespace tessera::dist {

Status write_control(net::TlsChannel& channel, const ControlMessage& message, net::Deadline deadline) {
  const size_t length = std::min<size_t>(message.text.size(), kMaxControlText);
  std::vector<uint8_t> bytes;
  bytes.reserve(kControlHeaderBytes + length);
  wire::put_u32(bytes, static_cast<uint32_t>(message.kind));
  wire::put_u64(bytes, message.generation);
  wire::put_u32(bytes, static_cast<uint32_t>(length));
  bytes.insert(bytes.end(), message.text.begin(), message.text.begin() + static_cast<ptrdiff_t>(length));
  return channel.write_all(bytes, deadline);
}

Result<ControlHeader> decode_control_header(std::span<const uint8_t, kControlHeaderBytes> header) {
  const uint32_t kind = wire::get_u32(header, 0);
  if (kind < 1 || kind > static_cast<uint32_t>(ControlKind::kGoodbye)) {
    return Status::invalid_input("control message kind: " + std::to_string(kind) + " unknown");
  }
  const uint32_t length = wire::get_u32(header, 12);
  if (length > kMaxControlText) {
    return Status::invalid_input("control message length: " + std::to_string(length) + " > max " +
                                 std::to_string(kMaxControlText));
  }
  return ControlHeader{static_cast<ControlKind>(kind), wire::get_u64(header, 4), length};
}

Result<ControlMessage> read_control(net::TlsChannel& channel, net::Deadline deadline, int wake_fd) {
  std::array<uint8_t, kControlHeaderBytes> bytes;
  TS_RETURN_IF_ERROR(channel.read_exact(bytes, deadline, wake_fd));
  TS_ASSIGN_OR_RETURN(const ControlHeader header, decode_control_header(bytes));
  ControlMessage message{header.kind, header.generation, std::string(header.length, '\0')};
  TS_RETURN_IF_ERROR(
      channel.read_exact({reinterpret_cast<uint8_t*>(message.text.data()), header.length}, deadline, wake_fd));
  return message;
}

}  // namespace tessera::dist
