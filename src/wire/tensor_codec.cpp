// Tensor header and payload decoding (layout and check order in tensor_codec.h
// and docs/wire-protocol.md). Nothing here allocates before the header passed
// every check; errors name the frame field and the bound.
#include "wire/tensor_codec.h"

#include <string>

#include "core/check.h"
#include "wire/byte_io.h"

namespace tessera::wire {

namespace {

// The message for a dim that failed AxisBound::contains: which bound it broke.
[[gnu::cold, gnu::noinline]] Status axis_error(const DecodeLimits& limits, uint32_t axis, uint64_t n) {
  const std::string_view name = limits.name;
  const AxisBound& bound = limits.axes[axis];
  if (bound.min == bound.max) return decode_error(name, " axis ", axis, ": ", n, " != exact ", bound.min);
  if (n < bound.min) return decode_error(name, " axis ", axis, ": ", n, " < min ", bound.min);
  return decode_error(name, " axis ", axis, ": ", n, " > max ", bound.max);
}

[[gnu::cold, gnu::noinline]] Status not_borrowable(const DecodeLimits& limits, uint8_t flags) {
  return decode_error(std::string_view(limits.name), " flags: ", flags_string(flags),
                      " payload cannot be borrowed, decode it");
}

// The element count of a shape, fed one dim at a time: 0 when any dim is 0
// (whatever the others), else the checked product, so the result does not
// depend on the order of the dims. An overflow is remembered, and counts only if
// no dim is 0. Fed in the decoder's axis loop, so the dims are read once.
class ElementCount {
 public:
  void multiply(uint64_t dim) {
    zero_ |= dim == 0;
    overflow_ |= !checked_mul(product_, dim, &product_);
  }
  bool overflowed() const { return overflow_ && !zero_; }
  uint64_t value() const { return zero_ ? 0 : product_; }

 private:
  uint64_t product_ = 1;
  bool zero_ = false;
  bool overflow_ = false;
};

// decode_tensor_header's checks, writing the header in place (decode_in_place,
// byte_io.h). Every failing branch returns through a cold, out-of-line message
// builder (decode_error), so the success path is loads, compares and branches;
// the encoding and size checks are inline from encoding.h. Always inlined (into
// decode_tensor_header and decode_tensor, once per frame): its Status is then
// known OK on the success path and costs nothing to return and test.
[[gnu::always_inline]] inline Status read_tensor_header(std::span<const uint8_t> bytes, const DecodeLimits& limits,
                                                        TensorHeader* header) {
  const std::string_view name = limits.name;
  if (bytes.size() < kTensorHeaderFixedBytes) {
    return decode_error(name, " header: ", bytes.size(), " bytes < ", kTensorHeaderFixedBytes);
  }
  TS_RETURN_IF_ERROR(check_encoding(name, get_u8(bytes, 0), get_u8(bytes, 1), get_u16(bytes, 2), limits.encoding(),
                                    &header->encoding));
  const uint32_t rank = get_u32(bytes, 4);
  if (rank > kMaxRank) return decode_error(name, " rank: ", rank, " > max ", kMaxRank);
  const uint64_t expected_length = kTensorHeaderFixedBytes + 8 * uint64_t{rank};
  if (bytes.size() != expected_length) {
    return decode_error(name, " header: ", bytes.size(), " bytes != ", expected_length, " for rank ", rank);
  }
  if (rank != limits.axes.size()) return decode_error(name, " rank: ", rank, " != expected ", limits.axes.size());
  header->shape.rank = rank;
  ElementCount count;
  for (uint32_t axis = 0; axis < rank; ++axis) {
    const uint64_t n = get_u64(bytes, kTensorHeaderFixedBytes + 8 * axis);
    if (!limits.axes[axis].contains(n)) return axis_error(limits, axis, n);
    header->shape.dims[axis] = n;
    count.multiply(n);
  }
  // Checked after the loop: every axis is checked before the element count.
  if (count.overflowed()) return decode_error(name, " element count: product of dims overflows u64");
  header->numel = count.value();
  const uint64_t element_bytes = dtype_size(header->encoding.dtype);
  if (!checked_mul(header->numel, element_bytes, &header->decoded_bytes)) {
    return decode_error(name, " decoded size: ", header->numel, " elements * ", element_bytes, " bytes overflows u64");
  }
  if (header->decoded_bytes > limits.max_decoded_bytes) {
    return decode_error(name, " decoded size: ", header->decoded_bytes, " > max ", limits.max_decoded_bytes);
  }
  const uint64_t original_bytes = get_u64(bytes, 8);
  if (original_bytes != header->decoded_bytes) {
    return decode_error(name, " original_bytes: ", original_bytes, " != ", header->decoded_bytes,
                        " from dtype and dims");
  }
  TS_RETURN_IF_ERROR(
      check_stored_bytes(name, header->encoding, header->numel, header->decoded_bytes, &header->stored_bytes));
  header->payload_bytes = get_u64(bytes, 16);
  return check_payload_bytes(name, "payload_bytes", header->encoding, header->stored_bytes, header->payload_bytes);
}

Status check_payload_length(const TensorHeader& header, std::span<const uint8_t> payload, const DecodeLimits& limits) {
  const std::string_view name = limits.name;
  if (payload.size() < header.payload_bytes) {
    return decode_error(name, " payload truncated: ", payload.size(), " bytes < payload_bytes ", header.payload_bytes);
  }
  if (payload.size() > header.payload_bytes) {
    return decode_error(name, " payload trailing bytes: ", payload.size(), " bytes > payload_bytes ",
                        header.payload_bytes);
  }
  return {};
}

}  // namespace

Result<TensorHeader> decode_tensor_header(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  return decode_in_place<TensorHeader>([&](TensorHeader* header) { return read_tensor_header(bytes, limits, header); });
}

Result<std::span<const uint8_t>> borrow_tensor_payload(const TensorHeader& header, std::span<const uint8_t> payload,
                                                       const DecodeLimits& limits) {
  if (header.encoding.flags != 0) return not_borrowable(limits, header.encoding.flags);
  TS_RETURN_IF_ERROR(check_payload_length(header, payload, limits));
  return payload;
}

Status decode_tensor_payload(const TensorHeader& header, std::span<const uint8_t> payload, std::span<uint8_t> out,
                             const DecodeLimits& limits) {
  TS_CHECK_EQ(out.size(), header.decoded_bytes);
  TS_RETURN_IF_ERROR(check_payload_length(header, payload, limits));
  return decode_payload(limits.name, header.encoding, header.stored_bytes, payload, out);
}

TensorView DecodedTensor::view() const {
  TensorView view;
  view.dtype = header.encoding.dtype;
  for (uint64_t d : header.shape.view()) view.shape.push_back(static_cast<int64_t>(d));
  view.data = bytes.data();
  return view;
}

Result<DecodedTensor> decode_tensor(const Frame& frame, const DecodeLimits& limits, std::vector<uint8_t>& scratch) {
  if (frame.prefix.kind != MessageKind::kTensor) {
    return decode_error(std::string_view(limits.name), " frame kind: ", static_cast<uint32_t>(frame.prefix.kind),
                        " != tensor (1)");
  }
  return decode_in_place<DecodedTensor>([&](DecodedTensor* tensor) -> Status {
    TS_RETURN_IF_ERROR(read_tensor_header(frame.header, limits, &tensor->header));
    if (tensor->header.encoding.flags == 0) {
      TS_ASSIGN_OR_RETURN(tensor->bytes, borrow_tensor_payload(tensor->header, frame.payload, limits));
      return {};
    }
    scratch.resize(tensor->header.decoded_bytes);  // bounded by limits.max_decoded_bytes
    TS_RETURN_IF_ERROR(decode_tensor_payload(tensor->header, frame.payload, scratch, limits));
    tensor->bytes = scratch;
    return {};
  });
}

std::vector<uint8_t> encode_tensor_header(const Encoding& encoding, std::span<const uint64_t> shape,
                                          uint64_t payload_bytes) {
  TS_CHECK_LE(shape.size(), size_t{kMaxRank});
  ElementCount count;
  for (uint64_t d : shape) count.multiply(d);
  uint64_t decoded = 0;
  TS_CHECK(!count.overflowed() && checked_mul(count.value(), dtype_size(encoding.dtype), &decoded),
           "shape overflows u64");
  std::vector<uint8_t> out;
  out.reserve(kTensorHeaderFixedBytes + 8 * shape.size());
  put_u8(out, dtype_code(encoding.dtype));
  put_u8(out, encoding.flags);
  put_u16(out, encoding.group_size);
  put_u32(out, static_cast<uint32_t>(shape.size()));
  put_u64(out, decoded);
  put_u64(out, payload_bytes);
  for (uint64_t d : shape) put_u64(out, d);
  return out;
}

std::vector<uint8_t> encode_tensor_frame(uint64_t request_id, const Encoding& encoding, std::span<const uint64_t> shape,
                                         std::span<const uint8_t> data) {
  const std::vector<uint8_t> payload = encode_payload(encoding, data);
  const std::vector<uint8_t> header = encode_tensor_header(encoding, shape, payload.size());
  return encode_frame(MessageKind::kTensor, request_id, header, payload);
}

}  // namespace tessera::wire
