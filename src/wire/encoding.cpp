// Dtype codes, flags and payload-size rules shared by the tensor and layer codecs
// (encoding.h). All size arithmetic is checked u64.
#include "wire/encoding.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <utility>

#include "core/check.h"
#include "wire/byte_io.h"
#include "wire/lz4_codec.h"
#include "wire/quant.h"

namespace tessera::wire {

namespace {

struct CodeEntry {
  DType dtype;
  uint8_t code;
};
constexpr CodeEntry kCodes[] = {{DType::kF32, 1}, {DType::kF16, 2}, {DType::kBF16, 3},
                                {DType::kI64, 4}, {DType::kI32, 5}, {DType::kU8, 6}};
// A new DType needs a wire code here and a line in docs/wire-protocol.md.
static_assert(static_cast<int>(DType::kU8) + 1 == std::size(kCodes));

std::string num(uint64_t value) { return std::to_string(value); }

std::string dtypes_string(std::span<const DType> dtypes) {
  std::string out;
  for (DType d : dtypes) {
    if (!out.empty()) out += ", ";
    out += dtype_name(d);
  }
  return out.empty() ? "none" : out;
}

Status field_error(std::string_view name, std::string_view field, const std::string& what) {
  std::string message(name);
  message += ' ';
  message += field;
  message += ": ";
  return Status::invalid_input(message + what);
}

}  // namespace

uint8_t dtype_code(DType dtype) {
  for (const CodeEntry& e : kCodes)
    if (e.dtype == dtype) return e.code;
  TS_CHECK(false, "no wire code for ", dtype_name(dtype));
  return 0;
}

std::optional<DType> dtype_from_code(uint8_t code) {
  for (const CodeEntry& e : kCodes)
    if (e.code == code) return e.dtype;
  return std::nullopt;
}

bool is_float(DType dtype) { return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16; }

std::string flags_string(uint8_t flags) {
  static constexpr std::pair<uint8_t, const char*> kNames[] = {
      {kFlagLz4, "lz4"}, {kFlagInt8, "int8"}, {kFlagInt4, "int4"}};
  std::string out;
  for (const auto& [bit, flag_name] : kNames) {
    if (!(flags & bit)) continue;
    if (!out.empty()) out += '|';
    out += flag_name;
  }
  return out.empty() ? "none" : out;
}

Result<Encoding> decode_encoding(std::string_view name, uint8_t code, uint8_t flags, uint16_t group_size,
                                 const EncodingLimits& limits) {
  const std::optional<DType> dtype = dtype_from_code(code);
  if (!dtype) return field_error(name, "dtype", "code " + num(code) + " unknown");
  if (std::find(limits.dtypes.begin(), limits.dtypes.end(), *dtype) == limits.dtypes.end()) {
    return field_error(
        name, "dtype",
        std::string(dtype_name(*dtype)) + " not allowed (allowed: " + dtypes_string(limits.dtypes) + ")");
  }
  if (flags & ~kKnownFlags) return field_error(name, "flags", "unknown bits " + num(flags & ~kKnownFlags));
  if (flags & ~limits.flags) {
    return field_error(
        name, "flags",
        flags_string(flags & ~limits.flags) + " not allowed (allowed: " + flags_string(limits.flags) + ")");
  }
  if ((flags & kFlagInt8) && (flags & kFlagInt4)) return field_error(name, "flags", "int8 and int4 both set");
  Encoding encoding{*dtype, flags, group_size};
  if (encoding.quant_bits() == 0) {
    if (group_size != 0) return field_error(name, "group_size", num(group_size) + " != 0 without int8/int4");
    return encoding;
  }
  if (!is_valid_group_size(group_size)) {
    return field_error(name, "group_size", num(group_size) + " not 32, 64 or 128");
  }
  if (limits.group_size != 0 && group_size != limits.group_size) {
    return field_error(name, "group_size", num(group_size) + " != required " + num(limits.group_size));
  }
  if (!is_float(*dtype)) {
    return field_error(name, "dtype", std::string(dtype_name(*dtype)) + " cannot be quantized (f32, f16, bf16 only)");
  }
  return encoding;
}

Result<uint64_t> stored_bytes(std::string_view name, const Encoding& encoding, uint64_t numel, uint64_t decoded_bytes) {
  uint64_t stored = decoded_bytes;
  if (encoding.quant_bits() != 0) {
    if (numel % encoding.group_size != 0) {
      return field_error(name, "element count",
                         num(numel) + " not a multiple of group_size " + num(encoding.group_size));
    }
    const std::optional<uint64_t> q = quantized_bytes(numel, encoding.quant_bits(), encoding.group_size);
    if (!q) return field_error(name, "element count", num(numel) + ": quantized size overflows u64");
    stored = *q;
  }
  if (encoding.lz4() && stored > kLz4MaxBlockBytes) {
    return field_error(name, "lz4", "stored size " + num(stored) + " > max block " + num(kLz4MaxBlockBytes));
  }
  return stored;
}

Status check_payload_bytes(std::string_view name, std::string_view field, const Encoding& encoding, uint64_t stored,
                           uint64_t payload_bytes) {
  if (!encoding.lz4()) {
    if (payload_bytes != stored) {
      return field_error(name, field, num(payload_bytes) + " != expected " + num(stored));
    }
    return {};
  }
  // stored <= kLz4MaxBlockBytes here, so the bound cannot overflow.
  if (payload_bytes == 0 || payload_bytes > lz4_compress_bound(stored)) {
    return field_error(name, field,
                       num(payload_bytes) + " not in [1, " + num(lz4_compress_bound(stored)) + "] for lz4 of " +
                           num(stored) + " bytes");
  }
  return {};
}

Status decode_payload(std::string_view name, const Encoding& encoding, uint64_t stored,
                      std::span<const uint8_t> payload, std::span<uint8_t> out) {
  const int bits = encoding.quant_bits();
  if (bits == 0) {
    if (encoding.lz4()) return lz4_decompress_exact(name, payload, out);
    TS_CHECK_EQ(payload.size(), out.size());
    if (!out.empty()) std::memcpy(out.data(), payload.data(), out.size());
    return {};
  }
  if (!encoding.lz4()) return dequantize(name, payload, bits, encoding.group_size, encoding.dtype, out);
  std::vector<uint8_t> quantized(stored);  // stored <= kLz4MaxBlockBytes, checked by stored_bytes
  TS_RETURN_IF_ERROR(lz4_decompress_exact(name, payload, quantized));
  return dequantize(name, quantized, bits, encoding.group_size, encoding.dtype, out);
}

std::vector<uint8_t> encode_payload(const Encoding& encoding, std::span<const uint8_t> data) {
  std::vector<uint8_t> stored;
  std::span<const uint8_t> plain = data;
  if (encoding.quant_bits() != 0) {
    stored = quantize(encoding.dtype, data, encoding.quant_bits(), encoding.group_size);
    plain = stored;
  }
  if (encoding.lz4()) return lz4_compress(plain);
  return {plain.begin(), plain.end()};
}

}  // namespace tessera::wire
