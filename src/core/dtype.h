// Element types of tensors, and scalar conversions between the 16-bit float
// formats and f32. Bulk conversions live in the backends.
//
// The quantized types (kQ8_0 .. kQ6_K) are ggml's block formats, byte for byte
// as a GGUF file stores them (ggml-common.h): a row of a quantized tensor is a
// whole number of blocks of dtype_block_elements() elements, each
// dtype_block_bytes() bytes. They have no per-element size: use dtype_bytes()
// (or TensorView::nbytes) for a count of elements; dtype_size() is 0 for them.
// Wire codecs never accept them (their tables end at kU8): shipped blocks travel
// as u8 bytes (wire/ship_manifest.h). Their safetensors names ("Q8_0" .. "Q6_K",
// ggml's) are tessera's own, for a stage's container of shipped blocks.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string_view>

namespace tessera {

enum class DType : uint8_t { kF32, kF16, kBF16, kI64, kI32, kU8, kQ8_0, kQ4_0, kQ4_K, kQ5_K, kQ6_K };

// Inline: wire decoders need it on every frame. 0 for the quantized types.
constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
    default: return 0;
  }
}

constexpr bool dtype_is_quantized(DType dtype) { return dtype >= DType::kQ8_0; }
// Elements per block: 1 for the plain types, 32 (Q8_0, Q4_0) or 256 (K-quants).
constexpr int64_t dtype_block_elements(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
    case DType::kQ4_0: return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K: return 256;
    default: return 1;
  }
}
// Bytes per block (ggml's type size): dtype_size for the plain types.
constexpr size_t dtype_block_bytes(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0: return 34;   // f16 d | i8 qs[32]
    case DType::kQ4_0: return 18;   // f16 d | u8 qs[16]
    case DType::kQ4_K: return 144;  // f16 d | f16 dmin | u8 scales[12] | u8 qs[128]
    case DType::kQ5_K: return 176;  // f16 d | f16 dmin | u8 scales[12] | u8 qh[32] | u8 qs[128]
    case DType::kQ6_K: return 210;  // u8 ql[128] | u8 qh[64] | i8 scales[16] | f16 d
    default: return dtype_size(dtype);
  }
}
// Bytes of `elements` elements, a whole number of blocks (the caller's to ensure;
// a partial block is not counted).
constexpr size_t dtype_bytes(DType dtype, int64_t elements) {
  return static_cast<size_t>(elements / dtype_block_elements(dtype)) * dtype_block_bytes(dtype);
}

// The bytes of a tensor of `shape` (dims >= 0) in `dtype`, checked: nullopt when
// the count overflows u64, or for a quantized dtype when the tensor has no dims
// or its rows (the last dim) are not a whole number of blocks.
std::optional<uint64_t> tensor_bytes(DType dtype, std::span<const int64_t> shape);

std::string_view dtype_name(DType dtype);  // "f32", "bf16", "q4_k", ...
// Parses safetensors' names: "F32", "F16", "BF16", "I64", "I32", "U8", and
// tessera's own names of the quantized types, ggml's "Q8_0", "Q4_0", "Q4_K",
// "Q5_K", "Q6_K" (the container of a stage's shipped blocks).
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
