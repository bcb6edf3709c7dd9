// libFuzzer target for what a tensor-parallel rank decodes when its leader
// ships it its shard (wire/tp_weights.h): the first 96 bytes as the offer (in a
// group of 2 and of 4) and its last 64 as a rank's digest (2b., as the
// offer's), the next 12 as the answer, next and reply words, then, when the
// group-of-2 offer has block_tensors, that many dtype codes (4b., padded), and
// the rest as the chunks of two tensors (64 and 6 elements, 4 or 2 bytes an
// element; or, where the dtypes give tensor i a GGUF block type, i + 1 rows
// of one block, as u8 bytes) in the order a rank receives them: a 32-byte
// header, then the payload whose length TpTensorReceiver derived from it.
// Any input is either
// accepted or refused with kInvalidInput; none may crash, throw or allocate
// beyond the tensor's shape, and a finished tensor holds exactly its elements.
// Seeds: fuzz/corpus/wire_tp_weights_fuzz (fuzz/make_tp_weights_corpus.py).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core/check.h"
#include "wire/byte_io.h"
#include "wire/tp_weights.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tessera;
  using namespace tessera::wire;
  if (size < kTpOfferBytes + 12) return 0;
  std::span<const uint8_t> input(data, size);
  uint32_t element_bytes = 4, block_tensors = 0;
  for (const uint32_t ranks : {2u, 4u}) {
    const Result<TpOffer> offer = decode_tp_offer(input.first(kTpOfferBytes), ranks);
    TS_CHECK(offer.ok() || offer.status().kind() == ErrorKind::kInvalidInput, offer.status().to_string());
    if (!offer.ok()) continue;
    TS_CHECK(offer->ranks == ranks && offer->begin < offer->end && offer->digest.size() == kTpDigestChars);
    TS_CHECK(!offer->shipping || (offer->config_bytes >= 2 && offer->config_bytes <= kMaxTpConfigBytes),
             offer->config_bytes);
    TS_CHECK(offer->block_tensors <= kMaxTpShardTensors && (offer->shipping || offer->block_tensors == 0));
    if (offer->shipping) element_bytes = offer->element_bytes;
    if (ranks == 2) block_tensors = offer->block_tensors;
    const Result<uint32_t> next = decode_tp_next(get_u32(input, kTpOfferBytes + 4), ranks);
    TS_CHECK(!next.ok() || *next == kTpWeightsDone || *next == kTpWeightsFailed || (*next >= 1 && *next < ranks));
  }
  const Result<std::string> digest = decode_tp_digest(input.subspan(kTpOfferBytes - kTpDigestChars, kTpDigestChars));
  TS_CHECK(!digest.ok() || digest->size() == kTpDigestChars);
  for (const Status& s : {digest.status(), decode_tp_answer(get_u32(input, kTpOfferBytes)).status(),
                          decode_tp_reply(get_u32(input, kTpOfferBytes + 8)).status()})
    TS_CHECK(s.ok() || s.kind() == ErrorKind::kInvalidInput, s.to_string());
  input = input.subspan(kTpOfferBytes + 12);
  std::vector<std::optional<DType>> blocks(2);
  if (block_tensors != 0) {
    if (input.size() < tp_padded_bytes(block_tensors)) return 0;
    const Result<std::vector<std::optional<DType>>> dtypes =
        decode_tp_dtypes(input.first(tp_padded_bytes(block_tensors)), block_tensors);
    TS_CHECK(dtypes.ok() || dtypes.status().kind() == ErrorKind::kInvalidInput, dtypes.status().to_string());
    if (!dtypes.ok()) return 0;
    TS_CHECK(dtypes->size() == block_tensors);
    for (const std::optional<DType>& d : *dtypes) TS_CHECK(!d || dtype_is_quantized(*d));
    for (size_t i = 0; i < blocks.size() && i < dtypes->size(); ++i) blocks[i] = (*dtypes)[i];
    input = input.subspan(tp_padded_bytes(block_tensors));
  }
  for (const uint32_t index : {0u, 1u}) {
    const std::optional<DType> block = blocks[index];
    const uint64_t elements = block
                                  ? *tensor_bytes(*block, std::vector<int64_t>{index + 1, dtype_block_elements(*block)})
                              : index == 0 ? 64
                                           : 6;
    TpTensorReceiver receiver("tensor", index, elements, element_bytes, block);
    Status status;
    while (status.ok() && !receiver.complete()) {
      if (input.size() < kLayerChunkHeaderBytes) return 0;
      const Result<uint64_t> padded = receiver.add_header(input.first(kLayerChunkHeaderBytes));
      input = input.subspan(kLayerChunkHeaderBytes);
      if (!padded.ok()) {
        status = padded.status();
        break;
      }
      TS_CHECK(*padded <= tp_padded_bytes(kTpShardChunkBytes) && *padded % 4 == 0, *padded);
      if (input.size() < *padded) return 0;
      status = receiver.add_payload(input.first(*padded));
      input = input.subspan(*padded);
    }
    TS_CHECK(status.ok() || status.kind() == ErrorKind::kInvalidInput, status.to_string());
    if (!status.ok()) return 0;
    const Result<std::vector<uint8_t>> bytes = receiver.finish();
    TS_CHECK(bytes.ok() || bytes.status().kind() == ErrorKind::kInvalidInput, bytes.status().to_string());
    if (!bytes.ok()) return 0;
    if (block) {
      TS_CHECK(bytes->size() == elements && receiver.dtype() == *block, bytes->size());
    } else {
      TS_CHECK(bytes->size() == elements * dtype_size(receiver.dtype()) &&
                   dtype_size(receiver.dtype()) <= element_bytes && dtype_size(receiver.dtype()) > 0,
               bytes->size());
    }
  }
  return 0;
}
