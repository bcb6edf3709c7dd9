// Tests of the tensor header and payload decoders (src/wire/tensor_codec.h).
// Valid frames come from the encoder; each hostile header is built field by
// field, breaking exactly one check, with everything else consistent.
//
// Verified by reverting (each check removed in turn, a test here fails, check
// restored): header shorter than 24 bytes, wrong dtype, unexpected flag (lz4,
// int8), rank too large, header length != 24 + 8 * rank, rank != the limits'
// rank, each axis out of bound (exact, min, max), element-count overflow,
// decoded-size overflow, decoded size above max_decoded_bytes, original_bytes
// lie, payload_bytes lie (plain), quantized size lie, LZ4 payload above bound,
// truncated payload (borrow and decode), trailing bytes (borrow and decode), LZ4
// size lie (short and long block, plain and quantized), flagged payload not
// borrowable, frame kind other than tensor.
#include "wire/tensor_codec.h"

#include <gtest/gtest.h>

#include <bit>

#include "wire/byte_io.h"
#include "wire/lz4_codec.h"
#include "wire/quant.h"
#include "wire_test_util.h"

namespace tessera::wire {
namespace {

using testing::expect_invalid;
using testing::pattern;

// hidden_states of a toy model: f32 [1..16, 64].
DecodeLimits hidden_limits(uint8_t flags = 0, uint16_t group = 0) {
  DecodeLimits limits;
  limits.name = "hidden_states";
  limits.dtypes = {DType::kF32};
  limits.flags = flags;
  limits.group_size = group;
  limits.axes = {AxisBound::range(1, 16), AxisBound::exact(64)};
  limits.max_decoded_bytes = 16 * 64 * 4;
  return limits;
}

// Wire fields as a peer may set them, consistent until a test breaks one.
struct RawHeader {
  uint8_t dtype = 1;  // f32
  uint8_t flags = 0;
  uint16_t group = 0;
  uint32_t rank = 2;
  uint64_t original = 2 * 64 * 4;
  uint64_t payload = 2 * 64 * 4;
  std::vector<uint64_t> dims = {2, 64};

  std::vector<uint8_t> bytes() const {
    std::vector<uint8_t> out;
    put_u8(out, dtype);
    put_u8(out, flags);
    put_u16(out, group);
    put_u32(out, rank);
    put_u64(out, original);
    put_u64(out, payload);
    for (uint64_t d : dims) put_u64(out, d);
    return out;
  }
};

Result<TensorHeader> decode(const RawHeader& raw, const DecodeLimits& limits) {
  return decode_tensor_header(raw.bytes(), limits);
}

std::vector<float> activations(size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int>(i % 13) - 6) * 0.5f;
  return out;
}

// A Frame borrows `bytes`, so it must not be given a temporary.
Frame frame_of(std::vector<uint8_t>&& bytes) = delete;
Frame frame_of(const std::vector<uint8_t>& bytes) {
  Result<Frame> frame = decode_frame(bytes, FrameLimits{kMaxMessageHeaderBytes, 1 << 20});
  TS_CHECK(frame.ok(), frame.status().to_string());
  return *frame;
}

TEST(TensorCodecTest, HeaderLayoutIsByteExact) {
  const uint64_t shape[] = {3, 64};
  const std::vector<uint8_t> header = encode_tensor_header(Encoding{DType::kBF16, kFlagInt8, 64}, shape, 100);
  RawHeader raw{3, kFlagInt8, 64, 2, 3 * 64 * 2, 100, {3, 64}};
  EXPECT_EQ(header, raw.bytes());
}

TEST(TensorCodecTest, UnflaggedPayloadIsBorrowedNotCopied) {
  const std::vector<float> values = activations(3 * 64);
  const uint64_t shape[] = {3, 64};
  const std::vector<uint8_t> bytes = encode_tensor_frame(9, Encoding{}, shape, testing::as_bytes(values));
  const Frame frame = frame_of(bytes);
  std::vector<uint8_t> scratch;
  const Result<DecodedTensor> tensor = decode_tensor(frame, hidden_limits(), scratch);
  ASSERT_TRUE(tensor.ok()) << tensor.status().to_string();
  EXPECT_EQ(tensor->bytes.data(), frame.payload.data());
  EXPECT_EQ(tensor->bytes.size(), values.size() * 4);
  EXPECT_EQ(scratch.capacity(), 0u);
  const TensorView view = tensor->view();
  EXPECT_EQ(view.shape, (std::vector<int64_t>{3, 64}));
  EXPECT_EQ(view.dtype, DType::kF32);
  EXPECT_EQ(std::memcmp(view.data, values.data(), view.nbytes()), 0);
}

TEST(TensorCodecTest, CopyDecodeOfUnflaggedPayload) {
  const std::vector<float> values = activations(64);
  const uint64_t shape[] = {1, 64};
  const std::vector<uint8_t> bytes = encode_tensor_frame(1, Encoding{}, shape, testing::as_bytes(values));
  const Frame frame = frame_of(bytes);
  const Result<TensorHeader> header = decode_tensor_header(frame.header, hidden_limits());
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  std::vector<float> out(64);
  ASSERT_TRUE(
      decode_tensor_payload(*header, frame.payload, {reinterpret_cast<uint8_t*>(out.data()), 256}, hidden_limits())
          .ok());
  EXPECT_EQ(out, values);
}

TEST(TensorCodecTest, RankZeroIsOneElement) {
  DecodeLimits limits = hidden_limits();
  limits.axes = {};
  const float value = 2.5f;
  const std::vector<uint8_t> bytes =
      encode_tensor_frame(1, Encoding{}, {}, {reinterpret_cast<const uint8_t*>(&value), 4});
  const Frame frame = frame_of(bytes);
  std::vector<uint8_t> scratch;
  const Result<DecodedTensor> tensor = decode_tensor(frame, limits, scratch);
  ASSERT_TRUE(tensor.ok()) << tensor.status().to_string();
  EXPECT_EQ(tensor->header.numel, 1u);
  EXPECT_EQ(tensor->header.decoded_bytes, 4u);
  EXPECT_EQ(std::bit_cast<float>(get_u32(tensor->bytes, 0)), 2.5f);
}

TEST(TensorCodecTest, ZeroLengthAxisOnlyWhenTheReceiverSaysSo) {
  RawHeader raw;
  raw.dims = {0, 64};
  raw.original = raw.payload = 0;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states axis 0: 0 < min 1"});
  DecodeLimits limits = hidden_limits();
  limits.axes[0] = AxisBound::range_from_zero(16);
  const Result<TensorHeader> header = decode(raw, limits);
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  EXPECT_EQ(header->numel, 0u);
}

TEST(TensorCodecTest, DecodesLz4AndQuantizedFrames) {
  const std::vector<float> values = activations(4 * 64);
  const uint64_t shape[] = {4, 64};
  const DecodeLimits limits = hidden_limits(kKnownFlags);
  for (const Encoding& e : {Encoding{DType::kF32, kFlagLz4, 0}, Encoding{DType::kF32, kFlagInt8, 32},
                            Encoding{DType::kF32, kFlagInt4, 64}, Encoding{DType::kF32, kFlagInt8 | kFlagLz4, 128}}) {
    const std::vector<uint8_t> bytes = encode_tensor_frame(1, e, shape, testing::as_bytes(values));
    std::vector<uint8_t> scratch;
    const Result<DecodedTensor> tensor = decode_tensor(frame_of(bytes), limits, scratch);
    ASSERT_TRUE(tensor.ok()) << tensor.status().to_string();
    ASSERT_EQ(tensor->bytes.size(), values.size() * 4);
    EXPECT_EQ(tensor->bytes.data(), scratch.data());
    const float tolerance = e.quant_bits() == 4 ? 3.0f / 7 / 2 + 1e-6f : e.quant_bits() == 8 ? 3.0f / 127 : 0.0f;
    for (size_t i = 0; i < values.size(); ++i) {
      EXPECT_NEAR(std::bit_cast<float>(get_u32(tensor->bytes, 4 * i)), values[i], tolerance) << flags_string(e.flags);
    }
  }
}

TEST(TensorCodecTest, RefusedFrameAllocatesNothing) {
  RawHeader raw;
  raw.dims = {uint64_t{1} << 40, 64};
  raw.original = raw.payload = (uint64_t{1} << 40) * 64 * 4;
  const std::vector<uint8_t> header = raw.bytes();
  Frame frame;
  frame.header = header;
  std::vector<uint8_t> scratch;
  expect_invalid(decode_tensor(frame, hidden_limits(kFlagLz4), scratch),
                 {"hidden_states axis 0: 1099511627776 > max 16"});
  EXPECT_EQ(scratch.capacity(), 0u);
}

TEST(TensorCodecTest, RefusesShortHeader) {
  const std::vector<uint8_t> bytes = RawHeader{}.bytes();
  expect_invalid(decode_tensor_header(std::span(bytes).first(20), hidden_limits()),
                 {"hidden_states header: 20 bytes < 24"});
}

TEST(TensorCodecTest, RefusesWrongDtype) {
  RawHeader raw;
  raw.dtype = 3;  // bf16
  raw.original = raw.payload = 2 * 64 * 2;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states dtype: bf16 not allowed (allowed: f32)"});
}

TEST(TensorCodecTest, RefusesUnexpectedFlag) {
  RawHeader raw;
  raw.flags = kFlagLz4;
  raw.payload = 20;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states flags: lz4 not allowed (allowed: none)"});
  raw.flags = kFlagInt8;
  raw.group = 32;
  raw.payload = 4 * 36;
  expect_invalid(decode(raw, hidden_limits(kFlagLz4)), {"hidden_states flags: int8 not allowed (allowed: lz4)"});
}

TEST(TensorCodecTest, RefusesRankTooLarge) {
  DecodeLimits limits = hidden_limits();  // a receiver that (wrongly) expects rank 9
  limits.axes.assign(9, AxisBound::range(1, 2));
  RawHeader raw;
  raw.rank = 9;
  raw.dims.assign(9, 1);
  raw.original = raw.payload = 4;
  expect_invalid(decode(raw, limits), {"hidden_states rank: 9 > max 8"});
  raw.rank = 0xffffffff;
  expect_invalid(decode(raw, limits), {"hidden_states rank: 4294967295 > max 8"});
}

TEST(TensorCodecTest, RefusesHeaderLengthOtherThanRankSays) {
  RawHeader raw;
  std::vector<uint8_t> bytes = raw.bytes();
  bytes.pop_back();
  expect_invalid(decode_tensor_header(bytes, hidden_limits()), {"hidden_states header: 39 bytes != 40 for rank 2"});
  bytes.push_back(0);
  bytes.push_back(0);
  expect_invalid(decode_tensor_header(bytes, hidden_limits()), {"hidden_states header: 41 bytes != 40 for rank 2"});
}

TEST(TensorCodecTest, RefusesRankOtherThanExpected) {
  RawHeader raw;
  raw.rank = 1;
  raw.dims = {2};
  raw.original = raw.payload = 8;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states rank: 1 != expected 2"});
  raw.rank = 3;
  raw.dims = {2, 64, 1};
  raw.original = raw.payload = 2 * 64 * 4;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states rank: 3 != expected 2"});
}

TEST(TensorCodecTest, RefusesEachAxisOutOfBound) {
  RawHeader raw;
  raw.dims = {17, 64};
  raw.original = raw.payload = 17 * 64 * 4;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states axis 0: 17 > max 16"});
  raw.dims = {0, 64};
  raw.original = raw.payload = 0;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states axis 0: 0 < min 1"});
  raw.dims = {2, 65};
  raw.original = raw.payload = 2 * 65 * 4;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states axis 1: 65 != exact 64"});
  raw.dims = {2, 32};
  raw.original = raw.payload = 2 * 32 * 4;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states axis 1: 32 != exact 64"});
}

// Limits that leave overflow to the arithmetic checks: any u8/f32 [n, m].
DecodeLimits loose_limits() {
  DecodeLimits limits;
  limits.name = "blob";
  limits.dtypes = {DType::kU8, DType::kF32};
  limits.axes = {AxisBound::range(1, kMaxAxisBound), AxisBound::range(1, kMaxAxisBound)};
  limits.max_decoded_bytes = UINT64_MAX;
  return limits;
}

TEST(TensorCodecTest, RefusesElementCountOverflow) {
  RawHeader raw;
  raw.dtype = 6;                                      // u8
  raw.dims = {uint64_t{1} << 32, uint64_t{1} << 32};  // the product wraps to 0
  raw.original = raw.payload = 0;
  expect_invalid(decode(raw, loose_limits()), {"blob element count: product of dims overflows u64"});
}

TEST(TensorCodecTest, ZeroDimMakesZeroElementsInAnyOrder) {
  RawHeader raw;
  raw.dtype = 6;
  raw.original = raw.payload = 0;
  for (const std::vector<uint64_t>& dims :
       {std::vector<uint64_t>{0, uint64_t{1} << 40}, std::vector<uint64_t>{uint64_t{1} << 40, 0}}) {
    raw.dims = dims;
    DecodeLimits limits = loose_limits();
    limits.axes[0] = limits.axes[1] = AxisBound::range_from_zero(kMaxAxisBound);
    const Result<TensorHeader> header = decode(raw, limits);
    ASSERT_TRUE(header.ok()) << header.status().to_string();
    EXPECT_EQ(header->numel, 0u);
  }
}

TEST(TensorCodecTest, RefusesDecodedSizeOverflow) {
  RawHeader raw;
  raw.dims = {(uint64_t{1} << 62) + 1, 1};  // * 4 bytes wraps to 4
  raw.original = raw.payload = 4;
  expect_invalid(decode(raw, loose_limits()),
                 {"blob decoded size: 4611686018427387905 elements * 4 bytes overflows u64"});
}

TEST(TensorCodecTest, RefusesDecodedSizeAboveMax) {
  DecodeLimits limits = loose_limits();
  limits.max_decoded_bytes = 1000;
  RawHeader raw;
  raw.dims = {1, 251};
  raw.original = raw.payload = 1004;
  expect_invalid(decode(raw, limits), {"blob decoded size: 1004 > max 1000"});
}

TEST(TensorCodecTest, RefusesOriginalBytesLie) {
  RawHeader raw;
  raw.original = 2 * 64 * 4 - 1;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states original_bytes: 511 != 512 from dtype and dims"});
}

TEST(TensorCodecTest, RefusesPayloadBytesLie) {
  RawHeader raw;
  raw.payload = 511;
  expect_invalid(decode(raw, hidden_limits()), {"hidden_states payload_bytes: 511 != expected 512"});
}

TEST(TensorCodecTest, RefusesQuantizedSizeLie) {
  RawHeader raw;
  raw.flags = kFlagInt8;
  raw.group = 32;
  raw.payload = 4 * 36 + 1;  // 128 elements: 4 blocks of 4 + 32 bytes
  expect_invalid(decode(raw, hidden_limits(kFlagInt8)), {"hidden_states payload_bytes: 145 != expected 144"});
  raw.flags = kFlagInt4;
  raw.payload = 4 * 20 - 1;
  expect_invalid(decode(raw, hidden_limits(kFlagInt4)), {"hidden_states payload_bytes: 79 != expected 80"});
}

TEST(TensorCodecTest, RefusesLz4PayloadAboveBound) {
  RawHeader raw;
  raw.flags = kFlagLz4;
  raw.payload = lz4_compress_bound(512) + 1;
  expect_invalid(decode(raw, hidden_limits(kFlagLz4)),
                 {"hidden_states payload_bytes: 531 not in [1, 530] for lz4 of 512 bytes"});
}

// A frame of a valid header for `raw` and `payload`, without encode_frame's help.
std::vector<uint8_t> frame_bytes(const RawHeader& raw, std::span<const uint8_t> payload) {
  return encode_frame(MessageKind::kTensor, 1, raw.bytes(), payload);
}

TEST(TensorCodecTest, RefusesTruncatedPayload) {
  const RawHeader raw;
  const std::vector<uint8_t> payload = pattern(511);
  const std::vector<uint8_t> bytes = frame_bytes(raw, payload);
  const Frame frame = frame_of(bytes);
  const Result<TensorHeader> header = decode_tensor_header(frame.header, hidden_limits());
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  expect_invalid(borrow_tensor_payload(*header, frame.payload, hidden_limits()),
                 {"hidden_states payload truncated: 511 bytes < payload_bytes 512"});
  std::vector<uint8_t> out(512);
  expect_invalid(decode_tensor_payload(*header, frame.payload, out, hidden_limits()), {"payload truncated"});
}

TEST(TensorCodecTest, RefusesTrailingPayloadBytes) {
  const RawHeader raw;
  const std::vector<uint8_t> payload = pattern(513);
  const std::vector<uint8_t> bytes = frame_bytes(raw, payload);
  const Frame frame = frame_of(bytes);
  const Result<TensorHeader> header = decode_tensor_header(frame.header, hidden_limits());
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  expect_invalid(borrow_tensor_payload(*header, frame.payload, hidden_limits()),
                 {"hidden_states payload trailing bytes: 513 bytes > payload_bytes 512"});
  std::vector<uint8_t> out(512);
  expect_invalid(decode_tensor_payload(*header, frame.payload, out, hidden_limits()), {"payload trailing bytes"});
}

TEST(TensorCodecTest, RefusesLz4SizeLie) {
  for (size_t actual : {508, 516}) {  // a block of 4 bytes fewer, or more, than [2, 64] f32
    const std::vector<uint8_t> block = lz4_compress(pattern(actual));
    RawHeader raw;
    raw.flags = kFlagLz4;
    raw.payload = block.size();
    std::vector<uint8_t> scratch;
    const std::vector<uint8_t> bytes = frame_bytes(raw, block);
    expect_invalid(decode_tensor(frame_of(bytes), hidden_limits(kFlagLz4), scratch),
                   {actual < 512 ? "hidden_states lz4: decoded 508 bytes != expected 512"
                                 : "hidden_states lz4: corrupt block, or it decodes to more than 512 bytes"});
  }
}

TEST(TensorCodecTest, RefusesLz4SizeLieInsideQuantizedFrame) {
  const std::vector<float> values = activations(128);
  std::vector<uint8_t> quantized = quantize(DType::kF32, testing::as_bytes(values), 8, 32);
  quantized.pop_back();  // 143 bytes where [2, 64] int8 needs 144
  const std::vector<uint8_t> block = lz4_compress(quantized);
  RawHeader raw;
  raw.flags = kFlagLz4 | kFlagInt8;
  raw.group = 32;
  raw.payload = block.size();
  std::vector<uint8_t> scratch;
  const std::vector<uint8_t> bytes = frame_bytes(raw, block);
  expect_invalid(decode_tensor(frame_of(bytes), hidden_limits(kKnownFlags), scratch),
                 {"hidden_states lz4: decoded 143 bytes != expected 144"});
}

TEST(TensorCodecTest, RefusesToBorrowFlaggedPayload) {
  RawHeader raw;
  raw.flags = kFlagLz4;
  raw.payload = 20;
  const Result<TensorHeader> header = decode(raw, hidden_limits(kFlagLz4));
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  expect_invalid(borrow_tensor_payload(*header, pattern(20), hidden_limits(kFlagLz4)),
                 {"hidden_states flags: lz4 payload cannot be borrowed"});
}

TEST(TensorCodecTest, RefusesOtherFrameKind) {
  std::vector<uint8_t> bytes = frame_bytes(RawHeader{}, pattern(512));
  bytes[8] = static_cast<uint8_t>(MessageKind::kLayerChunk);
  std::vector<uint8_t> scratch;
  expect_invalid(decode_tensor(frame_of(bytes), hidden_limits(), scratch),
                 {"hidden_states frame kind: 2 != tensor (1)"});
}

}  // namespace
}  // namespace tessera::wire
