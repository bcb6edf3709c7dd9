// Message framing: the envelope of every message one tessera host sends another.
//
// A frame is a 32-byte prefix, then `header_bytes` bytes of message header, then
// `payload_bytes` bytes of payload. Every integer is little-endian.
//
//   offset  size  field
//        0     4  magic          "TSWF" (0x54 0x53 0x57 0x46)
//        4     2  major          protocol major version; must equal kProtocolMajor
//        6     2  minor          protocol minor version; any value is accepted
//        8     4  kind           MessageKind: 1 tensor, 2 layer chunk, 3 control; others refused
//       12     4  header_bytes   length of the message header; <= FrameLimits::max_header_bytes
//       16     8  request_id     opaque to the wire; replies echo it
//       24     8  payload_bytes  length of the payload; <= FrameLimits::max_payload_bytes
//       32        message header (tensor_codec.h, layer_payload.h), then the payload
//
// Properties:
//   - The prefix has a fixed size: a reader reads 32 bytes, calls
//     decode_frame_prefix, and then knows how many bytes follow, bounded by its
//     own FrameLimits before it reserves anything.
//   - Message headers are multiples of 8 bytes, so a payload starts 8-byte
//     aligned relative to the start of its frame.
//   - Checks, in order (docs/wire-protocol.md): prefix length, magic, major,
//     kind, header_bytes, payload_bytes (against the kind's own bound); decode_frame then refuses a buffer
//     shorter (truncated) or longer (trailing bytes) than the frame.
//
// Pure functions over byte spans; safe from any thread. A decoded Frame borrows
// the caller's bytes.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace tessera::wire {

inline constexpr uint8_t kFrameMagic[4] = {'T', 'S', 'W', 'F'};
inline constexpr uint16_t kProtocolMajor = 1;
inline constexpr uint16_t kProtocolMinor = 1;  // 1: control messages
inline constexpr size_t kFramePrefixBytes = 32;
// The largest message header of this protocol: a tensor header of rank 8.
inline constexpr uint32_t kMaxMessageHeaderBytes = 24 + 8 * 8;

// kControl: no message header; the payload is one JSON object (UTF-8) that the
// receiver parses only after FrameLimits bounded its length (pipeline setup,
// errors, cancels: control_frame.h).
enum class MessageKind : uint32_t { kTensor = 1, kLayerChunk = 2, kControl = 3 };
// Adding a kind changes what receivers accept: bump kProtocolMinor and document it
// in docs/wire-protocol.md, then update this count.
inline constexpr uint32_t kLastMessageKind = 3;
static_assert(static_cast<uint32_t>(MessageKind::kControl) == kLastMessageKind);

// What the receiver accepts, stated before it reads a frame. Control frames have
// their own bound (control_frame.h: 1 MiB), whatever a tensor may carry, and no
// message header.
struct FrameLimits {
  uint32_t max_header_bytes = kMaxMessageHeaderBytes;
  uint64_t max_payload_bytes = 0;  // tensor and layer-chunk frames (limits.h derives it from DecodeLimits)
  uint64_t max_control_bytes = 0;  // control frames; 0: none accepted
};

struct FramePrefix {
  uint16_t major = kProtocolMajor;
  uint16_t minor = kProtocolMinor;
  MessageKind kind = MessageKind::kTensor;
  uint32_t header_bytes = 0;
  uint64_t request_id = 0;
  uint64_t payload_bytes = 0;
};

struct Frame {
  FramePrefix prefix;
  std::span<const uint8_t> header;   // borrowed from the decoded buffer
  std::span<const uint8_t> payload;  // borrowed from the decoded buffer
};

// Decodes the first 32 bytes of `bytes` (a stream reader's fixed-size read).
Result<FramePrefix> decode_frame_prefix(std::span<const uint8_t> bytes, const FrameLimits& limits);
// Decodes a buffer that holds exactly one frame.
Result<Frame> decode_frame(std::span<const uint8_t> bytes, const FrameLimits& limits);

void append_frame_prefix(std::vector<uint8_t>& out, const FramePrefix& prefix);
std::vector<uint8_t> encode_frame(MessageKind kind, uint64_t request_id, std::span<const uint8_t> header,
                                  std::span<const uint8_t> payload);

}  // namespace tessera::wire
