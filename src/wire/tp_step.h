// The step message of a tensor-parallel group: what rank 0 (the leader, which
// runs the scheduler and owns the KV block tables) tells every other rank to
// run, so that all ranks run the same forward pass on their own shards. It
// travels over the group itself (Group::broadcast from rank 0: sealed when the
// group is), in two broadcasts: the fixed header, then the body whose length
// the header gives and the receiver has bounded first; a step of hidden states
// (a pipeline stage that is a TP group, past layer 0) has a third: the hidden
// states f32 [tokens, hidden], whose length the receiver derives from the
// header's token count and its own hidden size.
//
// Every field is a little-endian u32 (ids and positions as non-negative i32):
//
//   header (32 bytes)
//     0  magic        'TPS1' (0x31535054)
//     4  kind         1 step, 2 stop (every count below 0)
//     8  tokens       ids in the step                    [1, limits.max_tokens]
//     12 parts        sequences in the step              [1, tokens]
//     16 blocks       entries of all block tables        [parts, parts * limits.blocks]
//     20 copies       copy-on-write block copies         [0, parts]
//     24 logits       0: each part's last token, 1: every token
//     28 input        0: token ids, 1: hidden states (as limits.hidden_size says)
//   and the body at most kMaxTpStepBodyBytes.
//   body (4 * (ids + 3 parts + blocks + 2 copies) bytes; ids = tokens for token
//   ids, 0 for hidden states)
//     ids[tokens]                                        [0, limits.vocab)
//     per part: tokens (>= 1, summing to `tokens`), pos0, table length
//       (>= 1, covering pos0 + tokens positions, summing to `blocks`)
//     the block tables, part after part                  [0, limits.blocks)
//     copies: (from, to) pairs, done before the step     [0, limits.blocks), from != to
//
// The receiver states StepLimits (its KV pool and vocabulary) and the decoder
// checks the header against them before the body is received, and every body
// field before anything runs. All arithmetic on sizes is checked.
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace tessera::wire {

inline constexpr uint32_t kTpStepMagic = 0x31535054;  // "TPS1"
inline constexpr size_t kTpStepHeaderBytes = 32;
// Whatever the counts allow, a body is refused past this (16 Mi words: block
// tables of a large batch sharing a long cached prefix stay far below it).
inline constexpr size_t kMaxTpStepBodyBytes = 64 << 20;

enum class TpStepKind : uint32_t { kStep = 1, kStop = 2 };
static_assert(static_cast<uint32_t>(TpStepKind::kStop) == 2, "the step kinds are on the wire");

struct TpStepLimits {
  uint32_t max_tokens = 0;  // a step's tokens (the pool's positions)
  uint32_t blocks = 0;      // the KV pool's blocks
  uint32_t block_size = 0;  // positions per block
  uint32_t vocab = 0;
  // 0: the receiver takes token ids (its range starts at layer 0); else the
  // width of the hidden states it takes, which the third broadcast carries.
  uint32_t hidden_size = 0;
};

enum class TpStepInput : uint32_t { kIds = 0, kHidden = 1 };
static_assert(static_cast<uint32_t>(TpStepInput::kHidden) == 1, "the input kinds are on the wire");

struct TpStepHeader {
  TpStepKind kind = TpStepKind::kStop;
  uint32_t tokens = 0;
  uint32_t parts = 0;
  uint32_t blocks = 0;
  uint32_t copies = 0;
  bool all_logits = false;
  TpStepInput input = TpStepInput::kIds;

  size_t body_bytes() const {
    const size_t ids = input == TpStepInput::kIds ? tokens : 0;
    return 4 * (ids + 3 * size_t{parts} + blocks + 2 * size_t{copies});
  }
  // The third broadcast's length: f32 [tokens, hidden_size] (0 for token ids).
  // The decoder has checked that it fits in size_t.
  size_t hidden_bytes(uint32_t hidden_size) const {
    return input == TpStepInput::kHidden ? size_t{tokens} * hidden_size * sizeof(float) : 0;
  }
};

struct TpStepPart {
  int32_t tokens = 0;
  int32_t pos0 = 0;
  std::vector<int32_t> blocks;
};

struct TpStep {
  bool all_logits = false;
  TpStepInput input = TpStepInput::kIds;
  std::vector<int32_t> ids;  // the step's token ids; empty for hidden states
  std::vector<TpStepPart> parts;
  std::vector<std::pair<int32_t, int32_t>> copies;  // (from, to)
};

// The header then the body of a step; a stop is a header alone.
std::vector<uint8_t> encode_tp_step_header(const TpStep& step);
std::vector<uint8_t> encode_tp_step_body(const TpStep& step);
std::vector<uint8_t> encode_tp_stop();

Result<TpStepHeader> decode_tp_step_header(std::span<const uint8_t> bytes, const TpStepLimits& limits);
Result<TpStep> decode_tp_step_body(const TpStepHeader& header, std::span<const uint8_t> bytes,
                                   const TpStepLimits& limits);

}  // namespace tessera::wire
