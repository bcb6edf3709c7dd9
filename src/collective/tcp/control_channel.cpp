#include "collective/tcp/control_channel.h"

#include <array>

namespace tessera::collective {

Status write_control(net::TlsChannel& channel, const ControlMessage& message, net::Deadline deadline) {
  return channel.write_all(wire::encode_control_message(message), deadline);
}

Result<ControlMessage> read_control(net::TlsChannel& channel, net::Deadline deadline, int wake_fd) {
  std::array<uint8_t, wire::kControlHeaderBytes> bytes;
  TS_RETURN_IF_ERROR(channel.read_exact(bytes, deadline, wake_fd));
  TS_ASSIGN_OR_RETURN(const wire::ControlHeader header, wire::decode_control_header(bytes));
  ControlMessage message{header.kind, header.generation, std::string(header.length, '\0')};
  TS_RETURN_IF_ERROR(
      channel.read_exact({reinterpret_cast<uint8_t*>(message.text.data()), header.length}, deadline, wake_fd));
  return message;
}

}  // namespace tessera::collective
