// Layer payloads: a layer's weights shipped to a stage (later also KV blocks),
// cut into chunks that travel as kLayerChunk frames, and put back together by
// the receiver within its own bound.
//
// Layer chunk header, 32 bytes, every integer little-endian:
//   offset  size  field
//        0     1  dtype           wire dtype code of the elements (encoding.h)
//        1     1  flags           bit 0 LZ4, bit 1 INT8, bit 2 INT4 (of the whole stored stream)
//        2     2  group_size      32, 64 or 128 when INT8 or INT4 is set, else 0
//        4     4  layer           layer index; must be the one the receiver expects
//        8     8  original_bytes  decoded size of the whole layer payload
//       16     8  stored_bytes    size of the stored stream: all chunk payloads together
//       24     8  chunk_offset    where this chunk's payload starts in the stored stream
//       32        (frame payload: the chunk's bytes)
//
// The stored stream is the layer's bytes, quantized (quant.h) if INT8/INT4 is
// set, then compressed as one LZ4 block if LZ4 is set. Every chunk repeats the
// same header fields except chunk_offset; chunks arrive in order.
//
// LayerAssembler checks each chunk's header, in the order of docs/wire-protocol.md,
// before it copies the chunk: the encoding, the layer index, original_bytes <=
// max_layer_bytes (before anything is reserved or decompressed), original_bytes a
// whole number of elements (an odd byte count from a 16-bit source is refused),
// the stored size, agreement with the first chunk, the offset, and that the chunk
// ends inside the declared stored size. finish() requires the stored stream to be
// complete and decodes it to exactly original_bytes.
//
// LayerAssembler is a value type used by one thread; after any error it stays
// failed and refuses every further chunk.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "wire/encoding.h"

namespace tessera::wire {

inline constexpr size_t kLayerChunkHeaderBytes = 32;

struct LayerLimits {
  std::string name = "layer";  // named in every error
  uint32_t layer = 0;          // the layer index the receiver expects
  std::vector<DType> dtypes;
  uint8_t flags = 0;
  uint16_t group_size = 0;  // when nonzero, quantized payloads must use exactly this group
  uint64_t max_layer_bytes = 0;

  EncodingLimits encoding() const { return {dtypes, flags, group_size}; }
};

struct LayerChunkHeader {
  Encoding encoding;
  uint32_t layer = 0;
  uint64_t original_bytes = 0;
  uint64_t stored_bytes = 0;
  uint64_t chunk_offset = 0;
};

class LayerAssembler {
 public:
  explicit LayerAssembler(LayerLimits limits) : limits_(std::move(limits)) {}

  // Adds the next chunk: a kLayerChunk frame's header and payload.
  Status add_chunk(std::span<const uint8_t> header, std::span<const uint8_t> payload);

  // For a transport that must know a message's length before it arrives (a
  // group's sealed pieces: tensor-parallel shard shipping): checks `header` as
  // add_chunk would (every header check, agreement with the first chunk, the
  // offset) without adding anything, and returns it; chunk_payload_bytes then
  // gives the length of the payload that follows it.
  Result<LayerChunkHeader> check_header(std::span<const uint8_t> header) const;

  bool complete() const { return started_ && !failed_ && stored_.size() == first_.stored_bytes; }
  uint64_t received_bytes() const { return stored_.size(); }

  // Decodes the complete stored stream: exactly original_bytes bytes.
  Result<std::vector<uint8_t>> finish();

 private:
  Result<LayerChunkHeader> decode_header(std::span<const uint8_t> bytes) const;
  Status add_checked(std::span<const uint8_t> header, std::span<const uint8_t> payload);

  // Fixed at construction.
  LayerLimits limits_;

  bool started_ = false;
  bool failed_ = false;
  LayerChunkHeader first_;       // the first chunk's header, which every chunk repeats
  std::vector<uint8_t> stored_;  // the stored stream so far
};

// Encoder side: the chunks (header, payload) of `data` (the layer's decoded
// bytes of encoding.dtype), each payload at most `chunk_bytes` (> 0) long. An
// empty stored stream still makes one (empty) chunk.
struct LayerChunk {
  std::vector<uint8_t> header;
  std::vector<uint8_t> payload;
};
std::vector<LayerChunk> encode_layer_chunks(uint32_t layer, const Encoding& encoding, std::span<const uint8_t> data,
                                            uint64_t chunk_bytes);
std::vector<uint8_t> encode_layer_chunk_header(const LayerChunkHeader& header);

// The payload length of the chunk `header` starts when every chunk but the last
// holds chunk_bytes, as encode_layer_chunks makes them: at most chunk_bytes.
// `header` must have passed check_header (chunk_offset <= stored_bytes).
inline uint64_t chunk_payload_bytes(const LayerChunkHeader& header, uint64_t chunk_bytes) {
  const uint64_t left = header.stored_bytes - header.chunk_offset;
  return left < chunk_bytes ? left : chunk_bytes;
}

}  // namespace tessera::wire
