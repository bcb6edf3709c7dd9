// The TP step message (wire/tp_step.h): a step round-trips, and every bound the
// receiver states refuses a message that breaks it, naming the field, before
// anything is allocated from it.
#include <gtest/gtest.h>

#include "wire/byte_io.h"
#include "wire/tp_step.h"

namespace tessera::wire {
namespace {

constexpr TpStepLimits kLimits{.max_tokens = 64, .blocks = 16, .block_size = 4, .vocab = 100};

TpStep two_parts() {
  TpStep step;
  step.ids = {1, 2, 3, 99};
  step.parts = {{.tokens = 3, .pos0 = 0, .blocks = {5}}, {.tokens = 1, .pos0 = 6, .blocks = {7, 2}}};
  step.copies = {{1, 2}};
  return step;
}

Result<TpStep> decode(const std::vector<uint8_t>& header, const std::vector<uint8_t>& body,
                      const TpStepLimits& limits = kLimits) {
  TS_ASSIGN_OR_RETURN(const TpStepHeader h, decode_tp_step_header(header, limits));
  return decode_tp_step_body(h, body, limits);
}

void set_u32(std::vector<uint8_t>& bytes, size_t offset, uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[offset + static_cast<size_t>(i)] = static_cast<uint8_t>(value >> (8 * i));
}

// `header` claiming `tokens` tokens in one part of one block, with no copies.
std::vector<uint8_t> claiming_tokens(std::vector<uint8_t> header, uint32_t tokens) {
  set_u32(header, 8, tokens);
  set_u32(header, 12, 1);
  set_u32(header, 16, 1);
  set_u32(header, 20, 0);
  return header;
}

std::string error_of(const std::vector<uint8_t>& header, const std::vector<uint8_t>& body) {
  auto step = decode(header, body);
  EXPECT_FALSE(step.ok());
  return step.ok() ? "" : step.status().message();
}

TEST(TpStep, RoundTrips) {
  const TpStep step = two_parts();
  auto got = decode(encode_tp_step_header(step), encode_tp_step_body(step));
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->ids, step.ids);
  ASSERT_EQ(got->parts.size(), 2u);
  EXPECT_EQ(got->parts[1].pos0, 6);
  EXPECT_EQ(got->parts[1].blocks, (std::vector<int32_t>{7, 2}));
  EXPECT_EQ(got->copies, step.copies);
  auto stop = decode_tp_step_header(encode_tp_stop(), kLimits);
  ASSERT_TRUE(stop.ok());
  EXPECT_EQ(stop->kind, TpStepKind::kStop);
}

// Each header bound refuses before the body's length is trusted.
TEST(TpStep, HeaderBoundsRefuse) {
  const TpStep step = two_parts();
  const std::vector<uint8_t> good = encode_tp_step_header(step);
  auto with = [&](size_t offset, uint32_t value) {
    std::vector<uint8_t> h = good;
    set_u32(h, offset, value);
    auto decoded = decode_tp_step_header(h, kLimits);
    EXPECT_FALSE(decoded.ok()) << "offset " << offset << " = " << value;
    return decoded.ok() ? "" : decoded.status().message();
  };
  EXPECT_NE(with(0, 0x12345678).find("bad magic"), std::string::npos);
  EXPECT_NE(with(4, 3).find("unknown kind 3"), std::string::npos);
  EXPECT_NE(with(8, 65).find("65 tokens, expected [1, 64]"), std::string::npos);
  EXPECT_NE(with(8, 0).find("0 tokens"), std::string::npos);
  EXPECT_NE(with(12, 5).find("5 parts for 4 tokens"), std::string::npos);
  EXPECT_NE(with(16, 33).find("33 block table entries for 2 parts of a pool of 16"), std::string::npos);
  EXPECT_NE(with(16, 1).find("1 block table entries for 2 parts"), std::string::npos);
  EXPECT_NE(with(20, 3).find("3 block copies for 2 parts"), std::string::npos);
  EXPECT_NE(with(24, 2).find("logits 2"), std::string::npos);
  EXPECT_NE(with(28, 1).find("input 1 (0 token ids, 1 hidden states), this rank takes token ids"), std::string::npos);
  std::vector<uint8_t> stop = encode_tp_stop();
  set_u32(stop, 8, 1);
  EXPECT_FALSE(decode_tp_step_header(stop, kLimits).ok());
  EXPECT_FALSE(decode_tp_step_header(std::vector<uint8_t>(31), kLimits).ok());
  // A body past kMaxTpStepBodyBytes, whatever the pool allows.
  const TpStepLimits huge{.max_tokens = 1u << 30, .blocks = 1u << 30, .block_size = 1, .vocab = 100};
  auto refused = decode_tp_step_header(claiming_tokens(good, 1u << 25), huge);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("exceeds"), std::string::npos);
}

// Each body field outside what the receiver holds is refused, naming it.
TEST(TpStep, BodyBoundsRefuse) {
  auto body_with = [&](void (*edit)(TpStep&)) {
    TpStep step = two_parts();
    edit(step);
    return error_of(encode_tp_step_header(step), encode_tp_step_body(step));
  };
  EXPECT_NE(body_with([](TpStep& s) { s.ids[3] = 100; }).find("token id 100 >= vocabulary 100"), std::string::npos);
  EXPECT_NE(body_with([](TpStep& s) { s.parts[1].blocks[0] = 16; }).find("block 16 >= pool 16"), std::string::npos);
  EXPECT_NE(body_with([](TpStep& s) { s.parts[1].pos0 = 8; }).find("a table of 2 blocks for positions up to 9"),
            std::string::npos);
  EXPECT_NE(body_with([](TpStep& s) { s.parts[1].pos0 = 64; }).find("outside a pool of 64 positions"),
            std::string::npos);
  EXPECT_NE(body_with([](TpStep& s) { s.copies[0] = {3, 3}; }).find("block copy 3 -> 3"), std::string::npos);
  EXPECT_NE(body_with([](TpStep& s) { s.copies[0] = {1, 16}; }).find("block copy 1 -> 16"), std::string::npos);
  // Parts whose tokens do not add up to the header's.
  TpStep step = two_parts();
  std::vector<uint8_t> body = encode_tp_step_body(step);
  set_u32(body, 4 * 4, 2);  // the first part's tokens: 3 -> 2
  EXPECT_NE(error_of(encode_tp_step_header(step), body).find("parts of 3 tokens, header 4"), std::string::npos);
  // A body of another length than the header's.
  body = encode_tp_step_body(step);
  body.pop_back();
  EXPECT_NE(error_of(encode_tp_step_header(step), body).find("bytes, expected"), std::string::npos);
}

// A pipeline stage's TP group past layer 0: the step carries no ids, and the
// hidden states' length comes from the header's tokens and the receiver's width.
TEST(TpStep, HiddenStatesStepRoundTripsAndTheInputKindIsTheReceivers) {
  TpStepLimits hidden = kLimits;
  hidden.hidden_size = 8;
  TpStep step = two_parts();
  step.input = TpStepInput::kHidden;
  step.ids.clear();
  const std::vector<uint8_t> header = encode_tp_step_header(step), body = encode_tp_step_body(step);
  auto h = decode_tp_step_header(header, hidden);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->tokens, 4u);
  EXPECT_EQ(h->body_bytes(), body.size());
  EXPECT_EQ(h->hidden_bytes(hidden.hidden_size), 4u * 8 * sizeof(float));
  auto got = decode_tp_step_body(*h, body, hidden);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_TRUE(got->ids.empty());
  EXPECT_EQ(got->input, TpStepInput::kHidden);
  EXPECT_EQ(got->parts[1].blocks, (std::vector<int32_t>{7, 2}));
  // Hidden states to a rank that takes token ids, and token ids to one that takes hidden states.
  auto wrong = decode_tp_step_header(header, kLimits);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("this rank takes token ids"), std::string::npos);
  wrong = decode_tp_step_header(encode_tp_step_header(two_parts()), hidden);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("this rank takes hidden states"), std::string::npos);
  // Hidden states whose byte count overflows are refused before anything is sized from it.
  const TpStepLimits huge{
      .max_tokens = 1u << 31, .blocks = 1u << 30, .block_size = 1u << 2, .vocab = 100, .hidden_size = 1u << 31};
  auto refused = decode_tp_step_header(claiming_tokens(header, 1u << 31), huge);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("overflow"), std::string::npos);
}

}  // namespace
}  // namespace tessera::wire
