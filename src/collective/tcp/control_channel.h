// The control channel of a rank pair: rank control messages (wire/rank_control.h:
// abort, rebuild, goodbye) read from and written to their mutual-TLS channel.
//
// Thread safety: the channel's own contract applies (one reader, writers
// serialized by the caller).
#pragma once

#include "core/status.h"
#include "net/tls.h"
#include "wire/rank_control.h"

namespace tessera::collective {

using wire::ControlKind;
using wire::ControlMessage;

// Text longer than wire::kMaxControlText is cut.
Status write_control(net::TlsChannel& channel, const ControlMessage& message, net::Deadline deadline);
// Decodes the header (wire::decode_control_header) before it reads the text.
Result<ControlMessage> read_control(net::TlsChannel& channel, net::Deadline deadline, int wake_fd);

}  // namespace tessera::collective
