// Control messages between the ranks of a group (collective/tcp), which travel
// over their mutual-TLS channel (authenticated and encrypted by TLS, so an
// attacker on the link can neither forge an abort nor suppress one unnoticed:
// cutting the channel fails the group). collective/tcp/control_channel.h reads
// and writes them.
//
// Layout, little-endian:
//   offset  size  field
//        0     4  kind         ControlKind
//        4     8  generation   the group generation the message is about (heartbeat: the sender's current one)
//       12     4  length       bytes of text that follow, <= kMaxControlText
//       16     n  text         UTF-8 (abort: the failure, as the failing rank saw it)
//
// Thread safety: pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::wire {

enum class ControlKind : uint32_t {
  kAbort = 1,    // the sender's group failed in `generation`; text says why
  kRebuild = 2,  // the sender is ready to build `generation`
  kGoodbye = 3,  // the sender is closing the group cleanly
  // The sender is alive (every collective::kHeartbeatInterval, from its own
  // thread, whatever it computes): a peer silent for longer than its heartbeat
  // timeout is frozen or cut off, and the group fails. No text.
  kHeartbeat = 4,
};
// decode_control_header accepts kinds 1..kLastControlKind: a new kind goes last.
inline constexpr uint32_t kLastControlKind = 4;
static_assert(static_cast<uint32_t>(ControlKind::kHeartbeat) == kLastControlKind);

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

// The header and text; text longer than kMaxControlText is cut.
std::vector<uint8_t> encode_control_message(const ControlMessage& message);
// Refuses unknown kinds and lengths above kMaxControlText.
Result<ControlHeader> decode_control_header(std::span<const uint8_t, kControlHeaderBytes> header);

}  // namespace tessera::wire
