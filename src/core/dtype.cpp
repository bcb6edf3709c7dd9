#include "core/dtype.h"

#include <cmath>
#include <iterator>

namespace tessera {

namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::string_view safetensors_name;
};
constexpr DTypeInfo kInfos[] = {
    {DType::kF32, "f32", "F32"},    {DType::kF16, "f16", "F16"},    {DType::kBF16, "bf16", "BF16"},
    {DType::kI64, "i64", "I64"},    {DType::kI32, "i32", "I32"},    {DType::kU8, "u8", "U8"},
    {DType::kQ8_0, "q8_0", "Q8_0"}, {DType::kQ4_0, "q4_0", "Q4_0"}, {DType::kQ4_K, "q4_k", "Q4_K"},
    {DType::kQ5_K, "q5_k", "Q5_K"}, {DType::kQ6_K, "q6_k", "Q6_K"},
};
static_assert(std::size(kInfos) == static_cast<size_t>(DType::kQ6_K) + 1);
const DTypeInfo& info(DType dtype) { return kInfos[static_cast<int>(dtype)]; }
}  // namespace

std::optional<uint64_t> tensor_bytes(DType dtype, std::span<const int64_t> shape) {
  const auto block = static_cast<uint64_t>(dtype_block_elements(dtype));
  if (dtype_is_quantized(dtype) && (shape.empty() || static_cast<uint64_t>(shape.back()) % block != 0)) {
    return std::nullopt;
  }
  uint64_t elements = 1;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(d), &elements)) return std::nullopt;
  }
  uint64_t bytes = 0;  // elements / block is exact here
  if (__builtin_mul_overflow(elements / block, uint64_t{dtype_block_bytes(dtype)}, &bytes)) return std::nullopt;
  return bytes;
}

std::string_view dtype_name(DType dtype) { return info(dtype).name; }
std::string_view dtype_safetensors_name(DType dtype) { return info(dtype).safetensors_name; }

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& i : kInfos)
    if (i.safetensors_name == name) return i.dtype;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ff;
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-24
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

uint16_t f32_to_f16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float magnitude = std::fabs(value);
  if (std::isnan(value)) return sign | 0x7e00;
  if (magnitude >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (magnitude < 6.103515625e-05f) {               // subnormal: multiples of 2^-24, nearest even
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(magnitude, 24)));
  }
  uint32_t m = std::bit_cast<uint32_t>(magnitude);
  m += 0xfffu + ((m >> 13) & 1u);  // round mantissa to 10 bits, nearest even
  return sign | static_cast<uint16_t>(((m >> 23) - 112) << 10 | ((m >> 13) & 0x3ff));
}

}  // namespace tessera
