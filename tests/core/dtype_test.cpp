// Tests of dtype names and sizes and the scalar f16/bf16 <-> f32 conversions,
// against known bit patterns (IEEE 754 binary16; bfloat16 as torch rounds it).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace tessera {
namespace {

float from_bits(uint32_t bits) { return std::bit_cast<float>(bits); }
bool is_f16_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }
bool is_bf16_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x007f) != 0; }

TEST(DTypeTest, NamesAndSizes) {
  struct Case {
    DType dtype;
    size_t size;
    const char* name;
    const char* safetensors;
  };
  const Case cases[] = {{DType::kF32, 4, "f32", "F32"},    {DType::kF16, 2, "f16", "F16"},
                        {DType::kBF16, 2, "bf16", "BF16"}, {DType::kI64, 8, "i64", "I64"},
                        {DType::kI32, 4, "i32", "I32"},    {DType::kU8, 1, "u8", "U8"}};
  for (const Case& c : cases) {
    EXPECT_EQ(dtype_size(c.dtype), c.size) << c.name;
    EXPECT_EQ(dtype_name(c.dtype), c.name);
    EXPECT_EQ(dtype_safetensors_name(c.dtype), c.safetensors);
    EXPECT_EQ(dtype_from_safetensors(c.safetensors), c.dtype);
  }
}

// ggml's block formats (ggml-common.h: QK8_0 = QK4_0 = 32, QK_K = 256; the
// block_* struct sizes): no per-element size; ggml's type names as tessera's
// own safetensors names (a stage's container of shipped blocks).
TEST(DTypeTest, QuantizedTypesAreGgmlBlocks) {
  struct Case {
    DType dtype;
    int64_t block;
    size_t bytes;
    const char* name;
    const char* safetensors;
  };
  const Case cases[] = {{DType::kQ8_0, 32, 34, "q8_0", "Q8_0"},
                        {DType::kQ4_0, 32, 18, "q4_0", "Q4_0"},
                        {DType::kQ4_K, 256, 144, "q4_k", "Q4_K"},
                        {DType::kQ5_K, 256, 176, "q5_k", "Q5_K"},
                        {DType::kQ6_K, 256, 210, "q6_k", "Q6_K"}};
  for (const Case& c : cases) {
    EXPECT_TRUE(dtype_is_quantized(c.dtype)) << c.name;
    EXPECT_EQ(dtype_block_elements(c.dtype), c.block) << c.name;
    EXPECT_EQ(dtype_block_bytes(c.dtype), c.bytes) << c.name;
    EXPECT_EQ(dtype_bytes(c.dtype, 4 * c.block), 4 * c.bytes) << c.name;
    EXPECT_EQ(dtype_size(c.dtype), 0u) << c.name;
    EXPECT_EQ(dtype_name(c.dtype), c.name);
    EXPECT_EQ(dtype_safetensors_name(c.dtype), c.safetensors) << c.name;
    EXPECT_EQ(dtype_from_safetensors(c.safetensors), c.dtype) << c.name;
    const int64_t rows_of_3_blocks[] = {2, 3 * c.block};
    EXPECT_EQ(tensor_bytes(c.dtype, rows_of_3_blocks), 6 * c.bytes) << c.name;
    const int64_t part_block[] = {3 * c.block, c.block / 2};  // as many elements, rows of half a block
    EXPECT_EQ(tensor_bytes(c.dtype, part_block), std::nullopt) << c.name;
    EXPECT_EQ(tensor_bytes(c.dtype, {}), std::nullopt) << c.name;
  }
  const int64_t huge[] = {int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_EQ(tensor_bytes(DType::kU8, huge), std::nullopt);
  const int64_t scalar_shape[1] = {5};
  EXPECT_EQ(tensor_bytes(DType::kF32, std::span<const int64_t>(scalar_shape, 0)), 4u);
  EXPECT_EQ(tensor_bytes(DType::kBF16, scalar_shape), 10u);
  for (const DType plain : {DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kI32, DType::kU8}) {
    EXPECT_FALSE(dtype_is_quantized(plain));
    EXPECT_EQ(dtype_block_elements(plain), 1);
    EXPECT_EQ(dtype_bytes(plain, 3), 3 * dtype_size(plain));
  }
}

TEST(DTypeTest, RejectsUnknownSafetensorsNames) {
  for (const char* name : {"", "f32", "F64", "BOOL", "F8_E4M3", "I8", "F32 ", "BF1", "q4_k", "Q4_1", "Q8_K"}) {
    EXPECT_FALSE(dtype_from_safetensors(name).has_value()) << name;
  }
}

TEST(F16Test, EncodesKnownValues) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(0.5f), 0x3800);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);               // largest finite
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03ff);
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(f32_to_f16(-std::numeric_limits<float>::infinity()), 0xfc00);
}

TEST(F16Test, RoundsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -10);                                // f16 spacing in [1, 2)
  EXPECT_EQ(f32_to_f16(1.0f + ulp / 2), 0x3c00);                          // tie, down to even
  EXPECT_EQ(f32_to_f16(1.0f + 3 * ulp / 2), 0x3c02);                      // tie, up to even
  EXPECT_EQ(f32_to_f16(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 0x3c01);  // just above the tie
  EXPECT_EQ(f32_to_f16(1.0f + ulp / 2 - std::ldexp(1.0f, -20)), 0x3c00);  // just below the tie
  EXPECT_EQ(f32_to_f16(2.0f - ulp / 4), 0x4000);                          // carries into the exponent
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);                                // below the overflow tie
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);                                // tie with 65536 -> infinity
  EXPECT_EQ(f32_to_f16(1e10f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e10f), 0xfc00);
}

TEST(F16Test, RoundsSubnormalsToNearestEven) {
  const float tiny = std::ldexp(1.0f, -24);
  EXPECT_EQ(f32_to_f16(tiny / 2), 0x0000);  // tie, down to even (0)
  EXPECT_EQ(f32_to_f16(-tiny / 2), 0x8000);
  EXPECT_EQ(f32_to_f16(tiny * 0.75f), 0x0001);
  EXPECT_EQ(f32_to_f16(tiny * 1.5f), 0x0002);  // tie, up to even
  EXPECT_EQ(f32_to_f16(tiny * 2.5f), 0x0002);  // tie, down to even
  EXPECT_EQ(f32_to_f16(tiny * 0.25f), 0x0000);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14) - tiny / 4), 0x0400);  // rounds up into the normals
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(f32_to_f16(from_bits(0x00000001)), 0x0000);  // f32 subnormal
}

TEST(F16Test, DecodesKnownValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x7c00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(f16_to_f32(0xfc00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0xfe00)));
  EXPECT_EQ(f16_to_f32(0x0000), 0.0f);
  EXPECT_FALSE(std::signbit(f16_to_f32(0x0000)));
  EXPECT_TRUE(std::signbit(f16_to_f32(0x8000)));
}

TEST(F16Test, NanStaysNan) {
  EXPECT_TRUE(is_f16_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_f16_nan(f32_to_f16(from_bits(0x7f800001))));  // payload only in the low bits
  EXPECT_TRUE(is_f16_nan(f32_to_f16(from_bits(0xffc00000))));
}

TEST(F16Test, RoundTripsEveryNonNanValue) {
  int failures = 0;
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto bits = static_cast<uint16_t>(h);
    if (is_f16_nan(bits)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(bits))) << std::hex << h;
      continue;
    }
    if (f32_to_f16(f16_to_f32(bits)) != bits && ++failures <= 10) {
      ADD_FAILURE() << "0x" << std::hex << h << " -> " << f16_to_f32(bits) << " -> 0x" << f32_to_f16(f16_to_f32(bits));
    }
  }
  EXPECT_EQ(failures, 0);
}

TEST(Bf16Test, EncodesKnownValuesWithNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808000)), 0x3f80);  // tie, down to even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f818000)), 0x3f82);  // tie, up to even
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f808001)), 0x3f81);  // just above the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3f807fff)), 0x3f80);  // just below the tie
  EXPECT_EQ(f32_to_bf16(from_bits(0x3fffffff)), 0x4000);  // carries into the exponent
  EXPECT_EQ(f32_to_bf16(from_bits(0x7f7fffff)), 0x7f80);  // largest f32 rounds to infinity, as in torch
  EXPECT_EQ(f32_to_bf16(from_bits(0x00010000)), 0x0001);  // subnormal
  EXPECT_EQ(f32_to_bf16(from_bits(0x00018000)), 0x0002);  // subnormal tie, up to even
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xff80);
}

TEST(Bf16Test, NanStaysNan) {
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(from_bits(0x7f800001))));  // would truncate to infinity
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(from_bits(0x7fffffff))));  // would carry into the sign
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(from_bits(0xff800001))));
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc0)));
}

TEST(Bf16Test, DecodesAndRoundTripsEveryNonNanValue) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(bf16_to_f32(0x7f80), std::numeric_limits<float>::infinity());
  int failures = 0;
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto bits = static_cast<uint16_t>(b);
    if (is_bf16_nan(bits)) continue;
    if (f32_to_bf16(bf16_to_f32(bits)) != bits && ++failures <= 10) ADD_FAILURE() << "0x" << std::hex << b;
  }
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace tessera
