// The decoders of what a peer says on control channels, each guard on its own:
// the Group's control header (wire/rank_control.h), pipeline control frames and
// their fields (wire/control_frame.h), the start message of last-stage sampling
// (wire/start_message.h, a preempted request's output too), and
// the weight-shipping manifest (wire/ship_manifest.h).
// Every case here was checked to fail with its guard removed (the check
// deleted, the test run, the check restored).
#include <gtest/gtest.h>

#include "sampling/sampler.h"
#include "wire/byte_io.h"
#include "wire/control_frame.h"
#include "wire/rank_control.h"
#include "wire/ship_manifest.h"
#include "wire/start_message.h"

namespace tessera::pipeline {
namespace {

using json = nlohmann::json;
using wire::check_manifest;
using wire::ControlHeader;
using wire::ControlKind;
using wire::decode_control;
using wire::decode_control_header;
using wire::encode_control;
using wire::field;
using wire::kControlHeaderBytes;
using wire::kMaxControlText;
using wire::output_from_json;
using wire::payload_dtype;
using wire::prompt_from_json;
using wire::sampling_from_json;
using wire::start_message;
using wire::text_or;

void expect_refused(const Status& status, const std::string& needle) {
  EXPECT_EQ(status.kind(), ErrorKind::kInvalidInput) << status.to_string();
  EXPECT_NE(status.message().find(needle), std::string::npos) << status.to_string();
}

std::array<uint8_t, kControlHeaderBytes> control_header(uint32_t kind, uint64_t generation, uint32_t length) {
  std::vector<uint8_t> bytes;
  wire::put_u32(bytes, kind);
  wire::put_u64(bytes, generation);
  wire::put_u32(bytes, length);
  std::array<uint8_t, kControlHeaderBytes> out;
  std::copy(bytes.begin(), bytes.end(), out.begin());
  return out;
}

TEST(ControlHeader, DecodesAndRefusesUnknownKindsAndLongText) {
  Result<ControlHeader> ok = decode_control_header(control_header(1, 7, 12));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->kind, ControlKind::kAbort);
  EXPECT_EQ(ok->generation, 7u);
  EXPECT_EQ(ok->length, 12u);
  expect_refused(decode_control_header(control_header(0, 7, 0)).status(), "kind: 0 unknown");
  ASSERT_TRUE(decode_control_header(control_header(4, 7, 0)).ok());  // heartbeat
  expect_refused(decode_control_header(control_header(5, 7, 0)).status(), "kind: 5 unknown");
  expect_refused(decode_control_header(control_header(1, 7, kMaxControlText + 1)).status(), "length: 4097 > max 4096");
}

Result<json> decode(const std::vector<uint8_t>& frame_bytes) {
  TS_ASSIGN_OR_RETURN(wire::Frame frame, wire::decode_frame(frame_bytes, wire::kControlOnly));
  return decode_control(frame);
}

std::vector<uint8_t> control_frame(const std::string& payload, std::vector<uint8_t> header = {}) {
  return wire::encode_frame(wire::MessageKind::kControl, 3, header,
                            {reinterpret_cast<const uint8_t*>(payload.data()), payload.size()});
}

TEST(ControlFrame, RoundTripsAndRefusesWhatIsNotAControlObject) {
  Result<json> ok = decode(encode_control(3, {{"type", "cancel"}}));
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ((*ok)["type"], "cancel");
  const std::vector<uint8_t> empty_tensor = wire::encode_frame(wire::MessageKind::kTensor, 3, {}, {});
  expect_refused(decode_control(*wire::decode_frame(empty_tensor, {0, 0, 0})).status(), "expected a control message");
  expect_refused(decode(control_frame("{\"type\": \"x\"}", std::vector<uint8_t>(8, 0))).status(),
                 "control frame header_bytes: 8 > max 0");
  expect_refused(decode(control_frame("{\"type\": ")).status(), "control message: not valid JSON");
  for (const std::string bad : {"[1, 2]", "{\"kind\": \"x\"}", "{\"type\": 5}", "\"text\""}) {
    expect_refused(decode(control_frame(bad)).status(), "not a JSON object with a string \"type\"");
  }
}

// The shared JSON reader's depth limit (core/text_file.h) holds for control
// messages too: without it this message is accepted, 100,000 levels built.
TEST(ControlFrame, RefusesJsonNestedDeeperThanTheLimit) {
  const std::string deep = "{\"type\": \"start\", \"x\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  expect_refused(decode(control_frame(deep)).status(), "control message: JSON nested deeper than 64 levels");
}

TEST(ControlFrame, AControlMessageBeyondItsBoundIsRefusedBeforeItIsRead) {
  const std::string big = "{\"type\": \"start\", \"pad\": \"" + std::string(wire::kMaxControlBytes, 'x') + "\"}";
  expect_refused(decode(control_frame(big)).status(), "control frame payload_bytes");
}

TEST(ControlFrame, FieldsMustBePresentAndTyped) {
  const json message = {{"type", "setup"}, {"begin", 3}, {"model", "m"}, {"plain", true}, {"session", 5}};
  EXPECT_EQ(*field<int64_t>(message, "begin"), 3);
  EXPECT_EQ(*field<std::string>(message, "model"), "m");
  expect_refused(field<int64_t>(message, "end").status(), "setup: missing field end");
  expect_refused(field<std::string>(message, "begin").status(), "field begin has the wrong type");
  expect_refused(field<bool>(message, "model").status(), "field model has the wrong type");
  expect_refused(field<uint64_t>(json{{"type", "x"}, {"session", -5}}, "session").status(), "wrong type");
  expect_refused(field<int32_t>(json{{"type", "x"}, {"n", int64_t{1} << 31}}, "n").status(),
                 "field n 2147483648 is out of range");
  expect_refused(field<int64_t>(json{{"type", "x"}, {"n", UINT64_MAX}}, "n").status(),
                 "field n 18446744073709551615 is out of range");
  EXPECT_EQ(*field<int32_t>(json{{"type", "x"}, {"n", -(int64_t{1} << 31)}}, "n"), INT32_MIN);
  EXPECT_EQ(text_or(json{{"type", "error"}, {"message", 5}}, "message", "?"), "?");
}

// A stage's error carries its Status typed: kind and cause by name. An unknown,
// missing or "ok" kind and an unknown cause are refused. (Each refusal was
// checked to fail with its check removed.)
TEST(ErrorMessage, RoundTripsEveryKindAndCauseAndRefusesOthers) {
  const Status statuses[] = {Status::invalid_input("bad ids"),
                             Status::not_found("no such file"),
                             Status::unsupported("no such mode"),
                             Status::overloaded("the KV pool is full"),
                             Status::disconnected("next stage gone"),
                             Status::disconnected("next stage silent", Cause::kTimedOut),
                             Status::disconnected("closed", Cause::kClosedCleanly),
                             Status::disconnected("woken", Cause::kInterrupted),
                             Status::internal("a bug")};
  for (const Status& status : statuses) {
    Result<json> message = decode(encode_control(4, wire::error_message("stage1", status)));
    ASSERT_TRUE(message.ok()) << message.status().to_string();
    EXPECT_EQ((*message)["type"], "error");
    EXPECT_EQ((*message)["stage"], "stage1");
    Result<wire::ErrorReport> back = wire::error_from_message(*message);
    ASSERT_TRUE(back.ok()) << back.status().to_string();
    EXPECT_EQ(back->status.kind(), status.kind()) << status.to_string();
    EXPECT_EQ(back->status.cause(), status.cause()) << status.to_string();
    EXPECT_EQ(back->status.message(), status.message());
  }
  EXPECT_EQ(wire::error_message("s", Status::overloaded("x"))["kind"], "overloaded");
  EXPECT_EQ(wire::error_message("s", Status::disconnected("x", Cause::kTimedOut))["cause"], "timed_out");
  const json good = wire::error_message("stage1", Status::overloaded("full"));
  auto with = [&](const char* key, json value) {
    json message = good;
    message[key] = std::move(value);
    return wire::error_from_message(message).status();
  };
  expect_refused(with("kind", "ok"), "kind 'ok' unknown");
  expect_refused(with("kind", "Overloaded"), "kind 'Overloaded' unknown");
  expect_refused(with("kind", 4), "field kind has the wrong type");
  expect_refused(with("cause", "late"), "cause 'late' unknown");
  json no_kind = good;
  no_kind.erase("kind");
  expect_refused(wire::error_from_message(no_kind).status(), "missing field kind");
  json no_message = good;
  no_message.erase("message");
  EXPECT_EQ(wire::error_from_message(no_message)->status.message(), "?");
}

TEST(StartMessage, RoundTripsTheSamplingParameters) {
  SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 40;
  params.top_p = 0.9f;
  params.min_p = 0.05f;
  params.repetition_penalty = 1.3f;
  params.presence_penalty = 0.2f;
  params.frequency_penalty = 0.1f;
  params.seed = 12345678901234ull;
  params.logit_bias = {{2, -3.5f}, {9, 1.0f}};
  const std::vector<int32_t> prompt = {5, 6, 7};
  const json start = start_message(params, prompt);
  Result<SamplingParams> back = sampling_from_json(start);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(back->temperature, params.temperature);
  EXPECT_EQ(back->top_k, params.top_k);
  EXPECT_EQ(back->seed, params.seed);
  EXPECT_EQ(back->logit_bias, params.logit_bias);
  EXPECT_EQ(*prompt_from_json(start, 100), prompt);
  params.repetition_penalty = 1.0f;  // the prompt travels only when the penalty needs it
  EXPECT_TRUE(start_message(params, prompt)["prompt"].empty());
}

TEST(StartMessage, RefusesMalformedOrInvalidFields) {
  const json good = start_message(SamplingParams{}, std::vector<int32_t>{1});
  auto with = [&](const char* key, json value) {
    json start = good;
    start[key] = std::move(value);
    return start;
  };
  expect_refused(sampling_from_json(with("temperature", "hot")).status(), "temperature must be a number");
  expect_refused(sampling_from_json(with("top_k", 1.5)).status(), "top_k has the wrong type");
  expect_refused(sampling_from_json(with("seed", -1)).status(), "seed has the wrong type");
  expect_refused(sampling_from_json(with("logit_bias", json::object())).status(), "logit_bias must be an array");
  expect_refused(sampling_from_json(with("logit_bias", json::array({json::array({1})}))).status(),
                 "entries must be [token id, bias]");
  // Integers are never truncated to fit (without the range checks, 2^32 + 5 acts
  // on token 5 and top_k 2^32 + 1 becomes 1: checked).
  const int64_t wraps_to_5 = (int64_t{1} << 32) + 5;
  expect_refused(sampling_from_json(with("logit_bias", json::array({json::array({wraps_to_5, 1.0})}))).status(),
                 "logit_bias token id 4294967301 is out of range");
  expect_refused(sampling_from_json(with("top_k", (int64_t{1} << 32) + 1)).status(),
                 "top_k 4294967297 is out of range");
  expect_refused(prompt_from_json(with("prompt", json::array({uint64_t{1} << 63})), 100).status(),
                 "prompt[0] is not a token id below 100");
  expect_refused(validate(*sampling_from_json(with("temperature", -1.0)), 100),
                 "temperature");  // the ranges: validate()
  expect_refused(prompt_from_json(with("prompt", "1,2"), 100).status(), "prompt must be an array");
  expect_refused(prompt_from_json(with("prompt", json::array({1, 100})), 100).status(),
                 "prompt[1] is not a token id below 100");
  expect_refused(prompt_from_json(with("prompt", json::array({-1})), 100).status(), "prompt[0]");
}

// A preempted request's start (revision 3): its answer so far round-trips, is
// absent from a fresh start, and is refused when it is not an array, longer than
// the request's positions (checked on the array's length, before an id is read)
// or holds an id outside the vocabulary.
TEST(StartMessage, OutputOfAPreemptedRequestIsBoundedAndChecked) {
  const std::vector<int32_t> prompt = {5, 6, 7}, output = {9, 9, 4};
  const json resumed = start_message(SamplingParams{}, prompt, output);
  ASSERT_TRUE(output_from_json(resumed, 100, 3).ok());
  EXPECT_EQ(*output_from_json(resumed, 100, 3), output);
  const json fresh = start_message(SamplingParams{}, prompt);
  EXPECT_FALSE(fresh.contains("output"));
  EXPECT_TRUE(output_from_json(fresh, 100, 3)->empty());
  auto with = [&](json value) {
    json start = fresh;
    start["output"] = std::move(value);
    return start;
  };
  expect_refused(output_from_json(with("9,9"), 100, 8).status(), "output must be an array");
  expect_refused(output_from_json(resumed, 100, 2).status(), "output has 3 ids, more than the 2 positions");
  expect_refused(output_from_json(with(json::array({1, 100})), 100, 8).status(),
                 "output[1] is not a token id below 100");
  expect_refused(output_from_json(with(json::array({-1})), 100, 8).status(), "output[0]");
  expect_refused(output_from_json(with(json::array({"1"})), 100, 8).status(), "output[0]");
}

// Through text, as on the wire (where non-negative numbers parse as unsigned).
json manifest(json tensors) { return json::parse(json{{"config", json::object()}, {"tensors", tensors}}.dump()); }

TEST(ShipManifest, AcceptsGroupsInOrder) {
  auto groups = check_manifest(
      manifest({{"e", "BF16", {4, 8}, 0}, {"l0.a", "F32", {8}, 1}, {"l0.b", "F32", {2, 2}, 1}}), 1 << 20);
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[0][0].bytes, 64u);
  EXPECT_EQ((*groups)[1][1].bytes, 16u);
}

// A layer of a GGUF file (issue 19, point 7): f32 norms beside q4_k and q6_k
// blocks, one group that travels as u8 bytes; each tensor's bytes are whole
// blocks (ggml's block sizes: 144 and 210 bytes per 256 elements, 34 per 32).
TEST(ShipManifest, QuantizedBlocksTravelAsBytesBesidePlainTensors) {
  auto groups = check_manifest(manifest({{"e", "Q8_0", {4, 64}, 0},
                                         {"l0.norm", "F32", {256}, 1},
                                         {"l0.q", "Q4_K", {2, 512}, 1},
                                         {"l0.v", "Q6_K", {1, 256}, 1}}),
                               1 << 20);
  ASSERT_TRUE(groups.ok()) << groups.status().to_string();
  ASSERT_EQ(groups->size(), 2u);
  EXPECT_EQ((*groups)[0][0].bytes, 8u * 34);
  EXPECT_EQ((*groups)[1][0].bytes, 1024u);
  EXPECT_EQ((*groups)[1][1].bytes, 4u * 144);
  EXPECT_EQ((*groups)[1][2].bytes, 210u);
  const DType layer[] = {DType::kF32, DType::kQ4_K, DType::kQ6_K, DType::kF16};
  EXPECT_EQ(payload_dtype(layer), DType::kU8);
  const DType plain[] = {DType::kBF16, DType::kBF16};
  EXPECT_EQ(payload_dtype(plain), DType::kBF16);
  const DType mixed[] = {DType::kBF16, DType::kF32};
  EXPECT_EQ(payload_dtype(mixed), std::nullopt);
  EXPECT_EQ(payload_dtype({}), std::nullopt);
}

TEST(ShipManifest, RefusesEveryMalformedEntry) {
  const uint64_t bound = 1 << 20;
  const std::vector<std::pair<json, std::string>> cases = {
      {json::array(), "expected {\"config\""},
      {json{{"tensors", json::array()}}, "expected {\"config\""},
      {manifest(json::array()), "no tensors"},
      {manifest({{"a", "BF16", {4}}}), "expected [name, dtype, [dims], group]"},
      {manifest({{"", "BF16", {4}, 0}}), "empty or repeated name"},
      {manifest({{"a", "BF16", {4}, 0}, {"a", "BF16", {4}, 0}}), "empty or repeated name"},
      {manifest({{"a", "Q4", {4}, 0}}), "unknown dtype"},
      {manifest({{"a", "BF16", {-4}, 0}}), "bad dims"},
      {manifest({{"a", "BF16", {uint64_t{1} << 62, 8}, 0}}), "bad dims"},  // element count overflows
      {manifest({{"a", "F32", {uint64_t{1} << 62}, 0}}), "bad dims for f32: a byte count within 64 bits"},
      {manifest({{"a", "BF16", {1 << 20}, 0}}), "larger than the stage's bound"},
      {manifest({{"a", "BF16", {4}, 1}}), "group 1 out of order"},
      {manifest({{"a", "BF16", {4}, 0}, {"b", "BF16", {4}, 1}, {"c", "BF16", {4}, 0}}), "group 0 out of order"},
      {manifest({{"a", "BF16", {4}, 0}, {"b", "F32", {4}, 0}}), "a group holds one dtype"},
      // Blocks: rows of whole blocks, and at least one dim to hold the rows.
      {manifest({{"a", "Q4_K", {2, 128}, 0}}), "bad dims for q4_k: rows of whole blocks of 256 elements"},
      {manifest({{"a", "Q8_0", {4, 48}, 0}}), "bad dims for q8_0: rows of whole blocks of 32 elements"},
      {manifest({{"a", "Q6_K", json::array(), 0}}), "bad dims for q6_k"},
      {manifest({{"a", "Q4_0", {uint64_t{1} << 62, 64}, 0}}), "bad dims"},            // element count overflows
      {manifest({{"a", "Q8_0", {uint64_t{31} << 54, 32}, 0}}), "bad dims for q8_0"},  // 34 x blocks overflows
      {manifest({{"a", "q4_k", {1, 256}, 0}}), "unknown dtype"},
      {manifest({{"a", "BF16", {300 << 10}, 0}, {"b", "BF16", {300 << 10}, 1}}), "exceed the stage's bound"},
  };
  for (const auto& [bad, needle] : cases) {
    SCOPED_TRACE(bad.dump());
    expect_refused(check_manifest(bad, bound).status(), needle);
  }
}

}  // namespace
}  // namespace tessera::pipeline
