// The request parser of POST /v1/completions and /v1/chat/completions: every
// field read into the request, and every wrong type or range refused with a 400
// that names the field (ApiError::param). Each refusal test fails if its check
// in serve/request.cpp is removed (the request would parse, or name no field).
#include "serve/request.h"

#include <gtest/gtest.h>

#include "pipeline/coordinator.h"
#include "serve/pipeline_backend.h"
#include "wire/control_frame.h"

namespace tessera::serve {
namespace {

constexpr int64_t kVocab = 1000;

CompletionRequest parse_ok(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
  auto parsed = parse_completion_request(body, endpoint, kVocab);
  if (auto* e = std::get_if<ApiError>(&parsed)) ADD_FAILURE() << body << ": " << e->message;
  return std::get_if<CompletionRequest>(&parsed) ? std::get<CompletionRequest>(parsed) : CompletionRequest{};
}

ApiError parse_error(const std::string& body, Endpoint endpoint = Endpoint::kCompletions) {
  auto parsed = parse_completion_request(body, endpoint, kVocab);
  if (!std::holds_alternative<ApiError>(parsed)) {
    ADD_FAILURE() << body << " was accepted";
    return {};
  }
  return std::get<ApiError>(parsed);
}

// Refused with 400 naming `param`, the message holding `needle`.
void expect_refused(const std::string& body, const std::string& param, const std::string& needle,
                    Endpoint endpoint = Endpoint::kCompletions) {
  const ApiError e = parse_error(body, endpoint);
  EXPECT_EQ(e.http_status, 400) << body;
  EXPECT_EQ(e.type, "invalid_request_error") << body;
  EXPECT_EQ(e.param, param) << body << ": " << e.message;
  EXPECT_NE(e.message.find(needle), std::string::npos) << body << ": " << e.message;
}

TEST(ServeRequestTest, ReadsEveryCompletionField) {
  const CompletionRequest r = parse_ok(R"({
    "model": "m", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
    "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
    "logit_bias": {"5": -100, "7": 2.5}, "seed": 42, "stop": ["\n", "END"], "n": 3, "stream": true,
    "stream_options": {"include_usage": true}, "user": "u1", "logprobs": false, "echo": false, "best_of": 1,
    "unknown_field": {"ignored": true}})");
  EXPECT_EQ(r.endpoint, Endpoint::kCompletions);
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "Hello");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_FLOAT_EQ(r.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.sampling.min_p, 0.05f);
  EXPECT_FLOAT_EQ(r.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_EQ(r.sampling.logit_bias, (std::map<int32_t, float>{{5, -100.0f}, {7, 2.5f}}));
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.user, "u1");
}

TEST(ServeRequestTest, LogprobsOfChatAndCompletions) {
  EXPECT_EQ(parse_ok(R"({"prompt": "x"})").logprobs, -1);
  EXPECT_EQ(parse_ok(R"({"prompt": "x", "logprobs": null})").logprobs, -1);
  EXPECT_EQ(parse_ok(R"({"prompt": "x", "logprobs": false})").logprobs, -1);
  EXPECT_EQ(parse_ok(R"({"prompt": "x", "logprobs": 0})").logprobs, 0);
  EXPECT_EQ(parse_ok(R"({"prompt": "x", "logprobs": 20})").logprobs, 20);
  expect_refused(R"({"prompt": "x", "logprobs": 21})", "logprobs", "[0, 20]");
  expect_refused(R"({"prompt": "x", "logprobs": true})", "logprobs", "must be an integer");
  expect_refused(R"({"prompt": "x", "top_logprobs": 2})", "top_logprobs", "completions take logprobs: N");
  const std::string messages = R"("messages": [{"role": "user", "content": "x"}])";
  auto chat = [&](const std::string& fields) { return "{" + messages + fields + "}"; };
  EXPECT_EQ(parse_ok(chat(""), Endpoint::kChat).logprobs, -1);
  EXPECT_EQ(parse_ok(chat(R"(, "logprobs": false)"), Endpoint::kChat).logprobs, -1);
  EXPECT_EQ(parse_ok(chat(R"(, "logprobs": true)"), Endpoint::kChat).logprobs, 0);
  EXPECT_EQ(parse_ok(chat(R"(, "logprobs": true, "top_logprobs": 5)"), Endpoint::kChat).logprobs, 5);
  expect_refused(chat(R"(, "top_logprobs": 5)"), "top_logprobs", "needs logprobs: true", Endpoint::kChat);
  expect_refused(chat(R"(, "logprobs": false, "top_logprobs": 5)"), "top_logprobs", "needs logprobs: true",
                 Endpoint::kChat);
  expect_refused(chat(R"(, "logprobs": true, "top_logprobs": 21)"), "top_logprobs", "[0, 20]", Endpoint::kChat);
  expect_refused(chat(R"(, "logprobs": 3)"), "logprobs", "must be a boolean", Endpoint::kChat);
}

TEST(ServeRequestTest, CacheSaltIsANonEmptyString) {
  EXPECT_EQ(parse_ok(R"({"prompt": "x", "cache_salt": "tenant-7"})").cache_salt, "tenant-7");
  EXPECT_EQ(parse_ok(R"({"prompt": "x"})").cache_salt, "");
  expect_refused(R"({"prompt": "x", "cache_salt": ""})", "cache_salt", "must not be empty");
  expect_refused(R"({"prompt": "x", "cache_salt": 7})", "cache_salt", "must be a string");
}

TEST(ServeRequestTest, IgnoreEosIsABoolean) {
  EXPECT_TRUE(parse_ok(R"({"prompt": "x", "ignore_eos": true})").ignore_eos);
  EXPECT_FALSE(parse_ok(R"({"prompt": "x"})").ignore_eos);
  expect_refused(R"({"prompt": "x", "ignore_eos": 1})", "ignore_eos", "must be a boolean");
}

TEST(ServeRequestTest, DefaultsWhenFieldsAreAbsentOrNull) {
  const CompletionRequest r = parse_ok(R"({"prompt": "x", "max_tokens": null, "stop": null, "seed": null})");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.seed_given);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.n, 1);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
}

TEST(ServeRequestTest, MaxCompletionTokensWinsOverMaxTokens) {
  EXPECT_EQ(parse_ok(R"({"prompt": "x", "max_tokens": 5, "max_completion_tokens": 9})").max_tokens, 9);
}

TEST(ServeRequestTest, TopKMinusOneIsOff) { EXPECT_EQ(parse_ok(R"({"prompt": "x", "top_k": -1})").sampling.top_k, 0); }

TEST(ServeRequestTest, NegativeSeedIsKeptAsItsBits) {
  EXPECT_EQ(parse_ok(R"({"prompt": "x", "seed": -1})").sampling.seed, ~uint64_t{0});
}

TEST(ServeRequestTest, PromptForms) {
  EXPECT_EQ(parse_ok(R"({"prompt": ["one string"]})").prompt, "one string");
  EXPECT_EQ(parse_ok(R"({"prompt": [3, 4, 999]})").prompt_ids, (std::vector<int32_t>{3, 4, 999}));
  expect_refused(R"({"prompt": ["a", "b"]})", "prompt", "several prompts");
  expect_refused(R"({"prompt": 5})", "prompt", "not number");
  expect_refused(R"({"prompt": {"a": 1}})", "prompt", "not object");
  expect_refused(R"({"prompt": ""})", "prompt", "must not be empty");
  expect_refused(R"({"prompt": []})", "prompt", "not array");
  expect_refused(R"({"prompt": [1, 1000]})", "prompt[1]", "[0, 999]");
  expect_refused(R"({"prompt": [1, -1]})", "prompt[1]", "[0, 999]");
  expect_refused(R"({"prompt": [1, 2.5]})", "prompt[1]", "an integer");
  expect_refused(R"({"max_tokens": 3})", "prompt", "prompt is required");
}

TEST(ServeRequestTest, MessagesAreNormalizedToStringContent) {
  const CompletionRequest r = parse_ok(R"({"messages": [
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": [{"type": "text", "text": "Hello, "}, {"type": "text", "text": "world"}]},
      {"role": "assistant", "content": null, "name": "bot"}]})",
                                       Endpoint::kChat);
  EXPECT_EQ(r.endpoint, Endpoint::kChat);
  const nlohmann::ordered_json want = nlohmann::ordered_json::parse(
      R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello, world"},
          {"role": "assistant", "content": ""}])");
  EXPECT_EQ(r.messages, want);
}

TEST(ServeRequestTest, MessagesOfTheWrongShapeAreRefused) {
  const auto chat = Endpoint::kChat;
  expect_refused(R"({"prompt": "x"})", "messages", "messages is required", chat);
  expect_refused(R"({"messages": "hi"})", "messages", "not string", chat);
  expect_refused(R"({"messages": []})", "messages", "must not be empty", chat);
  expect_refused(R"({"messages": [5]})", "messages[0]", "not number", chat);
  expect_refused(R"({"messages": [{"content": "x"}]})", "messages[0].role", "role must be a string", chat);
  expect_refused(R"({"messages": [{"role": 1, "content": "x"}]})", "messages[0].role", "role must be a string", chat);
  expect_refused(R"({"messages": [{"role": "user", "content": 7}]})", "messages[0].content", "not number", chat);
  expect_refused(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
                 "messages[0].content[0].type", "only text parts", chat);
  expect_refused(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]})",
                 "messages[0].content[0].text", "must be a string", chat);
  expect_refused(R"({"messages": [{"role": "user", "content": ["bare"]}]})", "messages[0].content[0]", "not string",
                 chat);
}

TEST(ServeRequestTest, WrongTypesNameTheField) {
  expect_refused(R"({"prompt": "x", "model": 3})", "model", "must be a string");
  expect_refused(R"({"prompt": "x", "max_tokens": "10"})", "max_tokens", "must be an integer, not string");
  expect_refused(R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens", "must be an integer");
  expect_refused(R"({"prompt": "x", "max_completion_tokens": true})", "max_completion_tokens", "an integer");
  expect_refused(R"({"prompt": "x", "temperature": "hot"})", "temperature", "must be a number, not string");
  expect_refused(R"({"prompt": "x", "temperature": true})", "temperature", "must be a number, not boolean");
  expect_refused(R"({"prompt": "x", "top_p": []})", "top_p", "must be a number");
  expect_refused(R"({"prompt": "x", "top_k": 0.5})", "top_k", "an integer");
  expect_refused(R"({"prompt": "x", "min_p": "0"})", "min_p", "a number");
  expect_refused(R"({"prompt": "x", "presence_penalty": {}})", "presence_penalty", "a number");
  expect_refused(R"({"prompt": "x", "frequency_penalty": "1"})", "frequency_penalty", "a number");
  expect_refused(R"({"prompt": "x", "repetition_penalty": null, "seed": "7"})", "seed", "an integer");
  expect_refused(R"({"prompt": "x", "repetition_penalty": "1"})", "repetition_penalty", "a number");
  expect_refused(R"({"prompt": "x", "logit_bias": [1, 2]})", "logit_bias", "an object");
  expect_refused(R"({"prompt": "x", "logit_bias": {"5": "up"}})", "logit_bias[5]", "a number");
  expect_refused(R"({"prompt": "x", "stop": 5})", "stop", "a string or an array of strings");
  expect_refused(R"({"prompt": "x", "stop": ["a", 5]})", "stop[1]", "must be a string");
  expect_refused(R"({"prompt": "x", "n": "1"})", "n", "an integer");
  expect_refused(R"({"prompt": "x", "stream": "yes"})", "stream", "a boolean");
  expect_refused(R"({"prompt": "x", "stream": true, "stream_options": true})", "stream_options", "an object");
  expect_refused(R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
                 "stream_options.include_usage", "a boolean");
  expect_refused(R"({"prompt": "x", "user": 12})", "user", "a string");
}

TEST(ServeRequestTest, OutOfRangeValuesNameTheField) {
  expect_refused(R"({"prompt": "x", "max_tokens": 0})", "max_tokens", "[1, ");
  expect_refused(R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens", "out of range");
  expect_refused(R"({"prompt": "x", "temperature": -0.1})", "temperature", "[0, 2]");
  expect_refused(R"({"prompt": "x", "temperature": 2.5})", "temperature", "[0, 2]");
  expect_refused(R"({"prompt": "x", "top_p": 0})", "top_p", "(0, 1]");
  expect_refused(R"({"prompt": "x", "top_p": 1.5})", "top_p", "(0, 1]");
  expect_refused(R"({"prompt": "x", "top_k": -2})", "top_k", "[-1, 1000]");
  expect_refused(R"({"prompt": "x", "min_p": 1.01})", "min_p", "[0, 1]");
  expect_refused(R"({"prompt": "x", "presence_penalty": 3})", "presence_penalty", "[-2, 2]");
  expect_refused(R"({"prompt": "x", "frequency_penalty": -2.5})", "frequency_penalty", "[-2, 2]");
  expect_refused(R"({"prompt": "x", "repetition_penalty": 0})", "repetition_penalty", "(0, 10]");
  expect_refused(R"({"prompt": "x", "logit_bias": {"1000": 1}})", "logit_bias", "not a token id in [0, 1000)");
  expect_refused(R"({"prompt": "x", "logit_bias": {"-1": 1}})", "logit_bias", "not a token id");
  expect_refused(R"({"prompt": "x", "logit_bias": {"5x": 1}})", "logit_bias", "not a token id");
  expect_refused(R"({"prompt": "x", "logit_bias": {" 5": 1}})", "logit_bias", "not a token id");
  expect_refused(R"({"prompt": "x", "logit_bias": {"+5": 1}})", "logit_bias", "not a token id");
  expect_refused(R"({"prompt": "x", "logit_bias": {"99999999999999999999": 1}})", "logit_bias", "not a token id");
  expect_refused(R"({"prompt": "x", "logit_bias": {"5": 101}})", "logit_bias", "[-100, 100]");
  expect_refused(R"({"prompt": "x", "stop": ""})", "stop", "must not be empty");
  expect_refused(R"({"prompt": "x", "stop": ["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]})",
                 "stop", "at most 16");
  expect_refused(R"({"prompt": "x", "n": 0})", "n", "[1, 16]");
  expect_refused(R"({"prompt": "x", "n": 17})", "n", "[1, 16]");
}

TEST(ServeRequestTest, UnsupportedFieldsAreRefusedNotIgnored) {
  expect_refused(R"({"prompt": "x", "echo": true})", "echo", "not supported");
  expect_refused(R"({"prompt": "x", "best_of": 3})", "best_of", "not supported");
  expect_refused(R"({"prompt": "x", "suffix": "y"})", "suffix", "not supported");
  expect_refused(R"({"messages": [{"role": "user", "content": "x"}], "tools": []})", "tools", "not supported",
                 Endpoint::kChat);
  expect_refused(R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object"}})",
                 "response_format", "not supported", Endpoint::kChat);
}

TEST(ServeRequestTest, StreamOptionsNeedStream) {
  expect_refused(R"({"prompt": "x", "stream_options": {"include_usage": true}})", "stream_options",
                 "only allowed with stream: true");
}

TEST(ServeRequestTest, MalformedBodies) {
  for (const char* body : {"", "{", "not json", "{\"prompt\": \"x\",}", "\xff\xfe"}) {
    const ApiError e = parse_error(body);
    EXPECT_EQ(e.http_status, 400);
    EXPECT_NE(e.message.find("not valid JSON"), std::string::npos) << e.message;
    EXPECT_TRUE(e.param.empty());
  }
  expect_refused("[1, 2]", "", "must be a JSON object, not array");
  expect_refused("\"text\"", "", "must be a JSON object, not string");
  const std::string deep = std::string(1000, '[') + std::string(1000, ']');
  expect_refused("{\"prompt\": " + deep + "}", "", "nested deeper than");
}

TEST(ServeRequestTest, TheFirstErrorIsReported) {
  expect_refused(R"({"prompt": "x", "temperature": "a", "top_p": "b"})", "temperature", "temperature");
}

TEST(ServeRequestTest, ApiErrorJsonHasTheOpenAiShape) {
  const ApiError e = ApiError::invalid("bad thing", "temperature");
  EXPECT_EQ(e.to_json(), nlohmann::json::parse(R"({"error": {"message": "bad thing",
      "type": "invalid_request_error", "param": "temperature", "code": null}})"));
  EXPECT_EQ(ApiError::from_status(Status::overloaded("full")).http_status, 503);
  EXPECT_EQ(ApiError::from_status(Status::overloaded("full")).retry_after_seconds(), 1);
  EXPECT_EQ(ApiError::from_status(Status::invalid_input("x")).retry_after_seconds(), 0);
  EXPECT_EQ(ApiError::from_status(Status::not_found("x")).http_status, 404);
  EXPECT_EQ(ApiError::from_status(Status::internal("x")).http_status, 500);
  // A pipeline stage that is gone: come back once it is (serve --pipeline).
  const ApiError gone = ApiError::from_status(Status::disconnected("stage node2 is gone"));
  EXPECT_EQ(gone.http_status, 503);
  EXPECT_EQ(gone.retry_after_seconds(), 1);
  EXPECT_EQ(gone.type, "service_unavailable_error");
  // One that stays silent past its timeout: the gateway's timeout, also worth a retry.
  const ApiError silent =
      ApiError::from_status(Status::disconnected("stage node2 is gone: silent for 3000 ms", Cause::kTimedOut));
  EXPECT_EQ(silent.http_status, 504);
  EXPECT_EQ(silent.retry_after_seconds(), 1);
  EXPECT_EQ(silent.type, "timeout_error");
  EXPECT_EQ(silent.code, "timeout");
}

// serve --pipeline: a stage's error reaches the client by the kind the stage put
// on the wire (wire::error_message), through the coordinator
// (pipeline::stage_failure) and the server (pipeline_failure): no room 503, gone
// 503, silent 504, anything else 500 (never a 4xx: the client's request was
// checked). Each mapping was reverted in turn (stage_failure keeping the
// stage's kind, or making overloaded/disconnected internal, or dropping the
// cause; pipeline_failure passing kinds through) and a case here failed.
TEST(ServeRequestTest, AStagesErrorReachesTheClientByItsKind) {
  struct Case {
    Status reported;
    int http_status;
    std::string type;
  };
  const Case cases[] = {
      {Status::overloaded("1 sequences are open, the most this engine runs"), 503, "overloaded_error"},
      {Status::disconnected("sending to the next stage node3: connection reset"), 503, "service_unavailable_error"},
      {Status::disconnected("next stage node3 silent", Cause::kTimedOut), 504, "timeout_error"},
      {Status::invalid_input("setup: layers [2, 4) are not the coordinator's checkpoint"), 500, "internal_error"},
      {Status::not_found("no such checkpoint"), 500, "internal_error"},
      {Status::unsupported("no such mode"), 500, "internal_error"},
      {Status::internal("a bug"), 500, "internal_error"},
  };
  const std::string who = "stage node2 (layers [2, 4))";
  for (const Case& c : cases) {
    const nlohmann::json message = wire::error_message("node2", c.reported);
    const Status failure = pipeline::stage_failure(who, message);
    EXPECT_NE(failure.kind(), ErrorKind::kInvalidInput) << failure.to_string();
    const ApiError e = ApiError::from_status(pipeline_failure(failure));
    EXPECT_EQ(e.http_status, c.http_status) << c.reported.to_string();
    EXPECT_EQ(e.type, c.type) << c.reported.to_string();
    EXPECT_NE(e.message.find(who), std::string::npos) << e.message;
    EXPECT_NE(e.message.find(c.reported.message()), std::string::npos) << e.message;
    EXPECT_EQ(e.retry_after_seconds(), c.http_status == 500 ? 0 : 1) << c.reported.to_string();
    // The coordinator alone: the stage's kind where it tells the caller what to do, else internal.
    const bool kept = c.reported.kind() == ErrorKind::kOverloaded || c.reported.kind() == ErrorKind::kDisconnected;
    EXPECT_EQ(failure.kind(), kept ? c.reported.kind() : ErrorKind::kInternal) << c.reported.to_string();
    EXPECT_EQ(failure.cause(), c.reported.cause()) << c.reported.to_string();
  }
  // An error message the coordinator cannot read is the stage's protocol break: 500.
  nlohmann::json unreadable = wire::error_message("node2", Status::overloaded("full"));
  unreadable["kind"] = "exploded";
  EXPECT_EQ(ApiError::from_status(pipeline::stage_failure(who, unreadable)).http_status, 500);
  // The coordinator's own failures in setting up keep no 4xx either.
  EXPECT_EQ(pipeline_failure(Status::not_found("--model: no config.json")).kind(), ErrorKind::kInternal);
  EXPECT_EQ(pipeline_failure(Status::invalid_input("--ship-weights: a bad tensor")).kind(), ErrorKind::kInternal);
  EXPECT_EQ(pipeline_failure(Status::overloaded("full")).kind(), ErrorKind::kOverloaded);
  EXPECT_EQ(pipeline_failure(Status::disconnected("x", Cause::kTimedOut)).cause(), Cause::kTimedOut);
}

TEST(ServeRequestTest, TokenizeAndDetokenize) {
  auto t = parse_tokenize_request(R"({"prompt": "hi", "add_special_tokens": false})");
  ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(t));
  EXPECT_EQ(std::get<TokenizeRequest>(t).prompt, "hi");
  EXPECT_FALSE(std::get<TokenizeRequest>(t).add_special_tokens);
  auto m = parse_tokenize_request(R"({"messages": [{"role": "user", "content": "hi"}]})");
  ASSERT_TRUE(std::holds_alternative<TokenizeRequest>(m));
  EXPECT_FALSE(std::get<TokenizeRequest>(m).prompt.has_value());
  EXPECT_EQ(std::get<TokenizeRequest>(m).messages.size(), 1u);
  auto bad = parse_tokenize_request(R"({"prompt": 3})");
  ASSERT_TRUE(std::holds_alternative<ApiError>(bad));
  EXPECT_EQ(std::get<ApiError>(bad).param, "prompt");
  ASSERT_TRUE(std::holds_alternative<ApiError>(parse_tokenize_request(R"({"add_special_tokens": true})")));
  auto flag = parse_tokenize_request(R"({"prompt": "x", "add_special_tokens": "no"})");
  ASSERT_TRUE(std::holds_alternative<ApiError>(flag));
  EXPECT_EQ(std::get<ApiError>(flag).param, "add_special_tokens");

  auto ids = parse_detokenize_request(R"({"tokens": [1, 2, 999]})", kVocab);
  ASSERT_TRUE(std::holds_alternative<std::vector<int32_t>>(ids));
  EXPECT_EQ(std::get<std::vector<int32_t>>(ids), (std::vector<int32_t>{1, 2, 999}));
  for (const auto& [body, param] :
       std::vector<std::pair<std::string, std::string>>{{R"({})", "tokens"},
                                                        {R"({"tokens": "1"})", "tokens"},
                                                        {R"({"tokens": [1, 1000]})", "tokens[1]"},
                                                        {R"({"tokens": [1, "2"]})", "tokens[1]"}}) {
    auto e = parse_detokenize_request(body, kVocab);
    ASSERT_TRUE(std::holds_alternative<ApiError>(e)) << body;
    EXPECT_EQ(std::get<ApiError>(e).param, param) << body;
  }
}

}  // namespace
}  // namespace tessera::serve
