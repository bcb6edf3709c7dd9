// Routes: what each HTTP request asks for, answered at once or prepared for the
// inference loop. Runs on the I/O threads; it never steps the model. It does
// tokenize (and render the chat template), which is cheap next to a forward
// pass and keeps the inference thread on forward passes alone.
//
//   GET  /health               200 when the model is ready, 503 (OpenAI error) while loading
//   GET  /metrics              Prometheus text (metrics.h)
//   GET  /v1/models            the one model served
//   POST /v1/completions       prepared: a Generation
//   POST /v1/chat/completions  prepared: a Generation (messages through the chat template)
//   POST /tokenize             {"tokens", "count", "max_model_len"}
//   POST /detokenize           {"prompt"}
// Other paths 404, other methods 405 (with Allow). With an API key, /v1/*,
// /tokenize and /detokenize need "Authorization: Bearer <key>" (401 otherwise),
// compared in constant time; /health and /metrics stay open, as in vLLM.
//
// Thread safety: handle() may run on several I/O threads at once.
#pragma once

#include <boost/beast/http.hpp>
#include <string>
#include <variant>

#include "serve/api_error.h"
#include "serve/inference_loop.h"
#include "serve/metrics.h"
#include "serve/request.h"
#include "serve/responses.h"

namespace tessera::serve {

namespace http = boost::beast::http;
using HttpRequest = http::request<http::string_body>;
using HttpResponse = http::response<http::string_body>;

struct RouteOptions {
  std::string api_key;              // empty: no key needed
  std::string model_name;           // what /v1/models lists and responses carry
  int64_t default_max_tokens = 16;  // completions without max_tokens (OpenAI's default)
};

// A completion request ready for the inference loop: one submission per choice
// (choice i samples with seed + i), sharing one cancel flag; the session adds the sinks.
struct Generation {
  CompletionRequest request;
  std::vector<Submission> submissions;
  ResponseHeader header;
};

class Routes {
 public:
  Routes(InferenceLoop& loop, HttpCounters& counters, RouteOptions options);

  std::variant<HttpResponse, Generation> handle(const HttpRequest& request) const;

  // The response for an error, in the request's HTTP version, with Retry-After on 429/503.
  HttpResponse error(const ApiError& error, unsigned version, bool keep_alive) const;
  HttpResponse json(int status, const std::string& body, unsigned version, bool keep_alive) const;

 private:
  std::variant<HttpResponse, Generation> completion(const HttpRequest& request, Endpoint endpoint) const;
  HttpResponse tokenize(const HttpRequest& request) const;
  HttpResponse detokenize(const HttpRequest& request) const;
  bool authorized(const HttpRequest& request) const;

  InferenceLoop& loop_;
  HttpCounters& counters_;
  const RouteOptions options_;
};

}  // namespace tessera::serve
