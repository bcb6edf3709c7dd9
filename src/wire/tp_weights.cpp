#include "wire/tp_weights.h"

#include <algorithm>
#include <iterator>

#include "wire/byte_io.h"

namespace tessera::wire {

std::vector<uint8_t> encode_tp_offer(const TpOffer& offer) {
  std::vector<uint8_t> out;
  out.reserve(kTpOfferBytes);
  put_u32(out, kTpWeightsMagic);
  put_u32(out, offer.ranks);
  put_u32(out, offer.begin);
  put_u32(out, offer.end);
  put_u32(out, offer.shipping ? 1 : 0);
  put_u32(out, offer.config_bytes);
  put_u32(out, offer.element_bytes);
  put_u32(out, offer.block_tensors);
  std::string digest = offer.digest;
  digest.resize(kTpDigestChars, '0');
  out.insert(out.end(), digest.begin(), digest.end());
  return out;
}

Result<TpOffer> decode_tp_offer(std::span<const uint8_t> bytes, uint32_t ranks) {
  if (bytes.size() != kTpOfferBytes)
    return decode_error("tp weights offer: ", bytes.size(), " bytes, expected ", kTpOfferBytes);
  if (get_u32(bytes, 0) != kTpWeightsMagic) return decode_error("tp weights offer: bad magic ", get_u32(bytes, 0));
  TpOffer o;
  o.ranks = get_u32(bytes, 4);
  o.begin = get_u32(bytes, 8);
  o.end = get_u32(bytes, 12);
  const uint32_t shipping = get_u32(bytes, 16);
  o.config_bytes = get_u32(bytes, 20);
  o.element_bytes = get_u32(bytes, 24);
  if (o.ranks != ranks) return decode_error("tp weights offer: ranks ", o.ranks, " in a group of ", ranks);
  if (o.begin >= o.end) return decode_error("tp weights offer: layers [", o.begin, ", ", o.end, ")");
  if (shipping > 1) return decode_error("tp weights offer: shipping ", shipping, " is not 0 or 1");
  o.shipping = shipping == 1;
  if (o.shipping ? o.config_bytes < 2 || o.config_bytes > kMaxTpConfigBytes : o.config_bytes != 0)
    return decode_error("tp weights offer: config_bytes ", o.config_bytes, " (shipping ", shipping, ", at most ",
                        kMaxTpConfigBytes, ")");
  if (o.shipping ? o.element_bytes != 2 && o.element_bytes != 4 : o.element_bytes != 0)
    return decode_error("tp weights offer: element_bytes ", o.element_bytes, " (shipping ", shipping, ")");
  o.block_tensors = get_u32(bytes, 28);
  if (o.shipping ? o.block_tensors > kMaxTpShardTensors : o.block_tensors != 0)
    return decode_error("tp weights offer: block_tensors ", o.block_tensors, " (shipping ", shipping, ", at most ",
                        kMaxTpShardTensors, ")");
  TS_ASSIGN_OR_RETURN(o.digest, decode_tp_digest(bytes.subspan(32)));
  return o;
}

Result<std::vector<uint8_t>> encode_tp_dtypes(std::span<const DType> dtypes) {
  std::vector<uint8_t> out;
  for (const DType dtype : dtypes) {
    const auto* code = std::find(std::begin(kTpBlockCodes), std::end(kTpBlockCodes), dtype);
    if (dtype == DType::kBF16 || dtype == DType::kF16) code = std::begin(kTpBlockCodes);
    if (code == std::end(kTpBlockCodes))
      return Status::unsupported("tp weights: " + std::string(dtype_name(dtype)) + " is neither f32/bf16/f16 nor " +
                                 "a GGUF block type tessera runs");
    out.push_back(static_cast<uint8_t>(code - std::begin(kTpBlockCodes)));
  }
  out.resize(tp_padded_bytes(out.size()), 0);
  return out;
}

Result<std::vector<std::optional<DType>>> decode_tp_dtypes(std::span<const uint8_t> bytes, uint32_t tensors) {
  if (bytes.size() != tp_padded_bytes(tensors))
    return decode_error("tp weights dtypes: ", bytes.size(), " bytes for ", tensors, " tensors");
  std::vector<std::optional<DType>> out;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (i >= tensors) {
      if (bytes[i] != 0) return decode_error("tp weights dtypes: padding byte ", i, " is ", bytes[i]);
      continue;
    }
    if (bytes[i] >= std::size(kTpBlockCodes))
      return decode_error("tp weights dtypes: tensor ", i, "'s code ", bytes[i], " is not 0..",
                          std::size(kTpBlockCodes) - 1);
    out.push_back(bytes[i] == 0 ? std::nullopt : std::optional(kTpBlockCodes[bytes[i]]));
  }
  return out;
}

Result<std::string> decode_tp_digest(std::span<const uint8_t> bytes) {
  if (bytes.size() != kTpDigestChars)
    return decode_error("tp weights: a digest of ", bytes.size(), " bytes, expected ", kTpDigestChars);
  std::string digest(bytes.begin(), bytes.end());
  for (const char c : digest)
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
      return decode_error("tp weights: the digest is not ", kTpDigestChars, " lowercase hex digits");
  return digest;
}

Result<uint32_t> decode_tp_next(uint32_t word, uint32_t ranks) {
  if (word == kTpWeightsDone || word == kTpWeightsFailed || (word >= 1 && word < ranks)) return word;
  return decode_error("tp weights: next ", word, " is not a rank of 1..", ranks - 1, ", done or failed");
}

Result<TpShardAnswer> decode_tp_answer(uint32_t word) {
  if (word > 2) return decode_error("tp weights: answer ", word, " is not 0 (holds), 1 (needs) or 2 (other)");
  return static_cast<TpShardAnswer>(word);
}

Result<TpShardReply> decode_tp_reply(uint32_t word) {
  if (word > 2) return decode_error("tp weights: reply ", word, " is not 0, 1 or 2");
  return static_cast<TpShardReply>(word);
}

namespace {

std::vector<DType> float_dtypes(uint32_t element_bytes) {
  return element_bytes == 4 ? std::vector<DType>{DType::kF32, DType::kBF16, DType::kF16}
                            : std::vector<DType>{DType::kBF16, DType::kF16};
}

// Blocks travel as their bytes (`elements` of them), never re-encoded.
LayerLimits tensor_limits(std::string name, uint32_t index, uint64_t elements, uint32_t element_bytes, bool blocks) {
  LayerLimits limits;
  limits.name = std::move(name);
  limits.layer = index;
  limits.dtypes = blocks ? std::vector<DType>{DType::kU8} : float_dtypes(element_bytes);
  limits.flags = kKnownFlags;  // int8/int4 quantize floats only (check_encoding): blocks come LZ4 or plain
  uint64_t bytes = 0;
  limits.max_layer_bytes = checked_mul(elements, blocks ? 1 : element_bytes, &bytes) ? bytes : 0;
  return limits;
}

}  // namespace

TpTensorReceiver::TpTensorReceiver(std::string name, uint32_t index, uint64_t elements, uint32_t element_bytes,
                                   std::optional<DType> blocks)
    : blocks_(blocks),
      elements_(elements),
      assembler_(tensor_limits(std::move(name), index, elements, element_bytes, blocks.has_value())) {}

Result<uint64_t> TpTensorReceiver::add_header(std::span<const uint8_t> header) {
  if (!header_.empty()) return decode_error("tp shard tensor: a header where its payload was due");
  TS_ASSIGN_OR_RETURN(const LayerChunkHeader h, assembler_.check_header(header));
  if (h.chunk_offset == 0) {  // the first chunk: exactly the tensor's elements in its dtype
    if (h.original_bytes / dtype_size(h.encoding.dtype) != elements_)
      return decode_error("tp shard tensor: ", h.original_bytes, " bytes of ", dtype_name(h.encoding.dtype),
                          " are not ", elements_, " elements (its shape's)");
    dtype_ = blocks_.value_or(h.encoding.dtype);
  }
  header_.assign(header.begin(), header.end());
  payload_bytes_ = chunk_payload_bytes(h, kTpShardChunkBytes);
  return tp_padded_bytes(payload_bytes_);
}

Status TpTensorReceiver::add_payload(std::span<const uint8_t> padded) {
  if (header_.empty()) return decode_error("tp shard tensor: a payload where a header was due");
  if (padded.size() != tp_padded_bytes(payload_bytes_))
    return decode_error("tp shard tensor: payload of ", padded.size(), " bytes, expected ",
                        tp_padded_bytes(payload_bytes_));
  std::vector<uint8_t> header = std::move(header_);
  header_.clear();
  return assembler_.add_chunk(header, padded.first(payload_bytes_));
}

}  // namespace tessera::wire
