// Shipping a tensor-parallel rank its shard: a rank started without a
// checkpoint (tessera rank without --model) receives its own part of every
// tensor from the leader (rank 0) over the group itself (sealed when the group
// is), right after the group forms and before the Forwards are set up. Every
// message's length is known to its receiver before it arrives (a group's pieces
// are sized by the receiver, never by the sender).
//
// Every field is a little-endian u32, in this order:
//
//   1. offer (broadcast from rank 0, 96 bytes)
//      0  magic         'TPW1' (0x31575054)
//      4  ranks         == the group's size
//      8  begin         the leader's layers [begin, end): begin < end
//      12 end
//      16 shipping      0: the leader ships nothing, 1: it ships shards
//      20 config_bytes  the config.json text's length: [2, kMaxTpConfigBytes] when shipping, else 0
//      24 element_bytes the largest element of the leader's f32/bf16/f16 tensors: 2 or 4 when shipping, else 0
//      28 block_tensors 0 when every tensor ships in its own float dtype; when the leader
//                       holds GGUF quantized blocks (shipping only), the number of
//                       tensors in a shard, whose dtypes (4b.) follow the config: at
//                       most kMaxTpShardTensors
//      32 digest        64 lowercase hex digits: weights_digest of the leader's layers, whole
//   2. answers (all_gather, one word per rank): 0 the rank holds its weights (its
//      own checkpoint, or the shard of this very offer, received earlier), 1 it
//      needs them, 2 its own checkpoint (tessera rank --model) is another: its
//      weights digest of the offer's layers is not the offer's.
//   When a rank answered 2, every rank fails after:
//   2b. digests (all_gather, 64 bytes per rank): each rank's weights digest of
//      the offer's layers, as the offer's (a rank that holds none sends the
//      offer's), so that the leader names the other checkpoint's.
//   When the leader ships and a rank needs its shard, rank by rank:
//   3. next (broadcast from rank 0): r in [1, ranks), rank r's turn; every other
//      rank waits for the next one (as long as the leader is alive).
//   4. config (rank 0 to r): config_bytes of config.json, zero-padded to a multiple of 4.
//   4b. dtypes (rank 0 to r), when block_tensors > 0: one byte a tensor of the
//      shard, in its order (below), zero-padded to a multiple of 4: 0 a tensor
//      of f32, bf16 or f16 (its chunks say which), else the GGUF block type its
//      bytes hold (kTpBlockCodes: 1 q8_0, 2 q4_0, 3 q4_k, 4 q5_k, 5 q6_k).
//   5. reply (r to rank 0): 0 the rank takes its shard, 1 it refuses the config
//      (does not parse, or its layers or rank count do not fit it, or its
//      dtypes are not one a tensor, or put blocks in a tensor that is not a
//      matrix of rows of whole blocks), 2 the shard is larger than the rank's
//      bound. The rank derives the shard's tensors and their shapes from the
//      config, the layers and its rank (model/shard.h) and bounds them by
//      element_bytes, or a block type's bytes of that shape, before it answers 0.
//   6. tensors (rank 0 to r), when it took them: for each tensor of the shard in
//      that order, its chunks as layer payloads (layer_payload.h, the tensor's
//      index as the layer): a 32-byte chunk header, checked by the receiver, then
//      the payload whose length the receiver derives from it (chunk_payload_bytes
//      with kTpShardChunkBytes), zero-padded to a multiple of 4. A tensor's
//      decoded size must be its shape's elements in the chunk's dtype, of at most
//      element_bytes; a tensor of blocks travels as u8 bytes (LZ4 or nothing),
//      exactly its block type's bytes of its shape (core/dtype.h tensor_bytes).
//   7. next (broadcast from rank 0): kTpWeightsDone, every rank holds its weights,
//      or kTpWeightsFailed, a rank refused or could not be shipped.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "wire/layer_payload.h"

namespace tessera::wire {

inline constexpr uint32_t kTpWeightsMagic = 0x31575054;  // "TPW1"
inline constexpr size_t kTpOfferBytes = 96;
inline constexpr size_t kTpDigestChars = 64;
inline constexpr uint32_t kMaxTpConfigBytes = 1 << 20;  // a config.json is a few KiB
inline constexpr uint64_t kTpShardChunkBytes = 1 << 20;
inline constexpr uint32_t kMaxTpShardTensors = 1 << 20;  // a shard of 100 MoE layers of 128 experts is ~40k
// The codes of 4b.: index 0 is a float tensor (no block type).
inline constexpr DType kTpBlockCodes[] = {DType::kF32,  DType::kQ8_0, DType::kQ4_0,
                                          DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// The `next` word (3, 7): a rank's turn, or the end.
inline constexpr uint32_t kTpWeightsDone = 0;
inline constexpr uint32_t kTpWeightsFailed = 0xFFFFFFFF;

enum class TpShardAnswer : uint32_t { kHolds = 0, kNeeds = 1, kOther = 2 };
enum class TpShardReply : uint32_t { kTakes = 0, kBadConfig = 1, kOverBound = 2 };
static_assert(static_cast<uint32_t>(TpShardAnswer::kOther) == 2, "the answers are on the wire");
static_assert(static_cast<uint32_t>(TpShardReply::kOverBound) == 2, "the replies are on the wire");

struct TpOffer {
  uint32_t ranks = 0;
  uint32_t begin = 0;
  uint32_t end = 0;
  bool shipping = false;
  uint32_t config_bytes = 0;
  uint32_t element_bytes = 0;
  uint32_t block_tensors = 0;
  std::string digest;  // kTpDigestChars hex digits
};

std::vector<uint8_t> encode_tp_offer(const TpOffer& offer);
// Checks every field as the header comment states; `ranks` is the receiver's group size.
Result<TpOffer> decode_tp_offer(std::span<const uint8_t> bytes, uint32_t ranks);

// A shard's dtypes (4b.), one a tensor: the codes of f32/bf16/f16 (0) and the
// block types. Encoding fails (kUnsupported) on a dtype that is neither.
Result<std::vector<uint8_t>> encode_tp_dtypes(std::span<const DType> dtypes);
// `bytes` as received (padded); `tensors` is the offer's block_tensors. Each
// tensor's block type, or nullopt for a float tensor.
Result<std::vector<std::optional<DType>>> decode_tp_dtypes(std::span<const uint8_t> bytes, uint32_t tensors);

// A digest (the offer's, 2b.): exactly kTpDigestChars lowercase hex digits.
Result<std::string> decode_tp_digest(std::span<const uint8_t> bytes);
// The next word (3, 7) as the receiver of a group of `ranks` takes it.
Result<uint32_t> decode_tp_next(uint32_t word, uint32_t ranks);
Result<TpShardAnswer> decode_tp_answer(uint32_t word);
Result<TpShardReply> decode_tp_reply(uint32_t word);

// A message's length on the group: `bytes` rounded up to a multiple of 4 (the
// group moves whole f32 words).
inline uint64_t tp_padded_bytes(uint64_t bytes) { return (bytes + 3) / 4 * 4; }

// A rank's side of one tensor's chunks (6.): each chunk header is checked (as
// LayerAssembler does, the tensor's index as the layer) before the payload's
// length is derived from it; the first one must declare exactly `elements`
// elements of a float dtype of at most element_bytes, so nothing larger than
// the tensor's shape is ever reserved. A tensor of `blocks` (a GGUF block type,
// `elements` then being its tensor_bytes) must come as exactly that many u8
// bytes, LZ4-compressed or not. After any error it refuses everything.
class TpTensorReceiver {
 public:
  TpTensorReceiver(std::string name, uint32_t index, uint64_t elements, uint32_t element_bytes,
                   std::optional<DType> blocks = std::nullopt);

  // The next chunk's 32-byte header; returns the length of the (padded)
  // payload that follows it on the group, at most tp_padded_bytes(kTpShardChunkBytes).
  Result<uint64_t> add_header(std::span<const uint8_t> header);
  // That payload, padded as add_header said.
  Status add_payload(std::span<const uint8_t> padded);
  bool complete() const { return assembler_.complete(); }
  // The tensor's bytes (elements of dtype(), or its blocks) once complete.
  Result<std::vector<uint8_t>> finish() { return assembler_.finish(); }
  DType dtype() const { return dtype_; }

 private:
  // Fixed at construction.
  std::optional<DType> blocks_;
  uint64_t elements_;
  LayerAssembler assembler_;

  DType dtype_ = DType::kF32;
  std::vector<uint8_t> header_;  // the header whose payload comes next; empty when a header comes next
  uint64_t payload_bytes_ = 0;
};

}  // namespace tessera::wire
