// Tensor header and payload decoding (layout and check order in tensor_codec.h
// and docs/wire-protocol.md). Nothing here allocates before the header passed
// every check; errors name the frame field and the bound.
#include "wire/tensor_codec.h"

#include <string>

#include "core/check.h"
#include "wire/byte_io.h"

namespace tessera::wire {

namespace {

std::string num(uint64_t value) { return std::to_string(value); }

Status error(const DecodeLimits& limits, const std::string& what) {
  return Status::invalid_input(limits.name + " " + what);
}

Status check_axis(const DecodeLimits& limits, uint32_t axis, uint64_t n) {
  const AxisBound& bound = limits.axes[axis];
  if (bound.contains(n)) return {};
  const std::string prefix = "axis " + num(axis) + ": " + num(n);
  if (bound.min == bound.max) return error(limits, prefix + " != exact " + num(bound.min));
  if (n < bound.min) return error(limits, prefix + " < min " + num(bound.min));
  return error(limits, prefix + " > max " + num(bound.max));
}

// The product of dims: 0 when any dim is 0 (whatever the others), else the
// checked product, so the result does not depend on the order of the dims.
// Returns false on overflow.
bool element_count(std::span<const uint64_t> dims, uint64_t* numel) {
  *numel = 1;
  for (uint64_t d : dims) {
    if (d == 0) {
      *numel = 0;
      return true;
    }
  }
  for (uint64_t d : dims) {
    if (!checked_mul(*numel, d, numel)) return false;
  }
  return true;
}

Status check_payload_length(const TensorHeader& header, std::span<const uint8_t> payload, const DecodeLimits& limits) {
  if (payload.size() < header.payload_bytes) {
    return error(limits,
                 "payload truncated: " + num(payload.size()) + " bytes < payload_bytes " + num(header.payload_bytes));
  }
  if (payload.size() > header.payload_bytes) {
    return error(limits, "payload trailing bytes: " + num(payload.size()) + " bytes > payload_bytes " +
                             num(header.payload_bytes));
  }
  return {};
}

}  // namespace

Result<TensorHeader> decode_tensor_header(std::span<const uint8_t> bytes, const DecodeLimits& limits) {
  if (bytes.size() < kTensorHeaderFixedBytes) {
    return error(limits, "header: " + num(bytes.size()) + " bytes < " + num(kTensorHeaderFixedBytes));
  }
  TensorHeader header;
  TS_ASSIGN_OR_RETURN(header.encoding, decode_encoding(limits.name, get_u8(bytes, 0), get_u8(bytes, 1),
                                                       get_u16(bytes, 2), limits.encoding()));
  const uint32_t rank = get_u32(bytes, 4);
  if (rank > kMaxRank) return error(limits, "rank: " + num(rank) + " > max " + num(kMaxRank));
  const uint64_t expected_length = kTensorHeaderFixedBytes + 8 * uint64_t{rank};
  if (bytes.size() != expected_length) {
    return error(limits,
                 "header: " + num(bytes.size()) + " bytes != " + num(expected_length) + " for rank " + num(rank));
  }
  if (rank != limits.axes.size())
    return error(limits, "rank: " + num(rank) + " != expected " + num(limits.axes.size()));
  header.shape.rank = rank;
  for (uint32_t axis = 0; axis < rank; ++axis) {
    header.shape.dims[axis] = get_u64(bytes, kTensorHeaderFixedBytes + 8 * axis);
    TS_RETURN_IF_ERROR(check_axis(limits, axis, header.shape.dims[axis]));
  }
  if (!element_count(header.shape.view(), &header.numel)) {
    return error(limits, "element count: product of dims overflows u64");
  }
  const uint64_t element_bytes = dtype_size(header.encoding.dtype);
  if (!checked_mul(header.numel, element_bytes, &header.decoded_bytes)) {
    return error(limits,
                 "decoded size: " + num(header.numel) + " elements * " + num(element_bytes) + " bytes overflows u64");
  }
  if (header.decoded_bytes > limits.max_decoded_bytes) {
    return error(limits, "decoded size: " + num(header.decoded_bytes) + " > max " + num(limits.max_decoded_bytes));
  }
  const uint64_t original_bytes = get_u64(bytes, 8);
  if (original_bytes != header.decoded_bytes) {
    return error(
        limits, "original_bytes: " + num(original_bytes) + " != " + num(header.decoded_bytes) + " from dtype and dims");
  }
  TS_ASSIGN_OR_RETURN(header.stored_bytes,
                      stored_bytes(limits.name, header.encoding, header.numel, header.decoded_bytes));
  header.payload_bytes = get_u64(bytes, 16);
  TS_RETURN_IF_ERROR(
      check_payload_bytes(limits.name, "payload_bytes", header.encoding, header.stored_bytes, header.payload_bytes));
  return header;
}

Result<std::span<const uint8_t>> borrow_tensor_payload(const TensorHeader& header, std::span<const uint8_t> payload,
                                                       const DecodeLimits& limits) {
  if (header.encoding.flags != 0) {
    return error(limits, "flags: " + flags_string(header.encoding.flags) + " payload cannot be borrowed, decode it");
  }
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
    return error(limits, "frame kind: " + num(static_cast<uint32_t>(frame.prefix.kind)) + " != tensor (1)");
  }
  DecodedTensor tensor;
  TS_ASSIGN_OR_RETURN(tensor.header, decode_tensor_header(frame.header, limits));
  if (tensor.header.encoding.flags == 0) {
    TS_ASSIGN_OR_RETURN(tensor.bytes, borrow_tensor_payload(tensor.header, frame.payload, limits));
    return tensor;
  }
  scratch.resize(tensor.header.decoded_bytes);  // bounded by limits.max_decoded_bytes
  TS_RETURN_IF_ERROR(decode_tensor_payload(tensor.header, frame.payload, scratch, limits));
  tensor.bytes = scratch;
  return tensor;
}

std::vector<uint8_t> encode_tensor_header(const Encoding& encoding, std::span<const uint64_t> shape,
                                          uint64_t payload_bytes) {
  TS_CHECK_LE(shape.size(), size_t{kMaxRank});
  uint64_t numel = 0;
  uint64_t decoded = 0;
  TS_CHECK(element_count(shape, &numel) && checked_mul(numel, dtype_size(encoding.dtype), &decoded),
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
