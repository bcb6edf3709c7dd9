// Frame prefix codec (layout in frame.h). Every field a peer sets is checked
// against a protocol constant or the receiver's FrameLimits before it is used.
#include "wire/frame.h"

#include <iterator>
#include <string>

#include "wire/byte_io.h"

namespace tessera::wire {

namespace {

// The magic as get_u32 reads it at offset 0, so that checking it is one compare.
constexpr uint32_t kFrameMagicWord = uint32_t{kFrameMagic[0]} | uint32_t{kFrameMagic[1]} << 8 |
                                     uint32_t{kFrameMagic[2]} << 16 | uint32_t{kFrameMagic[3]} << 24;

std::string hex4(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < 4; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

[[gnu::cold, gnu::noinline]] Status magic_error(std::span<const uint8_t> bytes) {
  return decode_error("frame magic: ", hex4(bytes), " != ", hex4(kFrameMagic), " (\"TSWF\")");
}

// decode_frame_prefix's checks, writing *prefix. Every failing branch returns
// through a cold, out-of-line message builder (decode_error, byte_io.h), so the
// success path is a handful of loads, compares and branches. Always inlined
// (both decoders run it once per frame): its Status is then known OK on the
// success path and costs nothing to return and test.
[[gnu::always_inline]] inline Status read_prefix(std::span<const uint8_t> bytes, const FrameLimits& limits,
                                                 FramePrefix* prefix) {
  if (bytes.size() < kFramePrefixBytes) {
    return decode_error("frame prefix: ", bytes.size(), " bytes < ", kFramePrefixBytes);
  }
  if (get_u32(bytes, 0) != kFrameMagicWord) return magic_error(bytes);
  prefix->major = get_u16(bytes, 4);
  prefix->minor = get_u16(bytes, 6);
  if (prefix->major != kProtocolMajor) {
    return decode_error("frame major version: ", prefix->major, " != ", kProtocolMajor);
  }
  const uint32_t kind = get_u32(bytes, 8);
  if (kind < 1 || kind > kLastMessageKind) {
    return decode_error("frame kind: ", kind, " not in [1, ", kLastMessageKind, "]");
  }
  prefix->kind = static_cast<MessageKind>(kind);
  prefix->header_bytes = get_u32(bytes, 12);
  prefix->request_id = get_u64(bytes, 16);
  prefix->payload_bytes = get_u64(bytes, 24);
  const bool control = prefix->kind == MessageKind::kControl;
  const uint32_t max_header = control ? 0 : limits.max_header_bytes;
  const uint64_t max_payload = control ? limits.max_control_bytes : limits.max_payload_bytes;
  if (prefix->header_bytes > max_header) {
    return decode_error(control ? "control frame header_bytes: " : "frame header_bytes: ", prefix->header_bytes,
                        " > max ", max_header);
  }
  if (prefix->payload_bytes > max_payload) {
    return decode_error(control ? "control frame payload_bytes: " : "frame payload_bytes: ", prefix->payload_bytes,
                        " > max ", max_payload);
  }
  return {};
}

Status read_frame(std::span<const uint8_t> bytes, const FrameLimits& limits, Frame* frame) {
  TS_RETURN_IF_ERROR(read_prefix(bytes, limits, &frame->prefix));
  const FramePrefix& prefix = frame->prefix;
  uint64_t total = 0;
  if (!checked_add(kFramePrefixBytes + uint64_t{prefix.header_bytes}, prefix.payload_bytes, &total)) {
    return decode_error("frame length: 32 + ", prefix.header_bytes, " + ", prefix.payload_bytes, " overflows u64");
  }
  if (bytes.size() < total) return decode_error("frame truncated: ", bytes.size(), " bytes < ", total, " declared");
  if (bytes.size() > total) {
    return decode_error("frame trailing bytes: ", bytes.size(), " bytes > ", total, " declared");
  }
  frame->header = bytes.subspan(kFramePrefixBytes, prefix.header_bytes);
  frame->payload = bytes.subspan(kFramePrefixBytes + prefix.header_bytes);
  return {};
}

}  // namespace

// A prefix and a frame are small enough to live in registers until they are
// returned (unlike a tensor header, decode_in_place is no gain here).
Result<FramePrefix> decode_frame_prefix(std::span<const uint8_t> bytes, const FrameLimits& limits) {
  FramePrefix prefix;
  TS_RETURN_IF_ERROR(read_prefix(bytes, limits, &prefix));
  return prefix;
}

Result<Frame> decode_frame(std::span<const uint8_t> bytes, const FrameLimits& limits) {
  Frame frame;
  TS_RETURN_IF_ERROR(read_frame(bytes, limits, &frame));
  return frame;
}

void append_frame_prefix(std::vector<uint8_t>& out, const FramePrefix& prefix) {
  out.insert(out.end(), std::begin(kFrameMagic), std::end(kFrameMagic));
  put_u16(out, prefix.major);
  put_u16(out, prefix.minor);
  put_u32(out, static_cast<uint32_t>(prefix.kind));
  put_u32(out, prefix.header_bytes);
  put_u64(out, prefix.request_id);
  put_u64(out, prefix.payload_bytes);
}

std::vector<uint8_t> encode_frame(MessageKind kind, uint64_t request_id, std::span<const uint8_t> header,
                                  std::span<const uint8_t> payload) {
  TS_CHECK(header.size() <= UINT32_MAX, "header=", header.size());
  FramePrefix prefix;
  prefix.kind = kind;
  prefix.header_bytes = static_cast<uint32_t>(header.size());
  prefix.request_id = request_id;
  prefix.payload_bytes = payload.size();
  std::vector<uint8_t> out;
  out.reserve(kFramePrefixBytes + header.size() + payload.size());
  append_frame_prefix(out, prefix);
  out.insert(out.end(), header.begin(), header.end());
  out.insert(out.end(), payload.begin(), payload.end());
  return out;
}

}  // namespace tessera::wire
