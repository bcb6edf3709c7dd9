// ChatTemplate: the public face of the template engine; see chat_template.h.
// Converts the JSON context into template values and runs one Evaluator per render.
#include "template/chat_template.h"

#include "template/evaluator.h"
#include "template/parser.h"
#include "template/py_string.h"

namespace tessera {
namespace {

constexpr int kMaxContextDepth = 512;

template <typename Json>
Result<tmpl::Value> to_value(const Json& j, int depth) {
  using tmpl::Value;
  if (depth > kMaxContextDepth) return Status::invalid_input("chat template context nested too deeply");
  switch (j.type()) {
    case nlohmann::json::value_t::null: return Value::none();
    case nlohmann::json::value_t::boolean: return Value::boolean(j.template get<bool>());
    case nlohmann::json::value_t::number_integer: return Value::integer(j.template get<std::int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      auto u = j.template get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) {
        return Status::unsupported("chat template context integer beyond 64 bits is not supported");
      }
      return Value::integer(static_cast<std::int64_t>(u));
    }
    case nlohmann::json::value_t::number_float: return Value::floating(j.template get<double>());
    case nlohmann::json::value_t::string: {
      const auto& s = j.template get_ref<const std::string&>();
      if (!tmpl::valid_utf8(s)) return Status::invalid_input("chat template context holds invalid UTF-8");
      return Value::string(s);
    }
    case nlohmann::json::value_t::array: {
      tmpl::List items;
      items.reserve(j.size());
      for (const auto& item : j) {
        TS_ASSIGN_OR_RETURN(Value v, to_value(item, depth + 1));
        items.push_back(std::move(v));
      }
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      tmpl::Dict d;
      d.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!tmpl::valid_utf8(it.key())) return Status::invalid_input("chat template context holds invalid UTF-8");
        TS_ASSIGN_OR_RETURN(Value v, to_value(it.value(), depth + 1));
        d.entries.emplace_back(Value::string(it.key()), std::move(v));  // JSON keys are unique
      }
      return Value::dict(std::move(d));
    }
    default: return Status::unsupported("chat template context holds a JSON value kind tessera does not support");
  }
}

template <typename Json>
Result<std::string> render_json(const tmpl::Program& program, const Json& context,
                                const ChatTemplate::RenderOptions& options) {
  if (!context.is_object()) return Status::invalid_input("chat template context must be a JSON object");
  TS_ASSIGN_OR_RETURN(tmpl::Value values, to_value(context, 0));
  std::tm now{};
  if (options.now) {
    now = *options.now;
  } else {
    std::time_t t = std::time(nullptr);
    localtime_r(&t, &now);
  }
  tmpl::EvalLimits limits;
  limits.max_output_bytes = options.max_output_bytes;
  limits.max_steps = options.max_steps;
  limits.max_call_depth = options.max_call_depth;
  tmpl::Evaluator evaluator(program, values, now, limits);
  return evaluator.render();
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  if (source.size() > kMaxSourceBytes) {
    return Status::invalid_input("chat template is " + std::to_string(source.size()) + " bytes, over the limit of " +
                                 std::to_string(kMaxSourceBytes));
  }
  if (!tmpl::valid_utf8(source)) return Status::invalid_input("chat template is not valid UTF-8");
  TS_ASSIGN_OR_RETURN(std::shared_ptr<const tmpl::Program> program, tmpl::parse_program(source));
  return ChatTemplate(std::move(program));
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& context, const RenderOptions& options) const {
  return render_json(*program_, context, options);
}

Result<std::string> ChatTemplate::render(const nlohmann::json& context, const RenderOptions& options) const {
  return render_json(*program_, context, options);
}

Result<TokenizerChatConfig> read_tokenizer_chat_config(const nlohmann::ordered_json& config) {
  if (!config.is_object()) return Status::invalid_input("tokenizer_config.json is not a JSON object");
  TokenizerChatConfig out;
  auto it = config.find("chat_template");
  if (it == config.end() || it->is_null()) return Status::not_found("tokenizer_config.json has no chat_template");
  if (it->is_string()) {
    out.chat_template = it->get<std::string>();
  } else if (it->is_array()) {
    bool found = false;
    for (const auto& named : *it) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") &&
          named["template"].is_string()) {
        out.chat_template = named["template"].get<std::string>();
        found = true;
        break;
      }
    }
    if (!found) return Status::not_found("tokenizer_config.json lists no \"default\" chat_template");
  } else {
    return Status::invalid_input("tokenizer_config.json chat_template is neither a string nor a list");
  }
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    auto token = config.find(key);
    if (token == config.end()) continue;
    if (token->is_string()) {
      out.special_tokens[key] = *token;
    } else if (token->is_object() && token->contains("content") && (*token)["content"].is_string()) {
      out.special_tokens[key] = (*token)["content"];
    }
  }
  return out;
}

}  // namespace tessera
