// Tensor messages: the header of a kTensor frame, checked against the
// receiver's DecodeLimits (limits.h), and the decoding of its payload.
//
// Tensor header, 24 + 8 * rank bytes, every integer little-endian:
//   offset  size  field
//        0     1  dtype           wire dtype code (encoding.h): 1 f32, 2 f16, 3 bf16, 4 i64, 5 i32, 6 u8
//        1     1  flags           bit 0 LZ4, bit 1 INT8, bit 2 INT4; other bits must be 0
//        2     2  group_size      32, 64 or 128 when INT8 or INT4 is set, else 0
//        4     4  rank            0..8; rank 0 is a scalar (one element)
//        8     8  original_bytes  decoded size: element count * dtype size
//       16     8  payload_bytes   bytes of payload in the frame (after quantization and LZ4)
//       24  8*rank dims           u64 each, outermost first
//
// decode_tensor_header makes every check the header alone allows, in the order
// of docs/wire-protocol.md, before anyone looks at the payload: header length,
// encoding (dtype, flags, group size), rank, axes, element count (0 if any dim
// is 0, else the checked u64 product) and decoded size (checked u64),
// max_decoded_bytes, original_bytes, stored and payload sizes. Only then may a caller size a buffer from
// TensorHeader::decoded_bytes. The payload functions then refuse a truncated payload or trailing bytes.
//
// Unflagged payloads decode as a span borrowed from the frame (no copy), in the
// little-endian byte order of the wire; tessera runs on little-endian hosts only.
// Pure functions; safe from any thread.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "wire/encoding.h"
#include "wire/frame.h"
#include "wire/limits.h"

namespace tessera::wire {

static_assert(std::endian::native == std::endian::little, "wire payloads are little-endian; so must the host be");

inline constexpr size_t kTensorHeaderFixedBytes = 24;

// A shape of at most kMaxRank dims, stored inline (decoding allocates nothing).
struct Shape {
  std::array<uint64_t, kMaxRank> dims{};
  uint32_t rank = 0;

  std::span<const uint64_t> view() const { return {dims.data(), rank}; }
};

struct TensorHeader {
  Encoding encoding;
  Shape shape;
  uint64_t numel = 1;
  uint64_t decoded_bytes = 0;  // numel * dtype size == original_bytes
  uint64_t stored_bytes = 0;   // before LZ4: decoded_bytes, or the quantized size
  uint64_t payload_bytes = 0;
};

Result<TensorHeader> decode_tensor_header(std::span<const uint8_t> bytes, const DecodeLimits& limits);

// The payload of an unflagged tensor, borrowed from `payload` without a copy.
// Refuses flagged headers, a truncated payload and trailing bytes.
Result<std::span<const uint8_t>> borrow_tensor_payload(const TensorHeader& header, std::span<const uint8_t> payload,
                                                       const DecodeLimits& limits);

// Decodes any payload into `out`, which the caller sized to header.decoded_bytes
// (TS_CHECK). Refuses a truncated payload, trailing bytes, an LZ4 block of the
// wrong size and a quantized payload of the wrong size.
Status decode_tensor_payload(const TensorHeader& header, std::span<const uint8_t> payload, std::span<uint8_t> out,
                             const DecodeLimits& limits);

// A decoded tensor: its header and decoded bytes, borrowed either from the frame
// (unflagged) or from the caller's scratch buffer (flagged).
struct DecodedTensor {
  TensorHeader header;
  std::span<const uint8_t> bytes;

  // A TensorView over `bytes` (the shape is copied into a vector).
  TensorView view() const;
};

// Frame kind kTensor, header, then payload; `scratch` is resized to the decoded
// size only when the payload is flagged.
Result<DecodedTensor> decode_tensor(const Frame& frame, const DecodeLimits& limits, std::vector<uint8_t>& scratch);

// Encoder side. The header for `shape` of `encoding`, given the payload's length.
std::vector<uint8_t> encode_tensor_header(const Encoding& encoding, std::span<const uint64_t> shape,
                                          uint64_t payload_bytes);
// A whole kTensor frame of `data` (the decoded bytes) under `encoding`.
std::vector<uint8_t> encode_tensor_frame(uint64_t request_id, const Encoding& encoding, std::span<const uint64_t> shape,
                                         std::span<const uint8_t> data);

}  // namespace tessera::wire
