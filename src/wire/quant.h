// Blockwise symmetric int8 and int4 quantization of float tensors (f32, f16,
// bf16), for activations and weights on the wire.
//
// The elements, in row-major order, are cut into groups of `group` (32, 64 or
// 128; the element count must be a multiple of it). Each group becomes a block:
//   INT8: f32 scale (LE) | group x int8                              4 + group bytes
//   INT4: f32 scale (LE) | group / 2 bytes, two int4 per byte,       4 + group / 2 bytes
//         element 2i in the low nibble, 2i+1 in the high nibble (two's complement)
// and decodes to scale * q, rounded to the tensor's dtype. The encoder uses
// scale = max|x| / 127 (int8) or / 7 (int4). Scales are not checked: a peer can
// send NaN in a plain f32 payload as well; the wire bounds sizes, not values.
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tessera::wire {

bool is_valid_group_size(uint64_t group);  // 32, 64 or 128

// Quantized size of `numel` elements; nullopt when numel is not a multiple of
// `group` (a valid group size; bits 8 or 4).
std::optional<uint64_t> quantized_bytes(uint64_t numel, int bits, uint64_t group);

// Encoder. Preconditions (TS_CHECK): float dtype, valid group, bits 8 or 4,
// values holds a multiple of `group` elements.
std::vector<uint8_t> quantize(DType dtype, std::span<const uint8_t> values, int bits, uint16_t group);

// Decodes `payload` into `out` (the decoded bytes of `dtype`). Checks, in order:
// float dtype, bits 8 or 4, valid group, out holds whole groups, and
// payload.size() == quantized_bytes exactly.
Status dequantize(std::string_view name, std::span<const uint8_t> payload, int bits, uint16_t group, DType dtype,
                  std::span<uint8_t> out);

}  // namespace tessera::wire
