// Receiver-stated limits: what a receiver expects of a tensor frame, stated
// before the frame arrives. decode_tensor_header (tensor_codec.h) checks a header
// against them before the payload is sliced, copied, decompressed or allocated.
//
// make_stage_limits builds, once per stage from the model's hidden_size and
// vocab_size (numbers: wire knows no ModelConfig), the limits a pipeline stage
// needs:
//   token_ids      i32 or i64  [1..max_tokens]
//   hidden_states  activation  [1..max_tokens, hidden_size]
//   logits         f32         [1..max_tokens, vocab_size]
//   mask           u8          [1..max_tokens]   (per-token attention mask)
// where max_tokens <= kMaxTokensPerFrame. Hidden states refuse LZ4 and
// quantized frames unless the stage enables a quantized-activation mode, whose
// own limits are its group size (and int8, int4 and lz4 flags).
//
// The ids in a token_ids frame are values, not shape: Forward::run_ids checks
// each against [0, vocab_size) before the embedding lookup.
//
// Value types; immutable after construction, so safe to share between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "wire/encoding.h"
#include "wire/frame.h"

namespace tessera::wire {

inline constexpr uint64_t kMaxTokensPerFrame = uint64_t{1} << 20;
inline constexpr uint32_t kMaxRank = 8;

// The largest bound an axis may state: dims become TensorView's int64_t.
inline constexpr uint64_t kMaxAxisBound = uint64_t{INT64_MAX};

// The values one axis may take: exactly n, or [min, max]. Build it with the
// factories, whose preconditions (TS_CHECK) include max <= kMaxAxisBound.
struct AxisBound {
  uint64_t min = 1;
  uint64_t max = 1;

  static AxisBound exact(uint64_t n);
  // Precondition (TS_CHECK): 1 <= min <= max. A zero-length axis must be asked
  // for with range_from_zero.
  static AxisBound range(uint64_t min, uint64_t max);
  static AxisBound range_from_zero(uint64_t max);

  bool contains(uint64_t n) const { return n >= min && n <= max; }
};

struct DecodeLimits {
  std::string name;  // the frame field, named in every error: "hidden_states"
  std::vector<DType> dtypes;
  uint8_t flags = 0;            // allowed flags (encoding.h); 0: plain payloads only
  uint16_t group_size = 0;      // when nonzero, int8/int4 frames must use exactly this group
  std::vector<AxisBound> axes;  // one per axis: the rank must equal axes.size() (<= kMaxRank)
  uint64_t max_decoded_bytes = 0;

  EncodingLimits encoding() const { return {dtypes, flags, group_size}; }
};

// The largest payload a tensor frame within `limits` can carry (LZ4's bound when
// lz4 is allowed); what a FrameLimits must admit for these limits.
uint64_t max_payload_bytes(const DecodeLimits& limits);

struct StageLimitsOptions {
  DType activation_dtype = DType::kBF16;  // f32, f16 or bf16
  uint64_t max_tokens_per_frame = kMaxTokensPerFrame;
  // 0: hidden states must be plain. 32, 64 or 128 (dividing hidden_size): accept
  // int8, int4 and lz4 hidden-state frames quantized with exactly this group.
  uint16_t quantized_activation_group = 0;
};

struct StageLimits {
  DecodeLimits token_ids;
  DecodeLimits hidden_states;
  DecodeLimits logits;
  DecodeLimits mask;
  FrameLimits frame;  // admits the largest payload of the four, and control messages
};

// kInvalidInput naming the argument (hidden_size, vocab_size) or option that is
// out of range.
Result<StageLimits> make_stage_limits(int64_t hidden_size, int64_t vocab_size, const StageLimitsOptions& options = {});

}  // namespace tessera::wire
