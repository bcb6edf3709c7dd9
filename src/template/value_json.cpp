// Python's json.dumps over template values, as transformers' tojson filter calls
// it: json.dumps(x, ensure_ascii, indent, separators, sort_keys). Matches CPython's
// encoder byte for byte: float repr, ", " / ": " separators, NaN/Infinity,
// \uXXXX escapes (surrogate pairs when ensure_ascii), key coercion.
#include <algorithm>
#include <cmath>

#include "template/py_string.h"
#include "template/value.h"

namespace tessera::tmpl {
namespace {

// The two-character escapes json.dumps writes in either mode; false when c takes none.
bool append_short_escape(char32_t c, std::string& out) {
  switch (c) {
    case '"': out += "\\\""; return true;
    case '\\': out += "\\\\"; return true;
    case '\n': out += "\\n"; return true;
    case '\r': out += "\\r"; return true;
    case '\t': out += "\\t"; return true;
    case '\b': out += "\\b"; return true;
    case '\f': out += "\\f"; return true;
    default: return false;
  }
}

void append_json_string(std::string_view s, bool ensure_ascii, std::string& out) {
  static constexpr char kHex[] = "0123456789abcdef";
  auto u_escape = [&](unsigned v) {
    out += "\\u";
    for (int k = 3; k >= 0; --k) out.push_back(kHex[(v >> (4 * k)) & 0xF]);
  };
  out.push_back('"');
  if (!ensure_ascii) {
    for (char ch : s) {
      const auto c = static_cast<unsigned char>(ch);
      if (append_short_escape(c, out)) continue;
      if (c < 0x20) u_escape(c);
      else out.push_back(ch);
    }
  } else {
    for (char32_t c : decode_utf8(s)) {
      if (append_short_escape(c, out)) continue;
      if (c >= 0x20 && c <= 0x7E) {
        out.push_back(static_cast<char>(c));
      } else if (c > 0xFFFF) {
        const char32_t v = c - 0x10000;
        u_escape(0xD800 | static_cast<unsigned>(v >> 10));
        u_escape(0xDC00 | static_cast<unsigned>(v & 0x3FF));
      } else {
        u_escape(static_cast<unsigned>(c));
      }
    }
  }
  out.push_back('"');
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return float_repr(d);
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonOptions& options) : options_(options) {
    if (options_.separators_set) {
      item_separator_ = options_.item_separator;
      key_separator_ = options_.key_separator;
    } else {
      item_separator_ = options_.indent_set ? "," : ", ";
      key_separator_ = ": ";
    }
  }

  Status write(const Value& v, int depth, std::string& out) {
    if (depth > kMaxDepth) return Status::invalid_input("RecursionError: value nested too deeply for tojson");
    switch (v.kind()) {
      case Kind::kNone: out += "null"; return Status();
      case Kind::kBool: out += v.as_bool() ? "true" : "false"; return Status();
      case Kind::kInt: out += std::to_string(v.as_int()); return Status();
      case Kind::kFloat: out += json_float(v.as_double()); return Status();
      case Kind::kString: append_json_string(v.str(), options_.ensure_ascii, out); return Status();
      case Kind::kList:
      case Kind::kTuple: {
        const List& items = v.items();
        if (items.empty()) {
          out += "[]";
          return Status();
        }
        out.push_back('[');
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i) out += item_separator_;
          newline(depth + 1, out);
          TS_RETURN_IF_ERROR(write(items[i], depth + 1, out));
        }
        newline(depth, out);
        out.push_back(']');
        return Status();
      }
      case Kind::kDict: return write_dict(v.dict(), depth, out);
      default: return Status::invalid_input("TypeError: Object of type " + type_name(v) + " is not JSON serializable");
    }
  }

 private:
  static constexpr int kMaxDepth = 500;

  void newline(int depth, std::string& out) const {
    if (!options_.indent_set) return;
    out.push_back('\n');
    for (int i = 0; i < depth; ++i) out += options_.indent;
  }

  // Python coerces int/float/bool/None keys to their JSON text; other keys are a TypeError.
  static Result<std::string> key_text(const Value& k) {
    switch (k.kind()) {
      case Kind::kString: return k.str();
      case Kind::kNone: return std::string("null");
      case Kind::kBool: return std::string(k.as_bool() ? "true" : "false");
      case Kind::kInt: return std::to_string(k.as_int());
      case Kind::kFloat: return json_float(k.as_double());
      default:
        return Status::invalid_input("TypeError: keys must be str, int, float, bool or None, not " + type_name(k));
    }
  }

  Status write_dict(const Dict& d, int depth, std::string& out) {
    if (d.entries.empty()) {
      out += "{}";
      return Status();
    }
    std::vector<const std::pair<Value, Value>*> order;
    for (const auto& entry : d.entries) order.push_back(&entry);
    if (options_.sort_keys) {
      Status failed;
      std::stable_sort(order.begin(), order.end(), [&](const auto* a, const auto* b) {
        if (!failed.ok()) return false;
        Result<bool> lt = less_than(a->first, b->first);
        if (!lt.ok()) {
          failed = lt.status();
          return false;
        }
        return *lt;
      });
      TS_RETURN_IF_ERROR(failed);
    }
    out.push_back('{');
    bool first = true;
    for (const auto* entry : order) {
      if (!first) out += item_separator_;
      first = false;
      newline(depth + 1, out);
      TS_ASSIGN_OR_RETURN(std::string key, key_text(entry->first));
      append_json_string(key, options_.ensure_ascii, out);
      out += key_separator_;
      TS_RETURN_IF_ERROR(write(entry->second, depth + 1, out));
    }
    newline(depth, out);
    out.push_back('}');
    return Status();
  }

  const JsonOptions& options_;
  std::string item_separator_;
  std::string key_separator_;
};

}  // namespace

Result<std::string> to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  JsonWriter writer(options);
  TS_RETURN_IF_ERROR(writer.write(v, 0, out));
  return out;
}

}  // namespace tessera::tmpl
