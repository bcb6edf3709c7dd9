#include "serve/request.h"

#include <cmath>
#include <limits>

#include "core/text_file.h"

namespace tessera::serve {

namespace {

using Json = nlohmann::ordered_json;

// Reads one field of a request object; records the first error. A field that is
// absent or null reads as "not given".
class Fields {
 public:
  explicit Fields(const Json& object) : object_(object) {}

  const Json* find(const char* name) const {
    const auto it = object_.find(name);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }
  bool failed() const { return error_.has_value(); }
  ApiError take_error() { return std::move(*error_); }
  void fail(std::string message, std::string param) {
    if (!error_) error_ = ApiError::invalid(std::move(message), std::move(param));
  }

  std::optional<double> number(const char* name, double lo, double hi, bool lo_open = false) {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_number()) return fail_type(name, "a number", *v), std::nullopt;
    const double x = v->get<double>();
    if (!std::isfinite(x) || x < lo || x > hi || (lo_open && x == lo)) {
      fail(std::string(name) + " must be in " + (lo_open ? "(" : "[") + format(lo) + ", " + format(hi) + "], not " +
               v->dump(),
           name);
      return std::nullopt;
    }
    return x;
  }

  std::optional<int64_t> integer(const char* name, int64_t lo, int64_t hi) {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    return integer_value(*v, name, lo, hi);
  }

  std::optional<int64_t> integer_value(const Json& v, const std::string& name, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) return fail_type(name, "an integer", v), std::nullopt;
    if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      fail(name + " is out of range: " + v.dump(), name);
      return std::nullopt;
    }
    const auto x = v.get<int64_t>();
    if (x < lo || x > hi) {
      fail(name + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], not " + v.dump(), name);
      return std::nullopt;
    }
    return x;
  }

  std::optional<bool> boolean(const char* name) {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_boolean()) return fail_type(name, "a boolean", *v), std::nullopt;
    return v->get<bool>();
  }

  std::optional<std::string> string(const char* name) {
    const Json* v = find(name);
    if (!v) return std::nullopt;
    if (!v->is_string()) return fail_type(name, "a string", *v), std::nullopt;
    return v->get<std::string>();
  }

  void fail_type(const std::string& name, const char* want, const Json& got) {
    fail(name + " must be " + want + ", not " + std::string(got.type_name()), name);
  }

 private:
  static std::string format(double x) {
    std::string s = std::to_string(x);
    s.erase(s.find_last_not_of('0') + 1);
    if (!s.empty() && s.back() == '.') s.pop_back();
    return s;
  }

  const Json& object_;
  std::optional<ApiError> error_;
};

std::variant<Json, ApiError> parse_object(std::string_view body) {
  auto parsed = parse_json<Json>(body, "the request body");
  if (!parsed.ok()) return ApiError::invalid(parsed.status().message());
  if (!parsed->is_object())
    return ApiError::invalid("the request body must be a JSON object, not " + std::string(parsed->type_name()));
  return std::move(parsed).value();
}

// content: a string, null (an assistant turn with no text) or an array of text parts.
std::optional<std::string> message_content(const Json& content, const std::string& param, Fields& f) {
  if (content.is_null()) return std::string();
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return f.fail_type(param, "a string or an array of text parts", content), std::nullopt;
  std::string text;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content[i];
    const std::string at = param + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return f.fail_type(at, "an object", part), std::nullopt;
    const auto type = part.find("type");
    if (type == part.end() || !type->is_string())
      return f.fail(at + ".type must be a string", at + ".type"), std::nullopt;
    if (*type != "text")
      return f.fail(at + ".type '" + type->get<std::string>() + "' is not supported; only text parts are",
                    at + ".type"),
             std::nullopt;
    const auto t = part.find("text");
    if (t == part.end() || !t->is_string()) return f.fail(at + ".text must be a string", at + ".text"), std::nullopt;
    text += t->get<std::string>();
  }
  return text;
}

std::optional<Json> parse_messages(const Json& v, Fields& f) {
  if (!v.is_array()) return f.fail_type("messages", "an array", v), std::nullopt;
  if (v.empty()) return f.fail("messages must not be empty", "messages"), std::nullopt;
  Json out = Json::array();
  for (size_t i = 0; i < v.size(); ++i) {
    const Json& m = v[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return f.fail_type(at, "an object", m), std::nullopt;
    const auto role = m.find("role");
    if (role == m.end() || !role->is_string()) return f.fail(at + ".role must be a string", at + ".role"), std::nullopt;
    const auto content = m.find("content");
    std::optional<std::string> text =
        content == m.end() ? std::string() : message_content(*content, at + ".content", f);
    if (!text) return std::nullopt;
    out.push_back({{"role", *role}, {"content", std::move(*text)}});
  }
  return out;
}

void parse_prompt(const Json& v, CompletionRequest& r, int64_t vocab_size, Fields& f) {
  if (v.is_string()) {
    r.prompt = v.get<std::string>();
  } else if (v.is_array() && v.size() == 1 && v[0].is_string()) {
    r.prompt = v[0].get<std::string>();
  } else if (v.is_array() && !v.empty() && v[0].is_number()) {
    for (size_t i = 0; i < v.size(); ++i) {
      const auto id = f.integer_value(v[i], "prompt[" + std::to_string(i) + "]", 0, vocab_size - 1);
      if (!id) return;
      r.prompt_ids.push_back(static_cast<int32_t>(*id));
    }
  } else if (v.is_array() && v.size() > 1 && v[0].is_string()) {
    f.fail("prompt: an array of several prompts is not supported yet; send one request per prompt", "prompt");
  } else {
    f.fail_type("prompt", "a string or an array of token ids", v);
  }
  if (!f.failed() && r.prompt.empty() && r.prompt_ids.empty()) f.fail("prompt must not be empty", "prompt");
}

void parse_stop(const Json& v, CompletionRequest& r, Fields& f) {
  if (v.is_string()) {
    r.stop.push_back(v.get<std::string>());
  } else if (v.is_array()) {
    if (v.size() > kMaxStopStrings)
      return f.fail(
          "stop takes at most " + std::to_string(kMaxStopStrings) + " strings, not " + std::to_string(v.size()),
          "stop");
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_string()) return f.fail_type("stop[" + std::to_string(i) + "]", "a string", v[i]);
      r.stop.push_back(v[i].get<std::string>());
    }
  } else {
    return f.fail_type("stop", "a string or an array of strings", v);
  }
  for (const std::string& s : r.stop)
    if (s.empty()) return f.fail("stop strings must not be empty", "stop");
}

void parse_logit_bias(const Json& v, CompletionRequest& r, int64_t vocab_size, Fields& f) {
  if (!v.is_object()) return f.fail_type("logit_bias", "an object of token id to bias", v);
  for (const auto& [key, bias] : v.items()) {
    // Digits only (no sign, no spaces), few enough that the number cannot overflow.
    const bool digits = !key.empty() && key.size() <= 12 && key.find_first_not_of("0123456789") == std::string::npos;
    const long long id = digits ? std::stoll(key) : -1;
    if (id < 0 || id >= vocab_size)
      return f.fail("logit_bias key '" + key + "' is not a token id in [0, " + std::to_string(vocab_size) + ")",
                    "logit_bias");
    if (!bias.is_number()) return f.fail_type("logit_bias[" + key + "]", "a number", bias);
    const double b = bias.get<double>();
    if (!(b >= -100 && b <= 100))
      return f.fail("logit_bias[" + key + "] must be in [-100, 100], not " + bias.dump(), "logit_bias");
    r.sampling.logit_bias[static_cast<int32_t>(id)] = static_cast<float>(b);
  }
}

// chat: logprobs (boolean) and top_logprobs (0..kMaxLogprobs, needs logprobs: true);
// completions: logprobs (0..kMaxLogprobs), the number of top tokens.
void parse_logprobs(CompletionRequest& r, Fields& f) {
  if (r.endpoint == Endpoint::kCompletions) {
    if (f.find("top_logprobs"))
      return f.fail("top_logprobs is a chat completions field; completions take logprobs: N", "top_logprobs");
    const Json* given = f.find("logprobs");
    if (given && given->is_boolean() && !given->get<bool>()) return;  // false: none, as null
    if (auto n = f.integer("logprobs", 0, kMaxLogprobs)) r.logprobs = static_cast<int>(*n);
    return;
  }
  const std::optional<bool> wanted = f.boolean("logprobs");
  const std::optional<int64_t> top = f.integer("top_logprobs", 0, kMaxLogprobs);
  if (top && !wanted.value_or(false)) return f.fail("top_logprobs needs logprobs: true", "top_logprobs");
  if (wanted.value_or(false)) r.logprobs = static_cast<int>(top.value_or(0));
}

// Fields tessera does not implement yet: refused when set to anything but their default.
void refuse_unsupported(const Json& body, Fields& f) {
  auto set = [&](const char* name) { return f.find(name) != nullptr; };
  if (set("echo") && !(body["echo"].is_boolean() && !body["echo"].get<bool>()))
    return f.fail("echo is not supported yet", "echo");
  if (set("best_of") && !(body["best_of"].is_number_integer() && body["best_of"].get<int64_t>() == 1))
    return f.fail("best_of other than 1 is not supported yet", "best_of");
  if (set("suffix")) return f.fail("suffix is not supported", "suffix");
  if (set("tools")) return f.fail("tools are not supported yet", "tools");
  if (set("response_format")) return f.fail("response_format is not supported yet", "response_format");
}

}  // namespace

std::variant<CompletionRequest, ApiError> parse_completion_request(std::string_view body, Endpoint endpoint,
                                                                   int64_t vocab_size) {
  auto object = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&object)) return std::move(*e);
  const Json& json = std::get<Json>(object);
  Fields f(json);
  CompletionRequest r;
  r.endpoint = endpoint;

  if (auto model = f.string("model")) r.model = *model;
  if (endpoint == Endpoint::kChat) {
    const Json* messages = f.find("messages");
    if (!messages) {
      f.fail("messages is required", "messages");
    } else if (auto parsed = parse_messages(*messages, f)) {
      r.messages = std::move(*parsed);
    }
  } else {
    const Json* prompt = f.find("prompt");
    if (!prompt) {
      f.fail("prompt is required", "prompt");
    } else {
      parse_prompt(*prompt, r, vocab_size, f);
    }
  }
  constexpr int64_t kMaxTokens = int64_t{1} << 30;
  if (auto n = f.integer("max_tokens", 1, kMaxTokens)) r.max_tokens = n;
  if (auto n = f.integer("max_completion_tokens", 1, kMaxTokens)) r.max_tokens = n;

  SamplingParams& s = r.sampling;
  if (auto x = f.number("temperature", 0, 2)) s.temperature = static_cast<float>(*x);
  if (auto x = f.number("top_p", 0, 1, /*lo_open=*/true)) s.top_p = static_cast<float>(*x);
  if (auto k = f.integer("top_k", -1, vocab_size)) s.top_k = static_cast<int32_t>(std::max<int64_t>(*k, 0));
  if (auto x = f.number("min_p", 0, 1)) s.min_p = static_cast<float>(*x);
  if (auto x = f.number("presence_penalty", -2, 2)) s.presence_penalty = static_cast<float>(*x);
  if (auto x = f.number("frequency_penalty", -2, 2)) s.frequency_penalty = static_cast<float>(*x);
  if (auto x = f.number("repetition_penalty", 0, 10, /*lo_open=*/true)) s.repetition_penalty = static_cast<float>(*x);
  if (const Json* bias = f.find("logit_bias")) parse_logit_bias(*bias, r, vocab_size, f);
  if (auto seed = f.integer("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max())) {
    s.seed = static_cast<uint64_t>(*seed);
    r.seed_given = true;
  }
  if (const Json* stop = f.find("stop")) parse_stop(*stop, r, f);
  if (auto n = f.integer("n", 1, kMaxChoices)) r.n = static_cast<int>(*n);
  if (auto stream = f.boolean("stream")) r.stream = *stream;
  if (const Json* options = f.find("stream_options")) {
    if (!options->is_object()) {
      f.fail_type("stream_options", "an object", *options);
    } else if (!r.stream) {
      f.fail("stream_options is only allowed with stream: true", "stream_options");
    } else if (const auto it = options->find("include_usage"); it != options->end() && !it->is_null()) {
      if (!it->is_boolean()) {
        f.fail_type("stream_options.include_usage", "a boolean", *it);
      } else {
        r.include_usage = it->get<bool>();
      }
    }
  }
  if (auto user = f.string("user")) r.user = *user;
  parse_logprobs(r, f);
  if (auto salt = f.string("cache_salt")) {
    if (salt->empty()) f.fail("cache_salt must not be empty", "cache_salt");
    r.cache_salt = std::move(*salt);
  }
  if (auto ignore = f.boolean("ignore_eos")) r.ignore_eos = *ignore;
  refuse_unsupported(json, f);
  if (f.failed()) return f.take_error();
  return r;
}

std::variant<TokenizeRequest, ApiError> parse_tokenize_request(std::string_view body) {
  auto object = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&object)) return std::move(*e);
  const Json& json = std::get<Json>(object);
  Fields f(json);
  TokenizeRequest r;
  r.prompt = f.string("prompt");
  if (!r.prompt && !f.failed()) {
    if (const Json* messages = f.find("messages")) {
      if (auto parsed = parse_messages(*messages, f)) r.messages = std::move(*parsed);
      r.add_special_tokens = false;  // the chat template writes its own
    } else {
      f.fail("give prompt or messages", "prompt");
    }
  }
  if (auto add = f.boolean("add_special_tokens")) r.add_special_tokens = *add;
  if (f.failed()) return f.take_error();
  return r;
}

std::variant<std::vector<int32_t>, ApiError> parse_detokenize_request(std::string_view body, int64_t vocab_size) {
  auto object = parse_object(body);
  if (auto* e = std::get_if<ApiError>(&object)) return std::move(*e);
  const Json& json = std::get<Json>(object);
  Fields f(json);
  std::vector<int32_t> ids;
  const Json* tokens = f.find("tokens");
  if (!tokens) {
    f.fail("tokens is required", "tokens");
  } else if (!tokens->is_array()) {
    f.fail_type("tokens", "an array of token ids", *tokens);
  } else {
    for (size_t i = 0; i < tokens->size() && !f.failed(); ++i)
      if (auto id = f.integer_value((*tokens)[i], "tokens[" + std::to_string(i) + "]", 0, vocab_size - 1))
        ids.push_back(static_cast<int32_t>(*id));
  }
  if (f.failed()) return f.take_error();
  return ids;
}

}  // namespace tessera::serve
