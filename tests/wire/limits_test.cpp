// Tests of AxisBound, max_payload_bytes and the stage-limit helpers
// (src/wire/limits.h), including the refusals a pipeline stage relies on.
//
// Verified by reverting (each check removed in turn, a test here fails, check
// restored): hidden_size < 1, vocab_size < 1, max_tokens_per_frame outside
// [1, 1<<20], non-float activation dtype, quantized-activation group invalid or
// not dividing hidden_size; hidden states refuse lz4/int8 frames unless the
// quantized-activation mode is on (the limits' flags stay 0); AxisBound::range
// refusing min 0 (a death test: a caller bug, not wire input).
#include "wire/limits.h"

#include <gtest/gtest.h>

#include "wire/lz4_codec.h"
#include "wire/tensor_codec.h"
#include "wire_test_util.h"

namespace tessera::wire {
namespace {

using testing::expect_invalid;

// A Llama-sized stage: hidden_size and vocab_size.
constexpr int64_t kHidden = 4096;
constexpr int64_t kVocab = 128256;

std::vector<uint8_t> header_for(DType dtype, std::vector<uint64_t> shape, uint8_t flags = 0, uint16_t group = 0,
                                uint64_t payload_bytes = 0) {
  uint64_t decoded = dtype_size(dtype);
  for (uint64_t d : shape) decoded *= d;
  return encode_tensor_header(Encoding{dtype, flags, group}, shape, payload_bytes ? payload_bytes : decoded);
}

TEST(LimitsTest, AxisBounds) {
  EXPECT_TRUE(AxisBound::exact(4).contains(4));
  EXPECT_FALSE(AxisBound::exact(4).contains(3));
  EXPECT_FALSE(AxisBound::range(1, 8).contains(0));
  EXPECT_TRUE(AxisBound::range(1, 8).contains(8));
  EXPECT_FALSE(AxisBound::range(1, 8).contains(9));
  EXPECT_TRUE(AxisBound::range_from_zero(8).contains(0));
}

TEST(LimitsDeathTest, RangeFromZeroMustBeAskedFor) {
  EXPECT_DEATH(AxisBound::range(0, 8), "min=0 max=8");
  EXPECT_DEATH(AxisBound::range(9, 8), "min=9 max=8");
  EXPECT_DEATH(AxisBound::exact(UINT64_MAX), "");
}

TEST(LimitsTest, StageLimitsFollowTheConfig) {
  const Result<StageLimits> stage = make_stage_limits(kHidden, kVocab);
  ASSERT_TRUE(stage.ok()) << stage.status().to_string();
  const DecodeLimits& h = stage->hidden_states;
  EXPECT_EQ(h.name, "hidden_states");
  EXPECT_EQ(h.dtypes, std::vector<DType>{DType::kBF16});
  EXPECT_EQ(h.flags, 0);
  ASSERT_EQ(h.axes.size(), 2u);
  EXPECT_EQ(h.axes[0].min, 1u);
  EXPECT_EQ(h.axes[0].max, kMaxTokensPerFrame);
  EXPECT_EQ(h.axes[1].min, 4096u);
  EXPECT_EQ(h.axes[1].max, 4096u);
  EXPECT_EQ(h.max_decoded_bytes, kMaxTokensPerFrame * 4096 * 2);
  EXPECT_EQ(stage->token_ids.axes.size(), 1u);
  EXPECT_EQ(stage->token_ids.max_decoded_bytes, kMaxTokensPerFrame * 8);
  EXPECT_EQ(stage->logits.axes[1].max, 128256u);
  EXPECT_EQ(stage->mask.dtypes, std::vector<DType>{DType::kU8});
  EXPECT_EQ(stage->frame.max_payload_bytes, kMaxTokensPerFrame * 128256 * 4);  // logits are the largest
}

TEST(LimitsTest, HiddenStatesRefuseOneTokenOverTheCap) {
  const Result<StageLimits> stage = make_stage_limits(kHidden, kVocab);
  ASSERT_TRUE(stage.ok());
  EXPECT_TRUE(decode_tensor_header(header_for(DType::kBF16, {kMaxTokensPerFrame, 4096}), stage->hidden_states).ok());
  expect_invalid(decode_tensor_header(header_for(DType::kBF16, {kMaxTokensPerFrame + 1, 4096}), stage->hidden_states),
                 {"hidden_states axis 0: 1048577 > max 1048576"});
  expect_invalid(decode_tensor_header(header_for(DType::kBF16, {1, 4095}), stage->hidden_states),
                 {"hidden_states axis 1: 4095 != exact 4096"});
  expect_invalid(decode_tensor_header(header_for(DType::kF32, {1, 4096}), stage->hidden_states),
                 {"hidden_states dtype: f32 not allowed (allowed: bf16)"});
  expect_invalid(decode_tensor_header(header_for(DType::kI64, {1, 2}), stage->token_ids),
                 {"token_ids rank: 2 != expected 1"});
  expect_invalid(decode_tensor_header(header_for(DType::kF32, {1, 128257}), stage->logits),
                 {"logits axis 1: 128257 != exact 128256"});
}

TEST(LimitsTest, HiddenStatesRefuseCompressionAndQuantizationByDefault) {
  const Result<StageLimits> stage = make_stage_limits(kHidden, kVocab);
  ASSERT_TRUE(stage.ok());
  expect_invalid(decode_tensor_header(header_for(DType::kBF16, {2, 4096}, kFlagLz4, 0, 100), stage->hidden_states),
                 {"hidden_states flags: lz4 not allowed (allowed: none)"});
  expect_invalid(
      decode_tensor_header(header_for(DType::kBF16, {2, 4096}, kFlagInt8, 32, 256 * 36), stage->hidden_states),
      {"hidden_states flags: int8 not allowed"});
}

TEST(LimitsTest, QuantizedActivationModeHasItsOwnLimits) {
  StageLimitsOptions options;
  options.quantized_activation_group = 64;
  const Result<StageLimits> stage = make_stage_limits(kHidden, kVocab, options);
  ASSERT_TRUE(stage.ok()) << stage.status().to_string();
  EXPECT_TRUE(
      decode_tensor_header(header_for(DType::kBF16, {2, 4096}, kFlagInt8, 64, 128 * 68), stage->hidden_states).ok());
  EXPECT_TRUE(
      decode_tensor_header(header_for(DType::kBF16, {2, 4096}, kFlagInt4 | kFlagLz4, 64, 99), stage->hidden_states)
          .ok());
  expect_invalid(
      decode_tensor_header(header_for(DType::kBF16, {2, 4096}, kFlagInt8, 32, 256 * 36), stage->hidden_states),
      {"hidden_states group_size: 32 != required 64"});
  EXPECT_EQ(stage->token_ids.flags, 0);  // the mode is for activations only
  EXPECT_EQ(stage->logits.flags, 0);
}

TEST(LimitsTest, SmallerTokenCap) {
  StageLimitsOptions options;
  options.max_tokens_per_frame = 512;
  options.activation_dtype = DType::kF32;
  const Result<StageLimits> stage = make_stage_limits(kHidden, kVocab, options);
  ASSERT_TRUE(stage.ok());
  expect_invalid(decode_tensor_header(header_for(DType::kF32, {513, 4096}), stage->hidden_states),
                 {"hidden_states axis 0: 513 > max 512"});
}

TEST(LimitsTest, MaxPayloadBytes) {
  DecodeLimits limits;
  limits.max_decoded_bytes = 1000;
  EXPECT_EQ(max_payload_bytes(limits), 1000u);
  limits.flags = kFlagInt8;
  EXPECT_EQ(max_payload_bytes(limits), 1000u);
  limits.flags = kFlagLz4;
  EXPECT_EQ(max_payload_bytes(limits), lz4_compress_bound(1000));
  limits.max_decoded_bytes = uint64_t{1} << 40;  // larger than one LZ4 block
  EXPECT_EQ(max_payload_bytes(limits), uint64_t{1} << 40);
}

TEST(LimitsTest, RefusesBadConfigAndOptions) {
  expect_invalid(make_stage_limits(0, kVocab), {"hidden_size: 0 < min 1"});
  expect_invalid(make_stage_limits(kHidden, -1), {"vocab_size: -1 < min 1"});

  StageLimitsOptions options;
  options.max_tokens_per_frame = kMaxTokensPerFrame + 1;
  expect_invalid(make_stage_limits(kHidden, kVocab, options), {"max_tokens_per_frame: 1048577 not in [1, 1048576]"});
  options.max_tokens_per_frame = 0;
  expect_invalid(make_stage_limits(kHidden, kVocab, options), {"max_tokens_per_frame: 0 not in [1, 1048576]"});

  options = {};
  options.activation_dtype = DType::kI32;
  expect_invalid(make_stage_limits(kHidden, kVocab, options), {"activation_dtype: i32 not f32, f16 or bf16"});

  options = {};
  options.quantized_activation_group = 16;  // divides hidden_size, but is no group size
  expect_invalid(make_stage_limits(kHidden, kVocab, options), {"quantized_activation_group: 16 not 32, 64 or 128"});
  options.quantized_activation_group = 64;
  expect_invalid(make_stage_limits(96, kVocab, options), {"quantized_activation_group: 64", "dividing hidden_size 96"});
}

}  // namespace
}  // namespace tessera::wire
