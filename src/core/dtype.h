// Element types of tensors, and scalar conversions between the 16-bit float
// formats and f32. Bulk conversions live in the backends.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tessera {

enum class DType : uint8_t { kF32, kF16, kBF16, kI64, kI32, kU8 };

// Inline: wire decoders need it on every frame.
constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}
std::string_view dtype_name(DType dtype);  // "f32", "bf16", ...
// Parses safetensors' names: "F32", "F16", "BF16", "I64", "I32", "U8".
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::string_view dtype_safetensors_name(DType dtype);

inline float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(uint32_t{bits} << 16); }

// Round to nearest even, as torch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float value) {
  uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float f16_to_f32(uint16_t bits);
uint16_t f32_to_f16(float value);

}  // namespace tessera
