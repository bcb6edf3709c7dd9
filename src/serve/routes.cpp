#include "serve/routes.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <array>
#include <random>

#include "serve/chat_prompt.h"

namespace tessera::serve {

namespace {

// SHA-256 of the key, so that keys of any length compare in the same time.
std::array<unsigned char, 32> digest(std::string_view text) {
  std::array<unsigned char, 32> out{};
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), out.data(), &size, EVP_sha256(), nullptr);
  return out;
}

// Beast's string_view is Boost's (1.74) or Boost.Core's (1.83); both convert this way.
template <class View>
std::string_view std_view(const View& v) {
  return {v.data(), v.size()};
}

bool is_path(const HttpRequest& request, std::string_view path) {
  std::string_view target = std_view(request.target());
  target = target.substr(0, target.find('?'));
  return target == path;
}

}  // namespace

Routes::Routes(InferenceLoop& loop, HttpCounters& counters, RouteOptions options)
    : loop_(loop), counters_(counters), options_(std::move(options)) {}

HttpResponse Routes::json(int status, const std::string& body, unsigned version, bool keep_alive) const {
  HttpResponse response{static_cast<http::status>(status), version};
  response.set(http::field::content_type, "application/json");
  response.keep_alive(keep_alive);
  response.body() = body;
  response.prepare_payload();
  counters_.count(status);
  return response;
}

HttpResponse Routes::error(const ApiError& error, unsigned version, bool keep_alive) const {
  HttpResponse response = json(error.http_status, dump(error.to_json()), version, keep_alive);
  if (const int seconds = error.retry_after_seconds(); seconds > 0)
    response.set(http::field::retry_after, std::to_string(seconds));
  return response;
}

bool Routes::authorized(const HttpRequest& request) const {
  if (options_.api_key.empty()) return true;
  std::string_view given = std_view(request[http::field::authorization]);
  constexpr std::string_view kBearer = "Bearer ";
  if (given.substr(0, kBearer.size()) != kBearer) return false;
  given.remove_prefix(kBearer.size());
  const auto a = digest(given), b = digest(options_.api_key);
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::variant<HttpResponse, Generation> Routes::handle(const HttpRequest& request) const {
  const unsigned version = request.version();
  const bool keep_alive = request.keep_alive();
  struct Route {
    std::string_view path;
    http::verb verb;
    bool needs_key;
  };
  static constexpr std::array<Route, 7> kRoutes{{{"/health", http::verb::get, false},
                                                 {"/metrics", http::verb::get, false},
                                                 {"/v1/models", http::verb::get, true},
                                                 {"/v1/completions", http::verb::post, true},
                                                 {"/v1/chat/completions", http::verb::post, true},
                                                 {"/tokenize", http::verb::post, true},
                                                 {"/detokenize", http::verb::post, true}}};
  const Route* route = nullptr;
  for (const Route& r : kRoutes)
    if (is_path(request, r.path)) route = &r;
  if (!route)
    return error({404, "no route " + std::string(request.target()), "not_found_error", "", ""}, version, keep_alive);
  if (request.method() != route->verb) {
    const std::string allowed(http::to_string(route->verb));
    HttpResponse response = error(
        {405,
         std::string(request.method_string()) + " is not allowed on " + std::string(route->path) + "; use " + allowed,
         "invalid_request_error", "", ""},
        version, keep_alive);
    response.set(http::field::allow, allowed);
    return response;
  }
  if (route->needs_key && !authorized(request))
    return error({401, "missing or wrong API key (send Authorization: Bearer <key>)", "authentication_error", "",
                  "invalid_api_key"},
                 version, keep_alive);
  if (route->path == "/health") {
    if (loop_.ready()) return json(200, R"({"status":"ok"})", version, keep_alive);
    const Status loaded = loop_.load_status();
    return error({503, loaded.ok() ? "the model is loading" : "the model failed to load: " + loaded.message(),
                  "service_unavailable_error", "", "loading"},
                 version, keep_alive);
  }
  if (route->path == "/metrics") {
    HttpResponse response =
        json(200, write_metrics(loop_.stats(), counters_, options_.model_name), version, keep_alive);
    response.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
    return response;
  }
  if (!loop_.ready())
    return error({503, "the model is loading", "service_unavailable_error", "", "loading"}, version, keep_alive);
  if (route->path == "/v1/models") {
    const nlohmann::json list = {{"object", "list"},
                                 {"data",
                                  {{{"id", options_.model_name},
                                    {"object", "model"},
                                    {"created", unix_seconds()},
                                    {"owned_by", "tessera"},
                                    {"max_model_len", loop_.context()}}}}};
    return json(200, dump(list), version, keep_alive);
  }
  if (route->path == "/v1/completions") return completion(request, Endpoint::kCompletions);
  if (route->path == "/v1/chat/completions") return completion(request, Endpoint::kChat);
  if (route->path == "/tokenize") return tokenize(request);
  return detokenize(request);
}

std::variant<HttpResponse, Generation> Routes::completion(const HttpRequest& request, Endpoint endpoint) const {
  const unsigned version = request.version();
  const bool keep_alive = request.keep_alive();
  const TextModel& model = loop_.model();
  auto parsed = parse_completion_request(request.body(), endpoint, model.model.config().vocab_size);
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e, version, keep_alive);
  Generation g{std::move(std::get<CompletionRequest>(parsed)), {}, {}};
  CompletionRequest& r = g.request;
  const char* param = endpoint == Endpoint::kChat ? "messages" : "prompt";

  // The prompt's ids as `tessera generate` makes them (--chat: the template's text with its special
  // tokens; special-token text inside a message stays text, chat_prompt.h).
  Result<std::vector<int32_t>> ids = r.prompt_ids;
  if (endpoint == Endpoint::kChat) {
    ids = chat_prompt_ids(model, r.messages);
  } else if (r.prompt_ids.empty()) {
    ids = model.tokenizer.encode(r.prompt);
  }
  if (!ids.ok()) return error(ApiError::from_status(ids.status(), param), version, keep_alive);
  const auto prompt_size = static_cast<int64_t>(ids->size());
  const int64_t context = loop_.context();
  if (prompt_size == 0) return error(ApiError::invalid("the prompt has no tokens", param), version, keep_alive);
  if (prompt_size >= context) {
    ApiError e =
        ApiError::invalid("the prompt has " + std::to_string(prompt_size) + " tokens; the model's context is " +
                              std::to_string(context) + " (the prompt must leave room for one token)",
                          param);
    e.code = "context_length_exceeded";
    return error(e, version, keep_alive);
  }
  // As vLLM: a prompt and the max_tokens asked for past the context are refused, not cut short
  // (positions: the prompt and every token but the last, which is not run).
  if (r.max_tokens && prompt_size + *r.max_tokens - 1 > context) {
    ApiError e = ApiError::invalid("the prompt's " + std::to_string(prompt_size) + " tokens and max_tokens " +
                                       std::to_string(*r.max_tokens) + " need " +
                                       std::to_string(prompt_size + *r.max_tokens - 1) +
                                       " positions; the model's context is " + std::to_string(context),
                                   "max_tokens");
    e.code = "context_length_exceeded";
    return error(e, version, keep_alive);
  }
  // One that the whole KV pool cannot hold is refused now, not queued (it would never run).
  const int64_t pool = loop_.max_positions();
  if (Status room = check_kv_room(prompt_size, r.max_tokens, pool); !room.ok()) {
    ApiError e = ApiError::from_status(room, prompt_size >= pool ? param : "max_tokens");
    e.code = "context_length_exceeded";
    return error(e, version, keep_alive);
  }

  Submission s;
  s.prompt = std::move(ids).value();
  s.max_tokens =
      r.max_tokens.value_or(endpoint == Endpoint::kChat ? context - prompt_size : options_.default_max_tokens);
  s.sampling = r.sampling;
  if (!r.seed_given) {  // each request draws its own seed: nothing is shared between requests
    thread_local std::mt19937_64 rng{std::random_device{}()};
    s.sampling.seed = rng();
  }
  if (Status valid = validate(s.sampling, model.model.config().vocab_size); !valid.ok())
    return error(ApiError::from_status(valid), version, keep_alive);
  s.stop = r.stop;
  s.cache_salt = r.cache_salt;
  s.logprobs = r.logprobs;
  s.ignore_eos = r.ignore_eos;
  for (int i = 0; i < r.n; ++i) {
    g.submissions.push_back(s);
    g.submissions.back().sampling.seed = s.sampling.seed + static_cast<uint64_t>(i);
    g.submissions.back().cancelled = s.cancelled;
  }
  g.header = new_response_header(endpoint, options_.model_name);
  return g;
}

HttpResponse Routes::tokenize(const HttpRequest& request) const {
  const unsigned version = request.version();
  const bool keep_alive = request.keep_alive();
  auto parsed = parse_tokenize_request(request.body());
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e, version, keep_alive);
  const TokenizeRequest& r = std::get<TokenizeRequest>(parsed);
  const TextModel& model = loop_.model();
  auto ids = r.prompt ? model.tokenizer.encode(*r.prompt, {.parse_special = true, .add_special = r.add_special_tokens})
                      : chat_prompt_ids(model, r.messages);
  if (!ids.ok())
    return error(ApiError::from_status(ids.status(), r.prompt ? "prompt" : "messages"), version, keep_alive);
  const nlohmann::json body = {{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", loop_.context()}};
  return json(200, dump(body), version, keep_alive);
}

HttpResponse Routes::detokenize(const HttpRequest& request) const {
  const unsigned version = request.version();
  const bool keep_alive = request.keep_alive();
  const TextModel& model = loop_.model();
  auto parsed = parse_detokenize_request(request.body(), model.model.config().vocab_size);
  if (auto* e = std::get_if<ApiError>(&parsed)) return error(*e, version, keep_alive);
  auto text = model.tokenizer.decode(std::get<std::vector<int32_t>>(parsed));
  if (!text.ok()) return error(ApiError::from_status(text.status(), "tokens"), version, keep_alive);
  return json(200, dump({{"prompt", *text}}), version, keep_alive);
}

}  // namespace tessera::serve
