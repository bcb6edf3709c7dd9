// Receiver limits shared by the wire fuzz targets and fuzz/make_wire_corpus.cpp,
// and the invariants every accepted input must satisfy. Bounds are small so a
// run stays fast and far below -rss_limit_mb, yet every check is reachable
// (the "loose" header limits leave overflow to the arithmetic checks).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/check.h"
#include "wire/byte_io.h"
#include "wire/frame.h"
#include "wire/layer_payload.h"
#include "wire/limits.h"
#include "wire/lz4_codec.h"
#include "wire/tensor_codec.h"

namespace tessera::wire::fuzz {

inline FrameLimits frame_limits() { return {kMaxMessageHeaderBytes, uint64_t{1} << 17, uint64_t{1} << 17}; }

inline DecodeLimits make_limits(const char* name, std::vector<DType> dtypes, uint8_t flags, std::vector<AxisBound> axes,
                                uint64_t max_decoded_bytes) {
  DecodeLimits limits;
  limits.name = name;
  limits.dtypes = std::move(dtypes);
  limits.flags = flags;
  limits.axes = std::move(axes);
  limits.max_decoded_bytes = max_decoded_bytes;
  return limits;
}

// wire_tensor_header_fuzz: the first input byte picks one of these.
inline std::vector<DecodeLimits> header_limit_sets() {
  const std::vector<DType> all = {DType::kF32, DType::kF16, DType::kBF16, DType::kI64, DType::kI32, DType::kU8};
  std::vector<DecodeLimits> sets;
  sets.push_back(make_limits("hidden_states", {DType::kF32, DType::kBF16}, 0,
                             {AxisBound::range(1, 16), AxisBound::exact(64)}, 16 * 64 * 4));
  DecodeLimits quantized = make_limits("hidden_states", {DType::kBF16}, kKnownFlags,
                                       {AxisBound::range(1, 16), AxisBound::exact(64)}, 16 * 64 * 2);
  quantized.group_size = 32;
  sets.push_back(quantized);
  sets.push_back(make_limits("token_ids", {DType::kI32, DType::kI64}, 0, {AxisBound::range(1, 64)}, 64 * 8));
  sets.push_back(make_limits("scalar", {DType::kF32}, 0, {}, 4));
  sets.push_back(make_limits("loose", all, kKnownFlags,
                             {AxisBound::range_from_zero(kMaxAxisBound), AxisBound::range_from_zero(kMaxAxisBound),
                              AxisBound::range_from_zero(kMaxAxisBound)},
                             UINT64_MAX));
  sets.push_back(
      make_limits("rank8", {DType::kU8}, kFlagLz4, std::vector<AxisBound>(8, AxisBound::range(1, 4)), 65536));
  return sets;
}

// wire_lz4_fuzz: LZ4 (and plain) tensors of u8 or f32, [1..64, 1..1024].
inline DecodeLimits lz4_limits() {
  return make_limits("blob", {DType::kU8, DType::kF32}, kFlagLz4, {AxisBound::range(1, 64), AxisBound::range(1, 1024)},
                     uint64_t{1} << 16);
}

// wire_quant_fuzz: int8/int4 (optionally LZ4) float tensors, [1..64, 32..1024].
inline DecodeLimits quant_limits() {
  return make_limits("activations", {DType::kF32, DType::kF16, DType::kBF16}, kKnownFlags,
                     {AxisBound::range(1, 64), AxisBound::range(32, 1024)}, uint64_t{1} << 16);
}

// wire_layer_fuzz: chunks of layer 3, any encoding, at most 64 KiB decoded.
inline LayerLimits layer_limits() {
  LayerLimits limits;
  limits.name = "layer";
  limits.layer = 3;
  limits.dtypes = {DType::kF32, DType::kF16, DType::kBF16, DType::kU8};
  limits.flags = kKnownFlags;
  limits.max_layer_bytes = uint64_t{1} << 16;
  return limits;
}

// Every promise an accepted tensor header makes, re-derived from its fields.
inline void check_accepted_header(const TensorHeader& h, const DecodeLimits& limits) {
  bool allowed = false;
  for (DType d : limits.dtypes) allowed |= d == h.encoding.dtype;
  TS_CHECK(allowed, dtype_name(h.encoding.dtype));
  TS_CHECK((h.encoding.flags & ~limits.flags) == 0, int{h.encoding.flags});
  TS_CHECK_EQ(h.shape.rank, limits.axes.size());
  // The element count is 0 if any dim is 0, else the product, which must fit u64.
  uint64_t numel = 1;
  bool any_zero = false;
  for (uint32_t i = 0; i < h.shape.rank; ++i) {
    TS_CHECK(limits.axes[i].contains(h.shape.dims[i]), "axis ", i, " = ", h.shape.dims[i]);
    any_zero |= h.shape.dims[i] == 0;
  }
  for (uint32_t i = 0; i < h.shape.rank && !any_zero; ++i) TS_CHECK(checked_mul(numel, h.shape.dims[i], &numel));
  if (any_zero) numel = 0;
  TS_CHECK_EQ(numel, h.numel);
  uint64_t decoded = 0;
  TS_CHECK(checked_mul(numel, dtype_size(h.encoding.dtype), &decoded));
  TS_CHECK_EQ(decoded, h.decoded_bytes);
  TS_CHECK_LE(h.decoded_bytes, limits.max_decoded_bytes);
  if (h.encoding.lz4()) {
    TS_CHECK(h.payload_bytes >= 1 && h.payload_bytes <= lz4_compress_bound(h.stored_bytes), h.payload_bytes);
  } else {
    TS_CHECK_EQ(h.payload_bytes, h.stored_bytes);
  }
  if (h.encoding.quant_bits() == 0) TS_CHECK_EQ(h.stored_bytes, h.decoded_bytes);
  else TS_CHECK_LE(h.stored_bytes, h.decoded_bytes);
}

inline void check_refusal(const Status& status) {
  TS_CHECK(status.kind() == ErrorKind::kInvalidInput, status.to_string());
  TS_CHECK(!status.message().empty());
}

// A tensor frame that decoded under `limits`.
struct DecodedFrame {
  Frame frame;
  DecodedTensor tensor;
};

// Decodes `bytes` as one frame and its tensor under `limits`, checking what every
// tensor decoder must keep: a refusal is kInvalidInput and never grew `scratch`
// past the limits; an accepted header keeps the limits' promises and its bytes are
// exactly decoded_bytes. nullopt when refused (framing is wire_frame_fuzz's job).
inline std::optional<DecodedFrame> decode_checked(std::span<const uint8_t> bytes, const DecodeLimits& limits,
                                                  std::vector<uint8_t>& scratch) {
  Result<Frame> frame = decode_frame(bytes, frame_limits());
  if (!frame.ok()) return std::nullopt;
  Result<DecodedTensor> tensor = decode_tensor(*frame, limits, scratch);
  if (!tensor.ok()) {
    check_refusal(tensor.status());
    TS_CHECK_LE(scratch.capacity(), limits.max_decoded_bytes);
    return std::nullopt;
  }
  check_accepted_header(tensor->header, limits);
  TS_CHECK_EQ(tensor->bytes.size(), tensor->header.decoded_bytes);
  return DecodedFrame{*frame, *tensor};
}

}  // namespace tessera::wire::fuzz
