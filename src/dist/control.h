// Control messages between the ranks of a group, over their mutual-TLS channel
// (authenticated and encrypted by TLS, so an attacker on the link can neither
// forge an abort nor suppress one unnoticed: cutting the channel fails the group).
//
// Layout, little-endian:
//   offset  size  field
//        0     4  kind         ControlKind
//        4     8  generation   the group generation the message is about
//       12     4  length       bytes of text that follow, <= kMaxControlText
//       16     n  text         UTF-8 (abort: the failure, as the failing rank saw it)
//
// Thread safety: pure functions; the channel's own contract applies to I/O.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"
#include "net/tls.h"

namespace tessera::dist {

enum class ControlKind : uint32_t {
  kAbort = 1,    // the sender's group failed in `generation`; text says why
  kRebuild = 2,  // the sender is ready to build `generation`
  kGoodbye = 3,  // the sender is closing the group cleanly
};

inline constexpr size_t kControlHeaderBytes = 16;
inline constexpr uint32_t kMaxControlText = 4096;

struct ControlMessage {
  ControlKind kind = ControlKind::kAbort;
  uint64_t generation = 0;
  std::string text;
};

struct ControlHeader {
  ControlKind kind;
  uint64_t generation;
  uint32_t length;
};
// Refuses unknown kinds and lengths above kMaxControlText.
Result<ControlHeader> decode_control_header(std::span<const uint8_t, kControlHeaderBytes> header);

// Text longer than kMaxControlText is cut.
Status write_control(net::TlsChannel& channel, const ControlMessage& message, net::Deadline deadline);
// Decodes the header (decode_control_header) before it reads the text.
Result<ControlMessage> read_control(net::TlsChannel& channel, net::Deadline deadline, int wake_fd);

}  // namespace tessera::dist
