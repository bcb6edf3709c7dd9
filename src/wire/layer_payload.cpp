// Layer chunk codec and reassembly (layout and check order in layer_payload.h).
#include "wire/layer_payload.h"

#include <algorithm>

#include "core/check.h"
#include "wire/byte_io.h"

namespace tessera::wire {

namespace {

std::string num(uint64_t value) { return std::to_string(value); }

}  // namespace

Result<LayerChunkHeader> LayerAssembler::decode_header(std::span<const uint8_t> bytes) const {
  const std::string& name = limits_.name;
  auto error = [&name](const std::string& what) { return Status::invalid_input(name + " " + what); };
  if (bytes.size() != kLayerChunkHeaderBytes) {
    return error("header: " + num(bytes.size()) + " bytes != " + num(kLayerChunkHeaderBytes));
  }
  LayerChunkHeader h;
  TS_ASSIGN_OR_RETURN(h.encoding,
                      decode_encoding(name, get_u8(bytes, 0), get_u8(bytes, 1), get_u16(bytes, 2), limits_.encoding()));
  h.layer = get_u32(bytes, 4);
  h.original_bytes = get_u64(bytes, 8);
  h.stored_bytes = get_u64(bytes, 16);
  h.chunk_offset = get_u64(bytes, 24);
  if (h.layer != limits_.layer) return error("layer: " + num(h.layer) + " != expected " + num(limits_.layer));
  if (h.original_bytes > limits_.max_layer_bytes) {
    return error("original_bytes: " + num(h.original_bytes) + " > max_layer_bytes " + num(limits_.max_layer_bytes));
  }
  const uint64_t element_bytes = dtype_size(h.encoding.dtype);
  if (h.original_bytes % element_bytes != 0) {
    return error("original_bytes: " + num(h.original_bytes) + " not a multiple of " + num(element_bytes) + " (dtype " +
                 std::string(dtype_name(h.encoding.dtype)) + ")");
  }
  TS_ASSIGN_OR_RETURN(const uint64_t stored,
                      stored_bytes(name, h.encoding, h.original_bytes / element_bytes, h.original_bytes));
  TS_RETURN_IF_ERROR(check_payload_bytes(name, "stored_bytes", h.encoding, stored, h.stored_bytes));
  return h;
}

Status LayerAssembler::add_chunk(std::span<const uint8_t> header, std::span<const uint8_t> payload) {
  if (failed_)
    return Status::invalid_input(limits_.name + ": refused: an earlier chunk failed or the layer is finished");
  Status status = add_checked(header, payload);
  if (!status.ok()) failed_ = true;
  return status;
}

Result<LayerChunkHeader> LayerAssembler::check_header(std::span<const uint8_t> header_bytes) const {
  const std::string& name = limits_.name;
  if (failed_) return Status::invalid_input(name + ": refused: an earlier chunk failed or the layer is finished");
  TS_ASSIGN_OR_RETURN(const LayerChunkHeader h, decode_header(header_bytes));
  if (started_) {
    const bool same = h.encoding.dtype == first_.encoding.dtype && h.encoding.flags == first_.encoding.flags &&
                      h.encoding.group_size == first_.encoding.group_size &&
                      h.original_bytes == first_.original_bytes && h.stored_bytes == first_.stored_bytes;
    if (!same) return Status::invalid_input(name + " header: chunk disagrees with the first chunk of the layer");
  }
  if (h.chunk_offset != stored_.size()) {
    return Status::invalid_input(name + " chunk_offset: " + num(h.chunk_offset) + " != " + num(stored_.size()) +
                                 " bytes received");
  }
  return h;
}

Status LayerAssembler::add_checked(std::span<const uint8_t> header_bytes, std::span<const uint8_t> payload) {
  const std::string& name = limits_.name;
  TS_ASSIGN_OR_RETURN(const LayerChunkHeader h, check_header(header_bytes));
  // chunk_offset == stored_.size() <= stored_bytes, so the subtraction cannot wrap.
  if (payload.size() > h.stored_bytes - h.chunk_offset) {
    return Status::invalid_input(name + " chunk: offset " + num(h.chunk_offset) + " + " + num(payload.size()) +
                                 " bytes > stored_bytes " + num(h.stored_bytes));
  }
  if (!started_) {
    first_ = h;
    started_ = true;
    stored_.reserve(h.stored_bytes);  // bounded by max_layer_bytes (or its LZ4 bound)
  }
  stored_.insert(stored_.end(), payload.begin(), payload.end());
  return {};
}

Result<std::vector<uint8_t>> LayerAssembler::finish() {
  const std::string& name = limits_.name;
  if (failed_) return Status::invalid_input(name + ": refused: an earlier chunk failed or the layer is finished");
  if (!started_) return Status::invalid_input(name + ": no chunk received");
  if (stored_.size() != first_.stored_bytes) {
    failed_ = true;
    return Status::invalid_input(name + " reassembled: " + num(stored_.size()) + " bytes != stored_bytes " +
                                 num(first_.stored_bytes));
  }
  const uint64_t element_bytes = dtype_size(first_.encoding.dtype);
  TS_ASSIGN_OR_RETURN(const uint64_t stored, stored_bytes(name, first_.encoding, first_.original_bytes / element_bytes,
                                                          first_.original_bytes));
  std::vector<uint8_t> out(first_.original_bytes);  // <= max_layer_bytes, checked on every chunk
  Status status = decode_payload(name, first_.encoding, stored, stored_, out);
  failed_ = true;  // finished: one layer per assembler
  if (!status.ok()) return status;
  return out;
}

std::vector<uint8_t> encode_layer_chunk_header(const LayerChunkHeader& h) {
  std::vector<uint8_t> out;
  out.reserve(kLayerChunkHeaderBytes);
  put_u8(out, dtype_code(h.encoding.dtype));
  put_u8(out, h.encoding.flags);
  put_u16(out, h.encoding.group_size);
  put_u32(out, h.layer);
  put_u64(out, h.original_bytes);
  put_u64(out, h.stored_bytes);
  put_u64(out, h.chunk_offset);
  return out;
}

std::vector<LayerChunk> encode_layer_chunks(uint32_t layer, const Encoding& encoding, std::span<const uint8_t> data,
                                            uint64_t chunk_bytes) {
  TS_CHECK(chunk_bytes > 0);
  const std::vector<uint8_t> stored = encode_payload(encoding, data);
  LayerChunkHeader h{encoding, layer, data.size(), stored.size(), 0};
  std::vector<LayerChunk> chunks;
  do {
    const uint64_t n = std::min<uint64_t>(chunk_bytes, stored.size() - h.chunk_offset);
    chunks.push_back(
        {encode_layer_chunk_header(h), {stored.begin() + h.chunk_offset, stored.begin() + h.chunk_offset + n}});
    h.chunk_offset += n;
  } while (h.chunk_offset < stored.size());
  return chunks;
}

}  // namespace tessera::wire
