// Tests of the frame prefix codec (src/wire/frame.h). Each guard has a test that
// feeds an otherwise valid frame breaking exactly that check.
//
// Verified by reverting (each check removed in turn, this file's tests fail,
// check restored): prefix shorter than 32 bytes, magic, major version, kind
// (below 1 and above the last), header_bytes > max, payload_bytes > max, frame
// length overflow, truncated frame, trailing bytes. Control frames: checked
// against max_control_bytes, not the tensor bound (with the tensor bound in its
// place, ControlFrameHasItsOwnBound fails), and carry no message header.
#include "wire/frame.h"

#include <gtest/gtest.h>

#include "wire/byte_io.h"
#include "wire_test_util.h"

namespace tessera::wire {
namespace {

using testing::expect_invalid;
using testing::pattern;

constexpr FrameLimits kLimits{kMaxMessageHeaderBytes, 1 << 20, 1 << 10};

std::vector<uint8_t> sample_frame() {
  const std::vector<uint8_t> header = pattern(24);
  const std::vector<uint8_t> payload = pattern(100);
  return encode_frame(MessageKind::kTensor, 0x1122334455667788ULL, header, payload);
}

// Overwrites the little-endian field at `offset` of `frame`.
template <typename T>
void poke(std::vector<uint8_t>& frame, size_t offset, T value) {
  std::vector<uint8_t> bytes;
  put_le(bytes, value);
  std::copy(bytes.begin(), bytes.end(), frame.begin() + static_cast<std::ptrdiff_t>(offset));
}

TEST(FrameTest, LayoutIsByteExact) {
  const std::vector<uint8_t> frame = encode_frame(MessageKind::kLayerChunk, 7, pattern(8), pattern(3));
  const std::vector<uint8_t> expected_prefix = {
      'T', 'S', 'W', 'F', 1, 0, 1, 0,  // magic, major 1, minor 1
      2,   0,   0,   0,   8, 0, 0, 0,  // kind 2, header_bytes 8
      7,   0,   0,   0,   0, 0, 0, 0,  // request_id 7
      3,   0,   0,   0,   0, 0, 0, 0,  // payload_bytes 3
  };
  ASSERT_EQ(frame.size(), 32u + 8 + 3);
  EXPECT_EQ(std::vector<uint8_t>(frame.begin(), frame.begin() + 32), expected_prefix);
}

TEST(FrameTest, RoundTripsAndBorrows) {
  const std::vector<uint8_t> frame = sample_frame();
  const Result<Frame> decoded = decode_frame(frame, kLimits);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  EXPECT_EQ(decoded->prefix.kind, MessageKind::kTensor);
  EXPECT_EQ(decoded->prefix.request_id, 0x1122334455667788ULL);
  EXPECT_EQ(decoded->prefix.header_bytes, 24u);
  EXPECT_EQ(decoded->prefix.payload_bytes, 100u);
  EXPECT_EQ(decoded->header.data(), frame.data() + 32);
  EXPECT_EQ(decoded->header.size(), 24u);
  EXPECT_EQ(decoded->payload.data(), frame.data() + 56);
  EXPECT_EQ(decoded->payload.size(), 100u);
}

TEST(FrameTest, PrefixDecodesFromItsFirst32Bytes) {
  const std::vector<uint8_t> frame = sample_frame();
  const Result<FramePrefix> prefix = decode_frame_prefix(std::span(frame).first(32), kLimits);
  ASSERT_TRUE(prefix.ok()) << prefix.status().to_string();
  EXPECT_EQ(prefix->payload_bytes, 100u);
}

TEST(FrameTest, AcceptsAnyMinorVersion) {
  std::vector<uint8_t> frame = sample_frame();
  poke<uint16_t>(frame, 6, 0xffff);
  const Result<Frame> decoded = decode_frame(frame, kLimits);
  ASSERT_TRUE(decoded.ok()) << decoded.status().to_string();
  EXPECT_EQ(decoded->prefix.minor, 0xffff);
}

TEST(FrameTest, RefusesShortPrefix) {
  const std::vector<uint8_t> frame = sample_frame();
  expect_invalid(decode_frame_prefix(std::span(frame).first(31), kLimits), {"frame prefix: 31 bytes < 32"});
  expect_invalid(decode_frame(std::span(frame).first(0), kLimits), {"frame prefix: 0 bytes < 32"});
}

TEST(FrameTest, RefusesWrongMagic) {
  std::vector<uint8_t> frame = sample_frame();
  frame[3] = 'X';
  expect_invalid(decode_frame(frame, kLimits), {"frame magic: 54535758 != 54535746"});
}

TEST(FrameTest, RefusesOtherMajorVersion) {
  std::vector<uint8_t> frame = sample_frame();
  poke<uint16_t>(frame, 4, 2);
  expect_invalid(decode_frame(frame, kLimits), {"frame major version: 2 != 1"});
}

TEST(FrameTest, RefusesUnknownKinds) {
  for (uint32_t kind : {0u, 4u, 0xffffffffu}) {
    std::vector<uint8_t> frame = sample_frame();
    poke<uint32_t>(frame, 8, kind);
    expect_invalid(decode_frame(frame, kLimits), {"frame kind: " + std::to_string(kind) + " not in [1, 3]"});
  }
}

TEST(FrameTest, RefusesHeaderAboveMax) {
  const std::vector<uint8_t> frame = encode_frame(MessageKind::kTensor, 1, pattern(89), pattern(1));
  expect_invalid(decode_frame(frame, kLimits), {"frame header_bytes: 89 > max 88"});
}

TEST(FrameTest, RefusesPayloadAboveMax) {
  const std::vector<uint8_t> frame = sample_frame();
  expect_invalid(decode_frame(frame, FrameLimits{88, 99}), {"frame payload_bytes: 100 > max 99"});
  // A stream reader learns it from the prefix alone, before reading the payload.
  expect_invalid(decode_frame_prefix(std::span(frame).first(32), FrameLimits{88, 99}), {"payload_bytes: 100 > max 99"});
}

TEST(FrameTest, ControlFrameHasItsOwnBound) {
  // Within the tensor bound (1 MiB), beyond the control bound (1 KiB).
  const std::vector<uint8_t> big = encode_frame(MessageKind::kControl, 1, {}, pattern(1025));
  expect_invalid(decode_frame(big, kLimits), {"control frame payload_bytes: 1025 > max 1024"});
  const std::vector<uint8_t> fits = encode_frame(MessageKind::kControl, 1, {}, pattern(1024));
  EXPECT_TRUE(decode_frame(fits, kLimits).ok());
  // Where no control message is expected, none is accepted.
  expect_invalid(decode_frame(fits, FrameLimits{88, 1 << 20}), {"control frame payload_bytes: 1024 > max 0"});
}

TEST(FrameTest, ControlFrameWithAMessageHeaderIsRefused) {
  const std::vector<uint8_t> frame = encode_frame(MessageKind::kControl, 1, pattern(8), pattern(10));
  expect_invalid(decode_frame(frame, kLimits), {"control frame header_bytes: 8 > max 0"});
}

TEST(FrameTest, RefusesLengthOverflow) {
  std::vector<uint8_t> frame = sample_frame();
  frame.resize(32);                            // the prefix, header_bytes 24
  poke<uint64_t>(frame, 24, UINT64_MAX - 40);  // 32 + 24 + this wraps to 15
  expect_invalid(decode_frame(frame, FrameLimits{88, UINT64_MAX}), {"frame length: 32 + 24 + ", "overflows u64"});
}

TEST(FrameTest, RefusesTruncatedFrame) {
  const std::vector<uint8_t> frame = sample_frame();
  expect_invalid(decode_frame(std::span(frame).first(frame.size() - 1), kLimits),
                 {"frame truncated: 155 bytes < 156 declared"});
}

TEST(FrameTest, RefusesTrailingBytes) {
  std::vector<uint8_t> frame = sample_frame();
  frame.push_back(0);
  expect_invalid(decode_frame(frame, kLimits), {"frame trailing bytes: 157 bytes > 156 declared"});
}

}  // namespace
}  // namespace tessera::wire
