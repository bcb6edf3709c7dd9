// Element encodings, shared by tensor messages (tensor_codec.h) and layer chunks
// (layer_payload.h): the protocol's dtype codes and payload flags, and the rules
// that tie a dtype, flags, group size and element count to the exact size of a
// payload. Each decoder calls these in the order docs/wire-protocol.md lists.
//
// Errors are kInvalidInput, prefixed with the caller's name for the frame field
// ("hidden_states flags: int8 not allowed (allowed: none)").
//
// The checks every header passes (check_encoding, check_stored_bytes,
// check_payload_bytes) and the plain copy of decode_payload are inline: a
// receiver runs them once per frame, and out of line their calls cost more than
// the checks. Their messages are built out of line, by decode_error (byte_io.h)
// and the cold helpers below, only when a check fails.
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <cstring>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/dtype.h"
#include "core/status.h"
#include "wire/byte_io.h"
#include "wire/lz4_codec.h"
#include "wire/quant.h"

namespace tessera::wire {

// Dtype codes are fixed by the protocol, independent of DType's order:
//   1 f32, 2 f16, 3 bf16, 4 i64, 5 i32, 6 u8; everything else is refused.
// Indexed by code, so decoding a code is one load; entry 0 is never read.
inline constexpr DType kWireDTypes[] = {DType::kF32, DType::kF32, DType::kF16, DType::kBF16,
                                        DType::kI64, DType::kI32, DType::kU8};
// A new DType needs a wire code here and a line in docs/wire-protocol.md.
static_assert(static_cast<size_t>(DType::kU8) + 2 == std::size(kWireDTypes));

uint8_t dtype_code(DType dtype);
inline std::optional<DType> dtype_from_code(uint8_t code) {
  if (code == 0 || code >= std::size(kWireDTypes)) return std::nullopt;
  return kWireDTypes[code];
}
// f32, f16, bf16: the dtypes that may be quantized.
inline bool is_float(DType dtype) { return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16; }

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

// Messages of the checks below that name dtypes or flags (encoding.cpp). Cold
// and out of line like decode_error, so no string is built on the success path.
namespace detail {
[[gnu::cold]] Status dtype_not_allowed(std::string_view name, DType dtype, std::span<const DType> allowed);
[[gnu::cold]] Status flags_not_allowed(std::string_view name, uint8_t refused, uint8_t allowed);
}  // namespace detail

// Checks the encoding fields of a header, in order: dtype code known, dtype
// allowed, flag bits known, flags allowed, not both INT8 and INT4, group size
// (32/64/128 when quantized, else 0), group size required by the limits,
// quantized dtype is a float. On success writes *out.
//
// check_encoding and check_stored_bytes return a Status and write through a
// pointer so that a header decoder can inline them with nothing to unpack;
// decode_encoding and stored_bytes are the same checks returning a Result.
inline Status check_encoding(std::string_view name, uint8_t code, uint8_t flags, uint16_t group_size,
                             const EncodingLimits& limits, Encoding* out) {
  const std::optional<DType> dtype = dtype_from_code(code);
  if (!dtype) return decode_error(name, " dtype: code ", code, " unknown");
  // A plain loop: the list holds one or two dtypes, where std::find's unrolled
  // loop costs more than it saves.
  bool allowed = false;
  for (DType d : limits.dtypes) {
    if (d == *dtype) {
      allowed = true;
      break;
    }
  }
  if (!allowed) return detail::dtype_not_allowed(name, *dtype, limits.dtypes);
  const uint8_t unknown_flags = flags & ~kKnownFlags;
  if (unknown_flags != 0) return decode_error(name, " flags: unknown bits ", unknown_flags);
  const uint8_t refused_flags = flags & ~limits.flags;
  if (refused_flags != 0) return detail::flags_not_allowed(name, refused_flags, limits.flags);
  if ((flags & kFlagInt8) && (flags & kFlagInt4)) return decode_error(name, " flags: int8 and int4 both set");
  const Encoding encoding{*dtype, flags, group_size};
  if (encoding.quant_bits() == 0) {
    if (group_size != 0) return decode_error(name, " group_size: ", group_size, " != 0 without int8/int4");
  } else {
    if (!is_valid_group_size(group_size)) return decode_error(name, " group_size: ", group_size, " not 32, 64 or 128");
    if (limits.group_size != 0 && group_size != limits.group_size) {
      return decode_error(name, " group_size: ", group_size, " != required ", limits.group_size);
    }
    if (!is_float(*dtype)) {
      return decode_error(name, " dtype: ", dtype_name(*dtype), " cannot be quantized (f32, f16, bf16 only)");
    }
  }
  *out = encoding;
  return {};
}
Result<Encoding> decode_encoding(std::string_view name, uint8_t code, uint8_t flags, uint16_t group_size,
                                 const EncodingLimits& limits);

// Bytes of the payload before LZ4 for `numel` elements: `decoded_bytes`, or the
// quantized size (the element count must be a multiple of the group). With LZ4,
// also refuses a size above one LZ4 block's maximum. On success writes *stored.
inline Status check_stored_bytes(std::string_view name, const Encoding& encoding, uint64_t numel,
                                 uint64_t decoded_bytes, uint64_t* stored) {
  uint64_t size = decoded_bytes;
  if (encoding.quant_bits() != 0) {
    if (numel % encoding.group_size != 0) {
      return decode_error(name, " element count: ", numel, " not a multiple of group_size ", encoding.group_size);
    }
    const std::optional<uint64_t> q = quantized_bytes(numel, encoding.quant_bits(), encoding.group_size);
    if (!q) return decode_error(name, " element count: ", numel, ": quantized size overflows u64");
    size = *q;
  }
  if (encoding.lz4() && size > kLz4MaxBlockBytes) {
    return decode_error(name, " lz4: stored size ", size, " > max block ", kLz4MaxBlockBytes);
  }
  *stored = size;
  return {};
}
Result<uint64_t> stored_bytes(std::string_view name, const Encoding& encoding, uint64_t numel, uint64_t decoded_bytes);

// The payload length a header declares (in its field `field`), against the
// stored size: equal without LZ4; in [1, lz4_compress_bound(stored)] with LZ4.
inline Status check_payload_bytes(std::string_view name, std::string_view field, const Encoding& encoding,
                                  uint64_t stored, uint64_t payload_bytes) {
  if (!encoding.lz4()) {
    if (payload_bytes != stored) return decode_error(name, " ", field, ": ", payload_bytes, " != expected ", stored);
    return {};
  }
  // stored <= kLz4MaxBlockBytes here (check_stored_bytes), so the bound cannot overflow.
  const uint64_t bound = lz4_compress_bound(stored);
  if (payload_bytes == 0 || payload_bytes > bound) {
    return decode_error(name, " ", field, ": ", payload_bytes, " not in [1, ", bound, "] for lz4 of ", stored,
                        " bytes");
  }
  return {};
}

namespace detail {
// decode_payload's LZ4 and quantized cases (encoding.cpp).
Status decode_transformed_payload(std::string_view name, const Encoding& encoding, uint64_t stored,
                                  std::span<const uint8_t> payload, std::span<uint8_t> out);
}  // namespace detail

// Decodes a payload whose length passed check_payload_bytes into `out`, which
// holds exactly the decoded bytes: a copy, LZ4 (decompressed size exact),
// dequantization, or LZ4 then dequantization. The copy is inline: for a small
// plain frame a call costs a noticeable part of the copy.
inline Status decode_payload(std::string_view name, const Encoding& encoding, uint64_t stored,
                             std::span<const uint8_t> payload, std::span<uint8_t> out) {
  if (encoding.lz4() || encoding.quant_bits() != 0) {
    return detail::decode_transformed_payload(name, encoding, stored, payload, out);
  }
  TS_CHECK_EQ(payload.size(), out.size());
  if (!out.empty()) std::memcpy(out.data(), payload.data(), out.size());
  return {};
}

// Encoder side (senders, tests, fuzz seeds): the payload of `data` (decoded
// bytes of `encoding.dtype`) under `encoding`. Preconditions are TS_CHECKs.
std::vector<uint8_t> encode_payload(const Encoding& encoding, std::span<const uint8_t> data);

}  // namespace tessera::wire
