// Element encodings, shared by tensor messages (tensor_codec.h) and layer chunks
// (layer_payload.h): the protocol's dtype codes and payload flags, and the rules
// that tie a dtype, flags, group size and element count to the exact size of a
// payload. Each decoder calls these in the order docs/wire-protocol.md lists.
//
// Errors are kInvalidInput, prefixed with the caller's name for the frame field
// ("hidden_states flags: int8 not allowed (allowed: none)").
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tessera::wire {

// Dtype codes are fixed by the protocol, independent of DType's order:
//   1 f32, 2 f16, 3 bf16, 4 i64, 5 i32, 6 u8; everything else is refused.
uint8_t dtype_code(DType dtype);
std::optional<DType> dtype_from_code(uint8_t code);
bool is_float(DType dtype);  // f32, f16, bf16: the dtypes that may be quantized

inline constexpr uint8_t kFlagLz4 = 1 << 0;   // the payload is one LZ4 block (lz4_codec.h)
inline constexpr uint8_t kFlagInt8 = 1 << 1;  // blockwise int8 (quant.h)
inline constexpr uint8_t kFlagInt4 = 1 << 2;  // blockwise int4 (quant.h)
inline constexpr uint8_t kKnownFlags = kFlagLz4 | kFlagInt8 | kFlagInt4;
std::string flags_string(uint8_t flags);  // "lz4|int8", "none"

// How a payload encodes elements of `dtype`. Quantized payloads decode to `dtype`.
struct Encoding {
  DType dtype = DType::kF32;
  uint8_t flags = 0;
  uint16_t group_size = 0;  // 32, 64 or 128 when quantized, else 0

  bool lz4() const { return (flags & kFlagLz4) != 0; }
  int quant_bits() const { return (flags & kFlagInt8) ? 8 : (flags & kFlagInt4) ? 4 : 0; }
};

// What a receiver accepts (a part of DecodeLimits and LayerLimits).
struct EncodingLimits {
  std::span<const DType> dtypes;
  uint8_t flags = 0;        // allowed flag bits
  uint16_t group_size = 0;  // when nonzero, quantized payloads must use exactly this group
};

// Checks the encoding fields of a header, in order: dtype code known, dtype
// allowed, flag bits known, flags allowed, not both INT8 and INT4, group size
// (32/64/128 when quantized, else 0), group size required by the limits,
// quantized dtype is a float.
Result<Encoding> decode_encoding(std::string_view name, uint8_t dtype_code, uint8_t flags, uint16_t group_size,
                                 const EncodingLimits& limits);

// Bytes of the payload before LZ4 for `numel` elements: `decoded_bytes`, or the
// quantized size (the element count must be a multiple of the group). With LZ4,
// also refuses a size above one LZ4 block's maximum.
Result<uint64_t> stored_bytes(std::string_view name, const Encoding& encoding, uint64_t numel, uint64_t decoded_bytes);

// The payload length a header declares (in its field `field`), against the
// stored size: equal without LZ4; in [1, lz4_compress_bound(stored)] with LZ4.
Status check_payload_bytes(std::string_view name, std::string_view field, const Encoding& encoding, uint64_t stored,
                           uint64_t payload_bytes);

// Decodes a payload whose length passed check_payload_bytes into `out`, which
// holds exactly the decoded bytes: a copy, LZ4 (decompressed size exact),
// dequantization, or LZ4 then dequantization.
Status decode_payload(std::string_view name, const Encoding& encoding, uint64_t stored,
                      std::span<const uint8_t> payload, std::span<uint8_t> out);

// Encoder side (senders, tests, fuzz seeds): the payload of `data` (decoded
// bytes of `encoding.dtype`) under `encoding`. Preconditions are TS_CHECKs.
std::vector<uint8_t> encode_payload(const Encoding& encoding, std::span<const uint8_t> data);

}  // namespace tessera::wire
