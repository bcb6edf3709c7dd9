// tessera serve end to end over loopback, on the shipped model
// (models/tessera-tiny), with a Beast client: greedy answers equal to what
// `tessera generate` prints for the same prompt (the reference is the CLI's
// own generation path, run as a separate process), SSE framing, stop strings,
// errors with their codes, a client that leaves (its KV blocks return to the
// pool), a full queue (429) and a prompt the whole KV pool cannot hold (400),
// several requests on one keep-alive connection, the API key, and SIGTERM on
// the real binary.
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <fstream>
#include <future>
#include <regex>
#include <thread>

#include "serve/http_client.h"
#include "serve/server.h"
#include "serve/test_server.h"
#include "support/run_tessera.h"

extern char** environ;

namespace tessera::serve {
namespace {

using namespace tessera::testing;
using Json = nlohmann::json;

// What `tessera generate` prints for this prompt, greedy (its trailing newline removed).
std::string generate_text(const std::string& prompt, int tokens, const std::string& extra = "") {
  const CommandResult run = run_tessera("generate --model " + kModel + " --kv-memory 16MiB --prompt '" + prompt +
                                        "' -n " + std::to_string(tokens) + " " + extra);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(run.out.empty());
  return run.out.substr(0, run.out.size() - 1);
}

// The text of a streamed answer, checking the framing on the way: every event a chunk of `object`
// with one choice until the one with a finish_reason, then (with usage) a chunk with choices: [],
// then [DONE] last.
struct Streamed {
  std::string text;
  std::string finish_reason;
  Json usage;
};
Streamed read_stream(const HttpReply& reply, bool chat, bool with_usage) {
  Streamed s;
  EXPECT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.headers.at("Content-Type"), "text/event-stream");
  const std::vector<std::string> events = sse_data(reply.body);
  EXPECT_GE(events.size(), with_usage ? 3u : 2u);
  if (events.empty()) return s;
  EXPECT_EQ(events.back(), "[DONE]");
  std::string id;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const Json chunk = Json::parse(events[i]);
    EXPECT_EQ(chunk["object"], chat ? "chat.completion.chunk" : "text_completion");
    if (id.empty()) id = chunk["id"];
    EXPECT_EQ(chunk["id"], id) << "every chunk carries the same id";
    EXPECT_EQ(chunk["model"], "tessera-tiny");
    if (chunk["choices"].empty()) {
      EXPECT_TRUE(with_usage);
      EXPECT_EQ(i + 2, events.size()) << "the usage chunk comes last, before [DONE]";
      s.usage = chunk["usage"];
      continue;
    }
    EXPECT_TRUE(s.finish_reason.empty()) << "a chunk after the one with finish_reason";
    const Json& choice = chunk["choices"][0];
    if (chat) {
      if (i == 0) {
        EXPECT_EQ(choice["delta"]["role"], "assistant");
      }
      if (choice["delta"].contains("content")) s.text += choice["delta"]["content"].get<std::string>();
    } else {
      s.text += choice["text"].get<std::string>();
    }
    if (!choice["finish_reason"].is_null()) s.finish_reason = choice["finish_reason"];
  }
  EXPECT_FALSE(s.finish_reason.empty()) << "no chunk had a finish_reason";
  EXPECT_EQ(with_usage, !s.usage.is_null());
  return s;
}

class ServeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = start_server(test_options()).release(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static uint16_t port() { return server_->port(); }
  static Server* server_;
};
Server* ServeTest::server_ = nullptr;

TEST_F(ServeTest, HealthModelsAndMetrics) {
  const HttpReply health = get(port(), "/health");
  EXPECT_EQ(health.status, 200);
  const HttpReply models = get(port(), "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.json()["data"][0]["id"], "tessera-tiny");
  EXPECT_EQ(models.json()["data"][0]["max_model_len"], 2048);
  // A Unix time, as OpenAI and vLLM answer (clients show it as a date): not 0, 1970.
  EXPECT_GT(models.json()["data"][0]["created"].get<int64_t>(), 1'700'000'000) << models.body;
  const HttpReply metrics = get(port(), "/metrics");
  ASSERT_EQ(metrics.status, 200);
  // vLLM's label: tessera:num_requests_waiting{model_name="tessera-tiny"} 0
  EXPECT_EQ(metric_value(metrics.body, "num_requests_waiting"), 0) << metrics.body;
  EXPECT_NE(metrics.body.find("# TYPE tessera:generation_tokens_total counter"), std::string::npos);
}

TEST_F(ServeTest, GreedyCompletionEqualsGenerate) {
  const std::string want = generate_text("Once upon a time", 24);
  const HttpReply reply = post(port(), "/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 24})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json body = reply.json();
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "tessera-tiny");
  EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(body["choices"][0]["text"], want);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 24);
  EXPECT_EQ(body["usage"]["total_tokens"],
            body["usage"]["prompt_tokens"].get<int>() + body["usage"]["completion_tokens"].get<int>());
}

TEST_F(ServeTest, GreedyChatEqualsGenerateChat) {
  const std::string want = generate_text("Tell me about the sea.", 20, "--chat");
  const HttpReply reply = post(port(), "/v1/chat/completions",
                               R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Tell me "},
                                   {"type": "text", "text": "about the sea."}]}], "max_tokens": 20})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  const Json body = reply.json();
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], want);
}

// vLLM's ignore_eos: an end-of-text token (forced here by its bias) does not end the answer.
TEST_F(ServeTest, IgnoreEosRunsPastTheEndOfTextToMaxTokens) {
  const std::string body = R"({"prompt": "Once upon a time", "max_tokens": 5, "logit_bias": {"1": 100})";
  const Json ends = post(port(), "/v1/completions", body + "}").json();
  EXPECT_EQ(ends["choices"][0]["finish_reason"], "stop") << ends;
  EXPECT_EQ(ends["usage"]["completion_tokens"], 0);
  const Json runs = post(port(), "/v1/completions", body + R"(, "ignore_eos": true})").json();
  EXPECT_EQ(runs["choices"][0]["finish_reason"], "length") << runs;
  EXPECT_EQ(runs["usage"]["completion_tokens"], 5);
  EXPECT_EQ(runs["choices"][0]["text"], "") << "the end-of-text tokens are special: not in the text";
}

TEST_F(ServeTest, StreamedCompletionEqualsWholeWithUsage) {
  const HttpReply whole = post(port(), "/v1/completions", R"({"prompt": "The river", "max_tokens": 30})");
  ASSERT_EQ(whole.status, 200);
  const HttpReply streamed =
      post(port(), "/v1/completions",
           R"({"prompt": "The river", "max_tokens": 30, "stream": true, "stream_options": {"include_usage": true}})");
  const Streamed s = read_stream(streamed, /*chat=*/false, /*with_usage=*/true);
  EXPECT_EQ(s.text, whole.json()["choices"][0]["text"]);
  EXPECT_EQ(s.finish_reason, whole.json()["choices"][0]["finish_reason"]);
  EXPECT_EQ(s.usage, whole.json()["usage"]);
}

TEST_F(ServeTest, StreamedChatEqualsGenerateChat) {
  const std::string want = generate_text("Hello", 24, "--chat");
  const HttpReply streamed = post(port(), "/v1/chat/completions",
                                  R"({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 24,
                                      "stream": true})");
  const Streamed s = read_stream(streamed, /*chat=*/true, /*with_usage=*/false);
  EXPECT_EQ(s.text, want);
  EXPECT_EQ(s.finish_reason, "length");
}

TEST_F(ServeTest, StopStringEndsTheTextAndNeverLeaks) {
  const std::string full = generate_text("Once upon a time", 24);
  // A word of the greedy text after its start, with its leading space: the text
  // itself differs between CPUs (AVX-512 BF16 and AVX2 kernels round differently).
  const size_t from = full.find(' ', full.size() / 3);
  ASSERT_NE(from, std::string::npos) << full;
  const size_t end = full.find(' ', from + 1);
  const std::string stop = full.substr(from, end == std::string::npos ? end : end - from);
  const size_t at = full.find(stop);
  Json request = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"stop", Json::array({stop})}};
  const HttpReply whole = post(port(), "/v1/completions", request.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  EXPECT_EQ(whole.json()["choices"][0]["text"], full.substr(0, at));
  EXPECT_EQ(whole.json()["choices"][0]["finish_reason"], "stop");
  request["stream"] = true;
  const HttpReply streamed = post(port(), "/v1/completions", request.dump());
  const Streamed s = read_stream(streamed, false, false);
  EXPECT_EQ(s.text, full.substr(0, at));
  EXPECT_EQ(s.finish_reason, "stop");
}

// The answer's text is made on the HTTP side from the tokens the inference
// thread sends, and only the inference thread sees where a stop string ends a
// request: each choice's text must stop at the same token, streamed or whole,
// its logprobs cover every token generated (the stop string's included, as
// completion_tokens counts them) and its chunks' logprobs join to the whole
// answer's. Fails with the HTTP side's text made without the stop strings
// (tried: the stop string leaks into the text).
TEST_F(ServeTest, StopStringsWithLogprobsAndNChoicesStopWhereTheLoopStops) {
  Json request = {{"prompt", "The queen"}, {"max_tokens", 24}, {"temperature", 0.9}, {"seed", 11}, {"n", 2},
                  {"logprobs", 2}};
  const Json free = post(port(), "/v1/completions", request.dump()).json();
  const std::string first = free["choices"][0]["text"];
  const size_t from = first.find(' ', first.size() / 3);
  ASSERT_NE(from, std::string::npos) << first;
  const size_t end = first.find(' ', from + 1);
  const std::string stop = first.substr(from, end == std::string::npos ? end : end - from);
  request["stop"] = Json::array({stop});
  const HttpReply whole = post(port(), "/v1/completions", request.dump());
  ASSERT_EQ(whole.status, 200) << whole.body;
  const Json answer = whole.json();
  const Json& choices = answer["choices"];
  ASSERT_EQ(choices.size(), 2u);
  EXPECT_EQ(choices[0]["text"], first.substr(0, first.find(stop)));
  EXPECT_EQ(choices[0]["finish_reason"], "stop");
  size_t tokens = 0;
  for (const Json& choice : choices) {
    const Json& lp = choice["logprobs"];
    tokens += lp["tokens"].size();
    std::string joined;
    for (const Json& token : lp["tokens"]) joined += token.get<std::string>();
    const std::string text = choice["text"];
    EXPECT_TRUE(joined.starts_with(text)) << joined << " | " << text;
    if (choice["finish_reason"] == "stop") {
      EXPECT_NE(joined.find(stop, text.size()), std::string::npos) << "the stop string's tokens have logprobs";
    }
    EXPECT_EQ(text.find(stop), std::string::npos) << text;
  }
  EXPECT_EQ(answer["usage"]["completion_tokens"], tokens);

  request["stream"] = true;
  std::vector<std::string> texts(2);
  std::vector<Json> streamed(2, Json{{"tokens", Json::array()},
                                     {"token_logprobs", Json::array()},
                                     {"top_logprobs", Json::array()},
                                     {"text_offset", Json::array()}});
  std::vector<std::string> finishes(2);
  for (const std::string& data : sse_data(post(port(), "/v1/completions", request.dump()).body)) {
    if (data == "[DONE]") continue;
    const Json chunk = Json::parse(data)["choices"][0];
    const size_t i = chunk["index"];
    texts[i] += chunk["text"].get<std::string>();
    if (!chunk["finish_reason"].is_null()) finishes[i] = chunk["finish_reason"];
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const Json& v : chunk["logprobs"][key]) streamed[i][key].push_back(v);
  }
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(texts[i], choices[i]["text"]) << "choice " << i;
    EXPECT_EQ(finishes[i], choices[i]["finish_reason"]) << "choice " << i;
    EXPECT_EQ(streamed[i], choices[i]["logprobs"]) << "choice " << i;
  }
}

TEST_F(ServeTest, SeededSamplingIsTheSameAloneAndAmongOthers) {
  auto body = [](int seed) {
    return R"({"prompt": "In the morning", "max_tokens": 20, "temperature": 1.0, "top_p": 0.9, "seed": )" +
           std::to_string(seed) + "}";
  };
  constexpr int kRequests = 16;
  std::vector<std::string> alone;
  for (int seed = 1; seed <= kRequests; ++seed) alone.push_back(post(port(), "/v1/completions", body(seed)).body);
  std::vector<std::future<HttpReply>> together;
  for (int seed = 1; seed <= kRequests; ++seed)
    together.push_back(
        std::async(std::launch::async, [&, seed] { return post(port(), "/v1/completions", body(seed)); }));
  for (int i = 0; i < kRequests; ++i) {
    const HttpReply r = together[i].get();
    ASSERT_EQ(r.status, 200) << r.body;
    EXPECT_EQ(r.json()["choices"][0]["text"], Json::parse(alone[i])["choices"][0]["text"]) << "seed " << i + 1;
  }
  EXPECT_NE(Json::parse(alone[0])["choices"][0]["text"], Json::parse(alone[1])["choices"][0]["text"]);
  EXPECT_GE(server_->loop().stats().largest_step.load(), 2u) << "the requests never shared a forward pass";
}

TEST_F(ServeTest, EachOfNChoicesIsTheRequestWithItsSeedAlone) {
  auto body = [](int seed, int n, bool stream) {
    return R"({"prompt": "The king", "max_tokens": 16, "temperature": 0.8, "seed": )" + std::to_string(seed) +
           R"(, "n": )" + std::to_string(n) + R"(, "stream": )" + (stream ? "true" : "false") + "}";
  };
  const HttpReply three = post(port(), "/v1/completions", body(7, 3, false));
  ASSERT_EQ(three.status, 200) << three.body;
  const Json choices = three.json()["choices"];
  ASSERT_EQ(choices.size(), 3u);
  int64_t completion_tokens = 0;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(choices[i]["index"], i);
    const Json alone = post(port(), "/v1/completions", body(7 + i, 1, false)).json();
    EXPECT_EQ(choices[i]["text"], alone["choices"][0]["text"]) << "choice " << i;
    EXPECT_EQ(choices[i]["finish_reason"], alone["choices"][0]["finish_reason"]);
    completion_tokens += alone["usage"]["completion_tokens"].get<int64_t>();
  }
  EXPECT_EQ(three.json()["usage"]["completion_tokens"], completion_tokens);
  EXPECT_NE(choices[0]["text"], choices[1]["text"]) << "the choices sample with different seeds";

  // Streamed: each index's pieces join to that choice's text, and each index finishes once.
  const HttpReply streamed = post(port(), "/v1/completions", body(7, 3, true));
  ASSERT_EQ(streamed.status, 200);
  std::vector<std::string> texts(3);
  std::vector<int> finishes(3);
  for (const std::string& data : sse_data(streamed.body)) {
    if (data == "[DONE]") continue;
    const Json chunk = Json::parse(data);
    ASSERT_EQ(chunk["choices"].size(), 1u);
    const size_t i = chunk["choices"][0]["index"];
    ASSERT_LT(i, 3u);
    EXPECT_EQ(finishes[i], 0) << "a chunk of choice " << i << " after its finish";
    texts[i] += chunk["choices"][0]["text"].get<std::string>();
    if (!chunk["choices"][0]["finish_reason"].is_null()) ++finishes[i];
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(texts[i], choices[i]["text"]) << "choice " << i;
    EXPECT_EQ(finishes[i], 1);
  }
}

TEST_F(ServeTest, ExpectContinueGetsA100BeforeTheBody) {
  net::io_context io;
  tcp::socket socket = connect_to(io, port());
  const std::string body = R"({"prompt": "Once", "max_tokens": 3})";
  net::write(socket, net::buffer("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                                 "Content-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n"));
  beast::flat_buffer buffer;
  http::response<http::empty_body> interim;
  bool answered = false;
  http::async_read(socket, buffer, interim, [&](beast::error_code ec, size_t) { answered = !ec; });
  io.run_for(std::chrono::seconds(30));  // a server that never sends the 100 fails here, bounded
  ASSERT_TRUE(answered) << "no interim response to Expect: 100-continue";
  EXPECT_EQ(interim.result(), http::status::continue_);
  net::write(socket, net::buffer(body));
  http::response<http::string_body> answer;
  http::read(socket, buffer, answer);
  EXPECT_EQ(answer.result(), http::status::ok) << answer.body();
}

TEST_F(ServeTest, TokenizeAndDetokenizeRoundTrip) {
  const HttpReply t = post(port(), "/tokenize", R"({"prompt": "Hello world", "add_special_tokens": false})");
  ASSERT_EQ(t.status, 200) << t.body;
  const Json ids = t.json()["tokens"];
  EXPECT_EQ(t.json()["count"], ids.size());
  const HttpReply d = post(port(), "/detokenize", Json{{"tokens", ids}}.dump());
  ASSERT_EQ(d.status, 200) << d.body;
  EXPECT_EQ(d.json()["prompt"], "Hello world");
}

// An error in the OpenAI shape, with this status and param.
void expect_error(const HttpReply& reply, int status, const std::string& param, const std::string& needle) {
  EXPECT_EQ(reply.status, status) << reply.body;
  const Json body = Json::parse(reply.body);
  ASSERT_TRUE(body.contains("error")) << reply.body;
  const Json& e = body["error"];
  for (const char* key : {"message", "type", "param", "code"}) EXPECT_TRUE(e.contains(key)) << key;
  if (param.empty()) {
    EXPECT_TRUE(e["param"].is_null()) << reply.body;
  } else {
    EXPECT_EQ(e["param"], param) << reply.body;
  }
  EXPECT_NE(e["message"].get<std::string>().find(needle), std::string::npos) << reply.body;
}

TEST_F(ServeTest, ErrorsHaveTheirCodes) {
  expect_error(post(port(), "/v1/completions", "{\"prompt\": "), 400, "", "not valid JSON");
  expect_error(post(port(), "/v1/chat/completions", R"({"messages": [{"role": "user", "content": "x"}],
      "temperature": "warm"})"),
               400, "temperature", "must be a number");
  std::string long_prompt;
  for (int i = 0; i < 2100; ++i) long_prompt += " hello";
  const HttpReply too_long = post(port(), "/v1/completions", Json{{"prompt", long_prompt}}.dump());
  expect_error(too_long, 400, "prompt", "the model's context is 2048");
  EXPECT_EQ(Json::parse(too_long.body)["error"]["code"], "context_length_exceeded");
  // A prompt and max_tokens past the context are refused, not cut short (as vLLM does).
  const HttpReply past = post(port(), "/v1/completions", R"({"prompt": "x", "max_tokens": 2100})");
  expect_error(past, 400, "max_tokens", "max_tokens 2100 need 2101 positions; the model's context is 2048");
  EXPECT_EQ(Json::parse(past.body)["error"]["code"], "context_length_exceeded");
  expect_error(get(port(), "/v1/nothing"), 404, "", "no route /v1/nothing");
  const HttpReply wrong_method = get(port(), "/v1/completions");
  expect_error(wrong_method, 405, "", "GET is not allowed");
  EXPECT_EQ(wrong_method.headers.at("Allow"), "POST");
  expect_error(post(port(), "/v1/completions", std::string(2 << 20, ' ')), 413, "", "over the limit of 1048576");
  // The server is still up, and answers.
  EXPECT_EQ(post(port(), "/v1/completions", R"({"prompt": "x", "max_tokens": 2})").status, 200);
}

// A client that closes its connection mid-request; `stream` picks SSE (the session may see
// the close as a failed write) or one JSON answer (only the socket watch sees it).
void leave_mid_request(Server& server, bool stream) {
  const LoopStats& stats = server.loop().stats();
  const uint64_t cancelled = stats.cancelled.load();
  const int64_t total = stats.kv_blocks_total.load();
  {
    net::io_context io;
    tcp::socket socket = connect_to(io, server.port());
    const std::string body = std::string(R"({"prompt": "Once", "max_tokens": 2000, "logit_bias": {"1": -100}, )") +
                             R"("stream": )" + (stream ? "true}" : "false}");
    const std::string request =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        "Content-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    net::write(socket, net::buffer(request));
    if (stream) {
      std::string seen;
      char buffer[4096];
      while (seen.find("data: ") == std::string::npos) seen.append(buffer, socket.read_some(net::buffer(buffer)));
    }
    ASSERT_TRUE(eventually([&] { return stats.running.load() == 1 && stats.kv_blocks_free.load() < total; }))
        << "the request runs and holds blocks";
  }  // the socket closes mid-request
  EXPECT_TRUE(eventually([&] { return stats.cancelled.load() == cancelled + 1; }));
  EXPECT_TRUE(eventually([&] { return stats.kv_blocks_free.load() == total && stats.running.load() == 0; }));
}

// Three requests on one keep-alive connection (a completion, a streamed one,
// then /health), each answered in turn on the same socket, the answers equal to
// those of a connection per request.
TEST_F(ServeTest, SeveralRequestsOnOneKeepAliveConnection) {
  const std::string whole = R"({"prompt": "Once upon a time", "max_tokens": 8})";
  const std::string streamed = R"({"prompt": "It is a truth", "max_tokens": 8, "stream": true})";
  const HttpReply whole_alone = post(port(), "/v1/completions", whole);
  const HttpReply streamed_alone = post(port(), "/v1/completions", streamed);
  ASSERT_EQ(whole_alone.status, 200) << whole_alone.body;

  net::io_context io;
  tcp::socket socket = connect_to(io, port());
  beast::flat_buffer buffer;
  auto exchange = [&](http::verb verb, const std::string& target, const std::string& body) {
    http::request<http::string_body> request{verb, target, 11};
    request.set(http::field::host, "127.0.0.1");
    request.set(http::field::content_type, "application/json");
    request.keep_alive(true);
    request.body() = body;
    request.prepare_payload();
    http::write(socket, request);
    http::response_parser<http::string_body> parser;
    http::read(socket, buffer, parser);
    EXPECT_TRUE(parser.get().keep_alive()) << target;
    return parser.release();
  };
  const auto first = exchange(http::verb::post, "/v1/completions", whole);
  const auto second = exchange(http::verb::post, "/v1/completions", streamed);
  const auto third = exchange(http::verb::get, "/health", "");
  EXPECT_EQ(first.result_int(), 200u);
  EXPECT_EQ(Json::parse(first.body())["choices"][0]["text"], whole_alone.json()["choices"][0]["text"]);
  EXPECT_EQ(second.result_int(), 200u);
  EXPECT_EQ(read_stream({200, {{"Content-Type", "text/event-stream"}}, second.body()}, false, false).text,
            read_stream(streamed_alone, false, false).text);
  EXPECT_EQ(third.result_int(), 200u);
}

TEST_F(ServeTest, AStreamingClientThatLeavesIsCancelledAndItsBlocksReturn) { leave_mid_request(*server_, true); }

TEST_F(ServeTest, AWaitingClientThatLeavesIsCancelledAndItsBlocksReturn) { leave_mid_request(*server_, false); }

TEST(ServeLimitsTest, FullQueueGets429AndAPromptLargerThanTheKvPoolGets400) {
  ServerOptions options = test_options();
  options.loop.engine.scheduler.max_sequences = 1;  // one running
  options.loop.max_waiting = 1;                     // one waiting
  options.loop.engine.forward.kv_memory = uint64_t{256} << 10;
  const auto server = start_server(options);
  ASSERT_TRUE(server->loop().ready());
  const LoopStats& stats = server->loop().stats();

  // A prompt that needs more KV blocks than the whole pool holds: waiting would not help.
  std::string long_prompt;
  for (int i = 0; i < 400; ++i) long_prompt += " hello";
  const HttpReply too_big = post(server->port(), "/v1/completions", Json{{"prompt", long_prompt}}.dump());
  expect_error(too_big, 400, "prompt", "the KV pool holds 128 positions (--kv-memory)");
  EXPECT_EQ(too_big.headers.count("Retry-After"), 0u);

  net::io_context io;
  const std::string body = R"({"prompt": "Once", "max_tokens": 100, "stream": true, "logit_bias": {"1": -100}})";
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  tcp::socket running = connect_to(io, server->port());
  net::write(running, net::buffer(request));
  {  // its first event: it runs (and the queue is empty again)
    std::string seen;
    char buffer[4096];
    while (seen.find("data: ") == std::string::npos) seen.append(buffer, running.read_some(net::buffer(buffer)));
  }
  tcp::socket waiting = connect_to(io, server->port());
  net::write(waiting, net::buffer(request));
  ASSERT_TRUE(eventually([&] { return stats.waiting.load() == 1; }));
  const HttpReply refused = post(server->port(), "/v1/completions", R"({"prompt": "x"})");
  expect_error(refused, 429, "", "requests are waiting");
  EXPECT_EQ(refused.headers.at("Retry-After"), "1");
  const HttpReply metrics = get(server->port(), "/metrics");
  EXPECT_EQ(metric_value(metrics.body, "request_rejected_total"), 1) << metrics.body;
  running.close();
  waiting.close();
  EXPECT_TRUE(eventually([&] {
    return stats.running.load() == 0 && stats.waiting.load() == 0 &&
           stats.kv_blocks_free.load() == stats.kv_blocks_total.load();
  }));
}

TEST(ServeMetricsTest, LatencyHistogramsCountEveryRequestAndToken) {
  const auto server = start_server(test_options());
  ASSERT_TRUE(server->loop().ready());
  for (int i = 0; i < 3; ++i)  // 5 tokens each, none an end of text
    ASSERT_EQ(
        post(server->port(), "/v1/completions", R"({"prompt": "Once", "max_tokens": 5, "logit_bias": {"1": -100}})")
            .status,
        200);
  // The inference thread adds a step's iteration time after the step's answers
  // go out: read the metrics once it has (CI once read 0.0572 s of iterations
  // against 0.0582 s of steps).
  std::string m = get(server->port(), "/metrics").body;
  for (int i = 0;
       i < 100 && metric_value(m, "engine_iteration_seconds_total") < metric_value(m, "engine_step_seconds_total");
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = get(server->port(), "/metrics").body;
  }
  EXPECT_EQ(metric_value(m, "request_success_total{finished_reason=\"length\"}"), 3) << m;
  EXPECT_EQ(metric_value(m, "generation_tokens_total"), 15);
  EXPECT_EQ(metric_value(m, "e2e_request_latency_seconds_count"), 3);
  EXPECT_EQ(metric_value(m, "request_queue_time_seconds_count"), 3);
  EXPECT_EQ(metric_value(m, "time_to_first_token_seconds_count"), 3);
  EXPECT_EQ(metric_value(m, "inter_token_latency_seconds_count"), 12);  // 4 gaps each
  // One after another, each request is 5 steps of one sequence (its prompt, then 4 tokens fed back).
  EXPECT_EQ(metric_value(m, "engine_steps_total"), 15);
  EXPECT_EQ(metric_value(m, "engine_step_sequences_total"), 15);
  EXPECT_EQ(metric_value(m, "engine_step_tokens_total"), metric_value(m, "prompt_tokens_total") + 12);
  EXPECT_EQ(metric_value(m, "engine_largest_step"), 1);
  EXPECT_GT(metric_value(m, "engine_step_seconds_total"), 0);
  EXPECT_GE(metric_value(m, "engine_iteration_seconds_total"), metric_value(m, "engine_step_seconds_total"));
  EXPECT_GT(metric_value(m, "engine_launch_seconds_total"), 0);
  EXPECT_LE(metric_value(m, "engine_launch_seconds_total"), metric_value(m, "engine_step_seconds_total"));
  // A request's steps after its first run back to back (its prompt's, after waiting, does not).
  EXPECT_GT(metric_value(m, "engine_between_steps_seconds_total"), 0);
  for (const char* name : {"e2e_request_latency_seconds", "request_queue_time_seconds", "time_to_first_token_seconds",
                           "inter_token_latency_seconds"}) {
    const std::string n(name);
    EXPECT_EQ(metric_value(m, n + "_bucket{le=\"+Inf\"}"), metric_value(m, n + "_count")) << n;
    double previous = 0;
    for (const double bound : Histogram::kBounds) {
      char le[32];
      std::snprintf(le, sizeof le, "%g", bound);
      const double cumulative = metric_value(m, n + "_bucket{le=\"" + le + "\"}");
      EXPECT_GE(cumulative, previous) << n << " le=" << le;
      previous = cumulative;
    }
    EXPECT_GT(metric_value(m, n + "_sum"), 0) << n;
  }
}

TEST(ServeAuthTest, ApiKeyIsRequiredOnTheApiRoutes) {
  ServerOptions options = test_options();
  options.routes.api_key = "sekrit-key";
  const auto server = start_server(options);
  const std::string body = R"({"prompt": "x", "max_tokens": 2})";
  expect_error(post(server->port(), "/v1/completions", body), 401, "", "API key");
  expect_error(post(server->port(), "/v1/completions", body, {{"Authorization", "Bearer sekrit-kez"}}), 401, "",
               "API key");
  expect_error(post(server->port(), "/v1/completions", body, {{"Authorization", "sekrit-key"}}), 401, "", "API key");
  expect_error(post(server->port(), "/tokenize", R"({"prompt": "x"})"), 401, "", "API key");
  EXPECT_EQ(post(server->port(), "/v1/completions", body, {{"Authorization", "Bearer sekrit-key"}}).status, 200);
  EXPECT_EQ(get(server->port(), "/health").status, 200);
}

TEST(ServeLoadTest, AModelThatFailsToLoadKeepsHealthAt503) {
  ServerOptions options = test_options();
  options.loop.model_dir = std::string(TESSERA_SOURCE_DIR) + "/no/such/model";
  const auto server = start_server(options);
  ASSERT_FALSE(server->loop().ready());
  const HttpReply health = get(server->port(), "/health");
  expect_error(health, 503, "", "the model failed to load");
  expect_error(post(server->port(), "/v1/completions", R"({"prompt": "x"})"), 503, "", "loading");
}

// The real binary: SIGTERM lets the request in flight finish, then exits 0.
TEST(ServeSignalTest, SigtermFinishesTheRequestInFlightAndExitsZero) {
  const std::string log = ::testing::TempDir() + "/serve_sigterm.log";
  std::vector<std::string> args = {TESSERA_BINARY, "serve", "--model",   kModel, "--port", "0",
                                   "--kv-memory",  "16MiB", "--threads", "2"};
  // --port 0: the log's first line names the port.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  uint16_t port = 0;
  ASSERT_TRUE(eventually([&] {
    std::smatch m;
    const std::string text = slurp(log);
    if (!std::regex_search(text, m, std::regex(R"(listening on http://127\.0\.0\.1:(\d+))"))) return false;
    port = static_cast<uint16_t>(std::stoi(m[1]));
    return true;
  })) << slurp(log);
  ASSERT_TRUE(eventually([&] { return get(port, "/health").status == 200; }));
  auto reply = std::async(std::launch::async, [port] {
    return post(port, "/v1/completions",
                R"({"prompt": "Once", "max_tokens": 300, "logit_bias": {"1": -100}, "stream": true})");
  });
  ASSERT_TRUE(eventually([&] {
    const std::string m = get(port, "/metrics").body;
    return metric_value(m, "num_requests_running") == 1;
  }));
  kill(pid, SIGTERM);
  const HttpReply r = reply.get();
  const Streamed s = read_stream(r, false, false);
  EXPECT_EQ(s.finish_reason, "length") << "the request in flight ran to its end";
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0) << slurp(log);
}

// Logprobs in OpenAI's shapes: one entry per completion token, the text is the tokens' text
// joined, a greedy token is the first of its top ones (raw log-softmax, so the top ones'
// probabilities sum to at most 1), and a stream's chunks carry bitwise the whole answer's.
TEST_F(ServeTest, LogprobsOfCompletionsAndChatWholeAndStreamed) {
  const std::string completion = R"({"prompt": "Once upon a time", "max_tokens": 12, "logprobs": 3)";
  const Json whole = post(port(), "/v1/completions", completion + "}").json();
  const Json& lp = whole["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), whole["usage"]["completion_tokens"].get<size_t>()) << whole.dump();
  std::string joined;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i], joined.size()) << "ASCII text: characters are bytes";
    joined += lp["tokens"][i].get<std::string>();
    const Json& top = lp["top_logprobs"][i];
    ASSERT_EQ(top.size(), 3u);
    double probability = 0, best = -1e9;
    for (const auto& [token, logprob] : top.items()) {
      probability += std::exp(logprob.get<double>());
      best = std::max(best, logprob.get<double>());
    }
    EXPECT_LE(probability, 1.0 + 1e-5);
    EXPECT_EQ(lp["token_logprobs"][i].get<double>(), best) << "greedy: the likeliest token";
    EXPECT_EQ(top[lp["tokens"][i].get<std::string>()], lp["token_logprobs"][i]);
  }
  EXPECT_EQ(joined, whole["choices"][0]["text"]);

  Json streamed = {{"tokens", Json::array()},
                   {"token_logprobs", Json::array()},
                   {"top_logprobs", Json::array()},
                   {"text_offset", Json::array()}};
  for (const std::string& data : sse_data(post(port(), "/v1/completions", completion + R"(, "stream": true})").body)) {
    if (data == "[DONE]") continue;
    const Json chunk_lp = Json::parse(data)["choices"][0]["logprobs"];
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const Json& v : chunk_lp[key]) streamed[key].push_back(v);
  }
  EXPECT_EQ(streamed, lp);

  const std::string chat = R"({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 10,
                               "logprobs": true, "top_logprobs": 2, "temperature": 0.7, "seed": 5)";
  const Json answer = post(port(), "/v1/chat/completions", chat + "}").json();
  const Json& content = answer["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), answer["usage"]["completion_tokens"].get<size_t>()) << answer.dump();
  std::string text;
  for (const Json& entry : content) {
    const std::string token = entry["token"];
    text += token;
    EXPECT_EQ(entry["bytes"], Json(std::vector<int>(token.begin(), token.end())));
    ASSERT_EQ(entry["top_logprobs"].size(), 2u);
    EXPECT_GE(entry["top_logprobs"][0]["logprob"], entry["top_logprobs"][1]["logprob"]);
    EXPECT_LE(entry["logprob"].get<double>(), 0.0);
    for (const Json& top : entry["top_logprobs"])  // the raw logits' log-softmax, not the sampler's at 0.7
      if (top["token"] == entry["token"]) {
        EXPECT_EQ(top["logprob"], entry["logprob"]);
      }
  }
  EXPECT_EQ(text, answer["choices"][0]["message"]["content"]);
  Json chunks = Json::array();
  for (const std::string& data : sse_data(post(port(), "/v1/chat/completions", chat + R"(, "stream": true})").body)) {
    if (data == "[DONE]") continue;
    const Json chunk_lp = Json::parse(data)["choices"][0]["logprobs"];
    if (!chunk_lp.is_null())
      for (const Json& entry : chunk_lp["content"]) chunks.push_back(entry);
  }
  EXPECT_EQ(chunks, content);
}

// "<|end|>" typed in a message is text, not the template's control token (fails with the rendered
// prompt encoded in one pass, special tokens parsed everywhere); without such text the ids are the
// one-pass encoding that `tessera generate --chat` runs (the tests above).
TEST_F(ServeTest, SpecialTokenTextInAMessageStaysText) {
  auto tokens = [&](const std::string& body) { return post(port(), "/tokenize", body).json()["tokens"]; };
  const Json end = tokens(R"({"prompt": "<|end|>", "add_special_tokens": false})");
  ASSERT_EQ(end.size(), 1u);
  auto count = [&](const Json& ids) { return std::count(ids.begin(), ids.end(), end[0]); };
  const Json plain = tokens(R"({"messages": [{"role": "user", "content": "a b"}]})");
  const Json typed = tokens(R"({"messages": [{"role": "user", "content": "a <|end|> b"}]})");
  EXPECT_EQ(count(typed), count(plain)) << typed.dump();
  EXPECT_GT(typed.size(), plain.size() + 1) << "the characters of <|end|> are in the prompt";
  const HttpReply reply = post(port(), "/v1/chat/completions",
                               R"({"messages": [{"role": "user", "content": "a <|end|> b"}], "max_tokens": 3})");
  ASSERT_EQ(reply.status, 200) << reply.body;
  EXPECT_EQ(reply.json()["usage"]["prompt_tokens"], typed.size());
}

}  // namespace
}  // namespace tessera::serve
