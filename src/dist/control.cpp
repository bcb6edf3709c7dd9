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

Result<ControlMessage> read_control(net::TlsChannel& channel, net::Deadline deadline, int wake_fd) {
  std::array<uint8_t, kControlHeaderBytes> header;
  TS_RETURN_IF_ERROR(channel.read_exact(header, deadline, wake_fd));
  const uint32_t kind = wire::get_u32(header, 0);
  if (kind < 1 || kind > static_cast<uint32_t>(ControlKind::kGoodbye)) {
    return Status::invalid_input("control message kind: " + std::to_string(kind) + " unknown");
  }
  ControlMessage message;
  message.kind = static_cast<ControlKind>(kind);
  message.generation = wire::get_u64(header, 4);
  const uint32_t length = wire::get_u32(header, 12);
  if (length > kMaxControlText) {
    return Status::invalid_input("control message length: " + std::to_string(length) + " > max " +
                                 std::to_string(kMaxControlText));
  }
  message.text.resize(length);
  TS_RETURN_IF_ERROR(channel.read_exact({reinterpret_cast<uint8_t*>(message.text.data()), length}, deadline, wake_fd));
  return message;
}

}  // namespace tessera::dist
