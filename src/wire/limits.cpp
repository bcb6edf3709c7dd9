// Receiver limits and the stage-limit helpers (limits.h).
#include "wire/limits.h"

#include <algorithm>

#include "core/check.h"
#include "wire/byte_io.h"
#include "wire/control_frame.h"
#include "wire/lz4_codec.h"
#include "wire/quant.h"

namespace tessera::wire {

namespace {

// [1..max_tokens, width] (or [1..max_tokens] when width is 0) of `dtypes`.
Result<DecodeLimits> token_limits(std::string name, std::vector<DType> dtypes, uint64_t max_tokens, uint64_t width) {
  DecodeLimits limits;
  limits.name = std::move(name);
  limits.axes = {AxisBound::range(1, max_tokens)};
  uint64_t elements = max_tokens;
  if (width != 0) {
    limits.axes.push_back(AxisBound::exact(width));
    if (!checked_mul(elements, width, &elements))
      return Status::invalid_input(limits.name + ": element count overflows u64");
  }
  size_t widest = 0;
  for (DType d : dtypes) widest = std::max(widest, dtype_size(d));
  if (!checked_mul(elements, widest, &limits.max_decoded_bytes)) {
    return Status::invalid_input(limits.name + ": byte count overflows u64");
  }
  limits.dtypes = std::move(dtypes);
  return limits;
}

}  // namespace

AxisBound AxisBound::exact(uint64_t n) {
  TS_CHECK_LE(n, kMaxAxisBound);
  return {n, n};
}

AxisBound AxisBound::range(uint64_t min, uint64_t max) {
  TS_CHECK(min >= 1 && min <= max && max <= kMaxAxisBound, "min=", min, " max=", max);
  return {min, max};
}

AxisBound AxisBound::range_from_zero(uint64_t max) {
  TS_CHECK_LE(max, kMaxAxisBound);
  return {0, max};
}

uint64_t max_payload_bytes(const DecodeLimits& limits) {
  // Quantized payloads are never larger than the plain ones (4 + group bytes per
  // group of >= 32 elements of >= 2 bytes).
  const uint64_t plain = limits.max_decoded_bytes;
  if (!(limits.flags & kFlagLz4)) return plain;
  const uint64_t block = std::min(plain, kLz4MaxBlockBytes);
  return std::max(plain, lz4_compress_bound(block));
}

Result<StageLimits> make_stage_limits(int64_t hidden_size, int64_t vocab_size, const StageLimitsOptions& options) {
  if (hidden_size <= 0) {
    return Status::invalid_input("hidden_size: " + std::to_string(hidden_size) + " < min 1");
  }
  if (vocab_size <= 0) {
    return Status::invalid_input("vocab_size: " + std::to_string(vocab_size) + " < min 1");
  }
  const uint64_t max_tokens = options.max_tokens_per_frame;
  if (max_tokens < 1 || max_tokens > kMaxTokensPerFrame) {
    return Status::invalid_input("max_tokens_per_frame: " + std::to_string(max_tokens) + " not in [1, " +
                                 std::to_string(kMaxTokensPerFrame) + "]");
  }
  if (!is_float(options.activation_dtype)) {
    return Status::invalid_input("activation_dtype: " + std::string(dtype_name(options.activation_dtype)) +
                                 " not f32, f16 or bf16");
  }
  const uint64_t hidden = static_cast<uint64_t>(hidden_size);
  const uint16_t group = options.quantized_activation_group;
  if (group != 0 && (!is_valid_group_size(group) || hidden % group != 0)) {
    return Status::invalid_input("quantized_activation_group: " + std::to_string(group) +
                                 " not 32, 64 or 128 dividing hidden_size " + std::to_string(hidden));
  }

  StageLimits stage;
  TS_ASSIGN_OR_RETURN(stage.token_ids, token_limits("token_ids", {DType::kI32, DType::kI64}, max_tokens, 0));
  TS_ASSIGN_OR_RETURN(stage.hidden_states,
                      token_limits("hidden_states", {options.activation_dtype}, max_tokens, hidden));
  if (group != 0) {
    stage.hidden_states.flags = kFlagInt8 | kFlagInt4 | kFlagLz4;
    stage.hidden_states.group_size = group;
  }
  TS_ASSIGN_OR_RETURN(stage.logits,
                      token_limits("logits", {DType::kF32}, max_tokens, static_cast<uint64_t>(vocab_size)));
  TS_ASSIGN_OR_RETURN(stage.mask, token_limits("mask", {DType::kU8}, max_tokens, 0));
  for (const DecodeLimits* l : {&stage.token_ids, &stage.hidden_states, &stage.logits, &stage.mask}) {
    stage.frame.max_payload_bytes = std::max(stage.frame.max_payload_bytes, max_payload_bytes(*l));
  }
  stage.frame.max_control_bytes = kMaxControlBytes;  // start and cancel travel between the tensors
  return stage;
}

}  // namespace tessera::wire
