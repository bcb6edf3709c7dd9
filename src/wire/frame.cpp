// Frame prefix codec (layout in frame.h). Every field a peer sets is checked
// against a protocol constant or the receiver's FrameLimits before it is used.
#include "wire/frame.h"

#include <algorithm>
#include <string>

#include "wire/byte_io.h"

namespace tessera::wire {

namespace {

std::string num(uint64_t value) { return std::to_string(value); }

std::string hex4(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < 4; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

}  // namespace

Result<FramePrefix> decode_frame_prefix(std::span<const uint8_t> bytes, const FrameLimits& limits) {
  if (bytes.size() < kFramePrefixBytes) {
    return Status::invalid_input("frame prefix: " + num(bytes.size()) + " bytes < " + num(kFramePrefixBytes));
  }
  if (!std::equal(bytes.begin(), bytes.begin() + 4, kFrameMagic)) {
    return Status::invalid_input("frame magic: " + hex4(bytes) + " != " + hex4(kFrameMagic) + " (\"TSWF\")");
  }
  FramePrefix prefix;
  prefix.major = get_u16(bytes, 4);
  prefix.minor = get_u16(bytes, 6);
  if (prefix.major != kProtocolMajor) {
    return Status::invalid_input("frame major version: " + num(prefix.major) + " != " + num(kProtocolMajor));
  }
  const uint32_t kind = get_u32(bytes, 8);
  if (kind < 1 || kind > kLastMessageKind) {
    return Status::invalid_input("frame kind: " + num(kind) + " not in [1, " + num(kLastMessageKind) + "]");
  }
  prefix.kind = static_cast<MessageKind>(kind);
  prefix.header_bytes = get_u32(bytes, 12);
  prefix.request_id = get_u64(bytes, 16);
  prefix.payload_bytes = get_u64(bytes, 24);
  if (prefix.header_bytes > limits.max_header_bytes) {
    return Status::invalid_input("frame header_bytes: " + num(prefix.header_bytes) + " > max " +
                                 num(limits.max_header_bytes));
  }
  if (prefix.payload_bytes > limits.max_payload_bytes) {
    return Status::invalid_input("frame payload_bytes: " + num(prefix.payload_bytes) + " > max " +
                                 num(limits.max_payload_bytes));
  }
  return prefix;
}

Result<Frame> decode_frame(std::span<const uint8_t> bytes, const FrameLimits& limits) {
  TS_ASSIGN_OR_RETURN(const FramePrefix prefix, decode_frame_prefix(bytes, limits));
  uint64_t total = 0;
  if (!checked_add(kFramePrefixBytes + uint64_t{prefix.header_bytes}, prefix.payload_bytes, &total)) {
    return Status::invalid_input("frame length: 32 + " + num(prefix.header_bytes) + " + " + num(prefix.payload_bytes) +
                                 " overflows u64");
  }
  if (bytes.size() < total) {
    return Status::invalid_input("frame truncated: " + num(bytes.size()) + " bytes < " + num(total) + " declared");
  }
  if (bytes.size() > total) {
    return Status::invalid_input("frame trailing bytes: " + num(bytes.size()) + " bytes > " + num(total) + " declared");
  }
  Frame frame;
  frame.prefix = prefix;
  frame.header = bytes.subspan(kFramePrefixBytes, prefix.header_bytes);
  frame.payload = bytes.subspan(kFramePrefixBytes + prefix.header_bytes);
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
