// Tests of the encoding rules shared by tensor and layer headers
// (src/wire/encoding.h), called directly with hostile field values.
//
// Verified by reverting (each check removed in turn, a test here fails, check
// restored): unknown dtype code, dtype not allowed, unknown flag bits, flag not
// allowed, int8 and int4 both set, group_size without quantization, group_size
// not 32/64/128, group_size other than the required one, quantized non-float
// dtype, element count not a multiple of the group, quantized size overflow,
// LZ4 stored size above one block, payload_bytes != stored size (size lie),
// LZ4 payload_bytes of 0, LZ4 payload_bytes above LZ4's bound.
#include "wire/encoding.h"

#include <gtest/gtest.h>

#include "wire/lz4_codec.h"
#include "wire_test_util.h"

namespace tessera::wire {
namespace {

using testing::expect_invalid;

const std::vector<DType> kFloats = {DType::kF32, DType::kF16, DType::kBF16};
const std::vector<DType> kAll = {DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kI32, DType::kU8};

Result<Encoding> decode(uint8_t code, uint8_t flags, uint16_t group, const std::vector<DType>& dtypes = kAll,
                        uint8_t allowed = kKnownFlags, uint16_t required_group = 0) {
  return decode_encoding("x", code, flags, group, EncodingLimits{dtypes, allowed, required_group});
}

TEST(EncodingTest, DtypeCodesAreFixed) {
  EXPECT_EQ(dtype_code(DType::kF32), 1);
  EXPECT_EQ(dtype_code(DType::kF16), 2);
  EXPECT_EQ(dtype_code(DType::kBF16), 3);
  EXPECT_EQ(dtype_code(DType::kI64), 4);
  EXPECT_EQ(dtype_code(DType::kI32), 5);
  EXPECT_EQ(dtype_code(DType::kU8), 6);
  for (DType d : kAll) EXPECT_EQ(dtype_from_code(dtype_code(d)), d);
  EXPECT_FALSE(dtype_from_code(0).has_value());
  EXPECT_FALSE(dtype_from_code(7).has_value());
}

TEST(EncodingTest, NamesFlags) {
  EXPECT_EQ(flags_string(0), "none");
  EXPECT_EQ(flags_string(kFlagLz4 | kFlagInt4), "lz4|int4");
}

TEST(EncodingTest, AcceptsValidEncodings) {
  const Result<Encoding> plain = decode(3, 0, 0);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_EQ(plain->dtype, DType::kBF16);
  const Result<Encoding> quantized = decode(2, kFlagLz4 | kFlagInt4, 128);
  ASSERT_TRUE(quantized.ok()) << quantized.status().to_string();
  EXPECT_EQ(quantized->quant_bits(), 4);
  EXPECT_TRUE(quantized->lz4());
}

TEST(EncodingTest, RefusesUnknownDtypeCode) {
  expect_invalid(decode(0, 0, 0), {"x dtype: code 0 unknown"});
  expect_invalid(decode(7, 0, 0), {"x dtype: code 7 unknown"});
}

TEST(EncodingTest, RefusesDtypeNotAllowed) {
  expect_invalid(decode(3, 0, 0, {DType::kF32}), {"x dtype: bf16 not allowed (allowed: f32)"});
  expect_invalid(decode(1, 0, 0, {}), {"x dtype: f32 not allowed (allowed: none)"});
}

TEST(EncodingTest, RefusesUnknownFlagBits) {
  // The limits allow every bit, so only the protocol's own check stands.
  expect_invalid(decode(1, 0x08, 0, kAll, 0xff), {"x flags: unknown bits 8"});
}

TEST(EncodingTest, RefusesFlagsNotAllowed) {
  expect_invalid(decode(1, kFlagLz4, 0, kAll, 0), {"x flags: lz4 not allowed (allowed: none)"});
  expect_invalid(decode(1, kFlagInt8, 32, kAll, kFlagLz4 | kFlagInt4),
                 {"x flags: int8 not allowed (allowed: lz4|int4)"});
}

TEST(EncodingTest, RefusesInt8AndInt4Together) {
  expect_invalid(decode(1, kFlagInt8 | kFlagInt4, 32), {"x flags: int8 and int4 both set"});
}

TEST(EncodingTest, RefusesGroupSizeWithoutQuantization) {
  expect_invalid(decode(1, kFlagLz4, 32), {"x group_size: 32 != 0 without int8/int4"});
}

TEST(EncodingTest, RefusesInvalidGroupSize) {
  for (uint16_t group : {0, 16, 48, 256, 0xffff}) {
    expect_invalid(decode(1, kFlagInt8, group), {"x group_size: " + std::to_string(group) + " not 32, 64 or 128"});
  }
}

TEST(EncodingTest, RefusesGroupSizeOtherThanRequired) {
  expect_invalid(decode(1, kFlagInt4, 64, kAll, kKnownFlags, 32), {"x group_size: 64 != required 32"});
  EXPECT_TRUE(decode(1, kFlagInt4, 32, kAll, kKnownFlags, 32).ok());
}

TEST(EncodingTest, RefusesQuantizedIntegers) {
  expect_invalid(decode(5, kFlagInt8, 32), {"x dtype: i32 cannot be quantized"});
  expect_invalid(decode(6, kFlagInt4, 32), {"x dtype: u8 cannot be quantized"});
}

TEST(EncodingTest, StoredSizeIsExact) {
  const Encoding int8{DType::kBF16, kFlagInt8, 32};
  const Encoding int4{DType::kF32, kFlagInt4 | kFlagLz4, 128};
  EXPECT_EQ(*stored_bytes("x", Encoding{}, 10, 40), 40u);
  EXPECT_EQ(*stored_bytes("x", int8, 64, 128), 2u * (4 + 32));
  EXPECT_EQ(*stored_bytes("x", int4, 256, 1024), 2u * (4 + 64));
}

TEST(EncodingTest, RefusesElementCountNotMultipleOfGroup) {
  expect_invalid(stored_bytes("x", Encoding{DType::kF32, kFlagInt8, 32}, 48, 192),
                 {"x element count: 48 not a multiple of group_size 32"});
}

TEST(EncodingTest, RefusesQuantizedSizeOverflow) {
  const uint64_t numel = UINT64_MAX - 31;  // a multiple of 32; * 36/32 overflows
  expect_invalid(stored_bytes("x", Encoding{DType::kF32, kFlagInt8, 32}, numel, 0),
                 {"x element count", "quantized size overflows u64"});
}

TEST(EncodingTest, RefusesLz4AboveOneBlock) {
  expect_invalid(stored_bytes("x", Encoding{DType::kU8, kFlagLz4, 0}, kLz4MaxBlockBytes + 1, kLz4MaxBlockBytes + 1),
                 {"x lz4: stored size 2113929217 > max block 2113929216"});
  EXPECT_TRUE(stored_bytes("x", Encoding{DType::kU8, kFlagLz4, 0}, kLz4MaxBlockBytes, kLz4MaxBlockBytes).ok());
}

TEST(EncodingTest, RefusesPayloadSizeLie) {
  expect_invalid(check_payload_bytes("x", "payload_bytes", Encoding{}, 40, 39), {"x payload_bytes: 39 != expected 40"});
  expect_invalid(check_payload_bytes("x", "payload_bytes", Encoding{}, 40, 41), {"x payload_bytes: 41 != expected 40"});
  EXPECT_TRUE(check_payload_bytes("x", "payload_bytes", Encoding{}, 40, 40).ok());
}

TEST(EncodingTest, RefusesEmptyLz4Payload) {
  expect_invalid(check_payload_bytes("x", "payload_bytes", Encoding{DType::kU8, kFlagLz4, 0}, 0, 0),
                 {"x payload_bytes: 0 not in [1, 16] for lz4 of 0 bytes"});
}

TEST(EncodingTest, RefusesLz4PayloadAboveBound) {
  const Encoding lz4{DType::kU8, kFlagLz4, 0};
  EXPECT_TRUE(check_payload_bytes("x", "payload_bytes", lz4, 1000, lz4_compress_bound(1000)).ok());
  expect_invalid(check_payload_bytes("x", "payload_bytes", lz4, 1000, lz4_compress_bound(1000) + 1),
                 {"x payload_bytes: 1020 not in [1, 1019] for lz4 of 1000 bytes"});
}

TEST(EncodingTest, EncodeDecodePayloadRoundTrips) {
  std::vector<float> values(256);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 17) - 8.0f;
  const std::span<const uint8_t> data = testing::as_bytes(values);
  for (const Encoding& e : {Encoding{}, Encoding{DType::kF32, kFlagLz4, 0}, Encoding{DType::kF32, kFlagInt8, 64},
                            Encoding{DType::kF32, kFlagInt8 | kFlagLz4, 32}}) {
    const std::vector<uint8_t> payload = encode_payload(e, data);
    const uint64_t stored = *stored_bytes("x", e, values.size(), data.size());
    ASSERT_TRUE(check_payload_bytes("x", "payload_bytes", e, stored, payload.size()).ok()) << flags_string(e.flags);
    std::vector<float> out(values.size());
    ASSERT_TRUE(decode_payload("x", e, stored, payload, {reinterpret_cast<uint8_t*>(out.data()), data.size()}).ok());
    for (size_t i = 0; i < values.size(); ++i) EXPECT_NEAR(out[i], values[i], 0.04f) << flags_string(e.flags);
  }
}

}  // namespace
}  // namespace tessera::wire
