// Tests of the blockwise int8/int4 codec (src/wire/quant.h): the byte layout,
// accuracy, and exact payload sizes.
//
// Verified by reverting (each check removed in turn, a test here fails, check
// restored): non-float dtype, bits other than 8/4, invalid group, decoded size
// not whole groups, quantized size lie (payload shorter or longer than exact).
#include "wire/quant.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>

#include "wire/byte_io.h"
#include "wire_test_util.h"

namespace tessera::wire {
namespace {

using testing::expect_invalid;

std::vector<float> ramp(size_t n) {
  std::vector<float> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::sin(0.37f * static_cast<float>(i)) * static_cast<float>(1 + i % 5);
  return out;
}

std::vector<uint8_t> to_dtype(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> out;
  for (float v : values) {
    if (dtype == DType::kF32) put_u32(out, std::bit_cast<uint32_t>(v));
    if (dtype == DType::kF16) put_u16(out, f32_to_f16(v));
    if (dtype == DType::kBF16) put_u16(out, f32_to_bf16(v));
  }
  return out;
}

float element(const std::vector<uint8_t>& bytes, DType dtype, size_t i) {
  if (dtype == DType::kF32) return std::bit_cast<float>(get_u32(bytes, 4 * i));
  if (dtype == DType::kF16) return f16_to_f32(get_u16(bytes, 2 * i));
  return bf16_to_f32(get_u16(bytes, 2 * i));
}

TEST(QuantTest, SizesAreExact) {
  EXPECT_EQ(*quantized_bytes(64, 8, 32), 2u * 36);
  EXPECT_EQ(*quantized_bytes(128, 4, 128), 68u);
  EXPECT_EQ(*quantized_bytes(0, 4, 64), 0u);
  EXPECT_FALSE(quantized_bytes(96, 8, 64).has_value());
}

TEST(QuantTest, Int8BlockLayout) {
  std::vector<float> values(32, 0.0f);
  values[0] = 127.0f;
  values[1] = -63.5f;
  const std::vector<uint8_t> q = quantize(DType::kF32, testing::as_bytes(values), 8, 32);
  ASSERT_EQ(q.size(), 36u);
  EXPECT_EQ(std::bit_cast<float>(get_u32(q, 0)), 1.0f);  // scale = 127 / 127
  EXPECT_EQ(q[4], 127);
  EXPECT_EQ(static_cast<int8_t>(q[5]), -64);  // nearest even of -63.5
  EXPECT_EQ(q[6], 0);
}

TEST(QuantTest, Int4PacksLowNibbleFirst) {
  std::vector<float> values(32, 0.0f);
  values[0] = 7.0f;
  values[1] = -3.0f;
  const std::vector<uint8_t> q = quantize(DType::kF32, testing::as_bytes(values), 4, 32);
  ASSERT_EQ(q.size(), 4u + 16);
  EXPECT_EQ(std::bit_cast<float>(get_u32(q, 0)), 1.0f);
  EXPECT_EQ(q[4], 0xd7);  // low nibble 7, high nibble -3 = 0xd
}

TEST(QuantTest, RoundTripsWithinHalfAStep) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (int bits : {8, 4}) {
      for (uint16_t group : {32, 64, 128}) {
        const std::vector<float> values = ramp(256);
        const std::vector<uint8_t> plain = to_dtype(values, dtype);
        const std::vector<uint8_t> q = quantize(dtype, plain, bits, group);
        std::vector<uint8_t> out(plain.size());
        ASSERT_TRUE(dequantize("x", q, bits, group, dtype, out).ok());
        for (size_t g = 0; g < values.size() / group; ++g) {
          float amax = 0;
          for (size_t i = 0; i < group; ++i) amax = std::max(amax, std::fabs(element(plain, dtype, g * group + i)));
          const float step = amax / (bits == 8 ? 127.0f : 7.0f);
          for (size_t i = g * group; i < (g + 1) * group; ++i) {
            const float tolerance = step * 0.5f + std::fabs(element(plain, dtype, i)) * 0.01f;
            EXPECT_NEAR(element(out, dtype, i), element(plain, dtype, i), tolerance)
                << dtype_name(dtype) << " int" << bits << " group " << group << " i " << i;
          }
        }
      }
    }
  }
}

TEST(QuantTest, DecodesEveryInt4Nibble) {
  std::vector<uint8_t> q;
  put_u32(q, std::bit_cast<uint32_t>(1.0f));
  for (int i = 0; i < 16; ++i) q.push_back(i < 8 ? static_cast<uint8_t>((2 * i) | (2 * i + 1) << 4) : 0);
  std::vector<uint8_t> out(32 * 4);
  ASSERT_TRUE(dequantize("x", q, 4, 32, DType::kF32, out).ok());
  for (int i = 0; i < 16; ++i) EXPECT_EQ(element(out, DType::kF32, i), i < 8 ? i : i - 16) << i;
}

TEST(QuantTest, RefusesNonFloatDtype) {
  std::vector<uint8_t> out(32 * 4);
  expect_invalid(dequantize("x", std::vector<uint8_t>(36), 8, 32, DType::kI32, out),
                 {"x quantized payload: dtype i32 not a float"});
}

TEST(QuantTest, RefusesOtherBitWidths) {
  std::vector<uint8_t> out(32 * 4);
  expect_invalid(dequantize("x", std::vector<uint8_t>(36), 2, 32, DType::kF32, out),
                 {"x quantized payload: 2 bits not 8 or 4"});
}

TEST(QuantTest, RefusesInvalidGroup) {
  std::vector<uint8_t> out(48 * 4);
  expect_invalid(dequantize("x", std::vector<uint8_t>(52), 8, 48, DType::kF32, out),
                 {"x quantized payload: group_size 48 not 32, 64 or 128"});
}

TEST(QuantTest, RefusesPartialGroups) {
  std::vector<uint8_t> out(33 * 4);
  expect_invalid(dequantize("x", std::vector<uint8_t>(36), 8, 32, DType::kF32, out),
                 {"x quantized payload: decoded size 132 not whole groups of 32 f32"});
}

TEST(QuantTest, RefusesQuantizedSizeLie) {
  std::vector<uint8_t> out(64 * 2);
  expect_invalid(dequantize("x", std::vector<uint8_t>(71), 8, 32, DType::kBF16, out),
                 {"x quantized payload: 71 bytes != expected 72 for 64 elements"});
  expect_invalid(dequantize("x", std::vector<uint8_t>(73), 8, 32, DType::kBF16, out),
                 {"x quantized payload: 73 bytes != expected 72"});
  expect_invalid(dequantize("x", std::vector<uint8_t>(41), 4, 32, DType::kBF16, out),
                 {"x quantized payload: 41 bytes != expected 40"});
}

}  // namespace
}  // namespace tessera::wire
