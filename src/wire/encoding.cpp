// Dtype codes, flags and payload decoding shared by the tensor and layer codecs
// (encoding.h; the per-header checks are inline there). All size arithmetic is
// checked u64.
#include "wire/encoding.h"

#include <iterator>
#include <utility>

#include "core/check.h"
#include "wire/byte_io.h"
#include "wire/lz4_codec.h"
#include "wire/quant.h"

namespace tessera::wire {

namespace {

std::string dtypes_string(std::span<const DType> dtypes) {
  std::string out;
  for (DType d : dtypes) {
    if (!out.empty()) out += ", ";
    out += dtype_name(d);
  }
  return out.empty() ? "none" : out;
}

}  // namespace

uint8_t dtype_code(DType dtype) {
  for (uint8_t code = 1; code < std::size(kWireDTypes); ++code) {
    if (kWireDTypes[code] == dtype) return code;
  }
  TS_CHECK(false, "no wire code for ", dtype_name(dtype));
  return 0;
}

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

Status detail::dtype_not_allowed(std::string_view name, DType dtype, std::span<const DType> allowed) {
  return decode_error(name, " dtype: ", dtype_name(dtype), " not allowed (allowed: ", dtypes_string(allowed), ")");
}

Status detail::flags_not_allowed(std::string_view name, uint8_t refused, uint8_t allowed) {
  return decode_error(name, " flags: ", flags_string(refused), " not allowed (allowed: ", flags_string(allowed), ")");
}

Result<Encoding> decode_encoding(std::string_view name, uint8_t code, uint8_t flags, uint16_t group_size,
                                 const EncodingLimits& limits) {
  Encoding encoding;
  TS_RETURN_IF_ERROR(check_encoding(name, code, flags, group_size, limits, &encoding));
  return encoding;
}

Result<uint64_t> stored_bytes(std::string_view name, const Encoding& encoding, uint64_t numel, uint64_t decoded_bytes) {
  uint64_t stored = 0;
  TS_RETURN_IF_ERROR(check_stored_bytes(name, encoding, numel, decoded_bytes, &stored));
  return stored;
}

Status detail::decode_transformed_payload(std::string_view name, const Encoding& encoding, uint64_t stored,
                                          std::span<const uint8_t> payload, std::span<uint8_t> out) {
  const int bits = encoding.quant_bits();
  if (bits == 0) return lz4_decompress_exact(name, payload, out);  // lz4 alone (decode_payload copies plain ones)
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
