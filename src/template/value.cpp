// Value construction and the Python semantics every part of the engine shares:
// truth, ==, ordering, len(), iteration, str()/repr(). json.dumps lives in
// value_json.cpp.
#include "template/value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "template/py_string.h"

namespace tessera::tmpl {

// ---- construction and access ----

Value Value::undefined(std::string message) {
  Value v;
  v.payload_ = std::make_shared<const std::string>(std::move(message));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.kind_ = Kind::kBool;
  v.payload_ = b;
  return v;
}

Value Value::integer(std::int64_t i) {
  Value v;
  v.kind_ = Kind::kInt;
  v.payload_ = i;
  return v;
}

Value Value::floating(double d) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.payload_ = d;
  return v;
}

Value Value::string(std::string s, bool safe) {
  Value v;
  v.kind_ = Kind::kString;
  v.safe_ = safe;
  v.payload_ = std::make_shared<const std::string>(std::move(s));
  return v;
}

Value Value::list(List items) {
  Value v;
  v.kind_ = Kind::kList;
  v.payload_ = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::tuple(List items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::kTuple;
  return v;
}

Value Value::dict(Dict d) {
  Value v;
  v.kind_ = Kind::kDict;
  v.payload_ = std::make_shared<Dict>(std::move(d));
  return v;
}

Value Value::iterator(IteratorKind kind, List items) {
  Value v;
  v.kind_ = Kind::kIterator;
  auto state = std::make_shared<IteratorState>();
  state->kind = kind;
  state->items = std::move(items);
  v.payload_ = std::move(state);
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.kind_ = Kind::kObject;
  v.payload_ = std::move(o);
  return v;
}

std::int64_t Value::as_int() const {
  return kind_ == Kind::kBool ? (as_bool() ? 1 : 0) : std::get<std::int64_t>(payload_);
}

double Value::as_double() const {
  if (kind_ == Kind::kFloat) return std::get<double>(payload_);
  return static_cast<double>(as_int());
}

const std::string& Value::undefined_message() const {
  static const std::string kEmpty = "undefined value";
  auto* p = std::get_if<std::shared_ptr<const std::string>>(&payload_);
  return p && *p ? **p : kEmpty;
}

const void* Value::identity() const {
  return std::visit(
      [](const auto& p) -> const void* {
        using P = std::decay_t<decltype(p)>;
        if constexpr (std::is_same_v<P, std::shared_ptr<const std::string>> ||
                      std::is_same_v<P, std::shared_ptr<List>> || std::is_same_v<P, std::shared_ptr<Dict>> ||
                      std::is_same_v<P, std::shared_ptr<IteratorState>> || std::is_same_v<P, std::shared_ptr<Object>>) {
          return p.get();
        } else {
          return nullptr;
        }
      },
      payload_);
}

const Value* Dict::find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (equals(k, key)) return &v;
  }
  return nullptr;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.str() == key) return &v;
  }
  return nullptr;
}

void Dict::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

// ---- objects ----

std::string Object::repr() const {
  std::string out = "<";  // built by appends: GCC 12 warns (-Wrestrict) on "literal" + std::string here
  out.append(type_name()).append(" object>");
  return out;
}

Result<Value> Object::call(Evaluator&, Args) {
  return Status::invalid_input("TypeError: '" + std::string(type_name()) + "' object is not callable");
}

std::optional<Value> Object::attribute(std::string_view) const { return std::nullopt; }

std::string Namespace::repr() const {
  std::string out = "<Namespace ";
  Status st = append_repr(Value::dict(attributes_), out);
  (void)st;  // attributes are template values that all have a repr
  out += ">";
  return out;
}

std::optional<Value> Namespace::attribute(std::string_view name) const {
  if (const Value* v = attributes_.find(name)) return *v;
  return std::nullopt;
}

void Namespace::set(std::string_view name, Value value) {
  attributes_.set(Value::string(std::string(name)), std::move(value));
}

// ---- Python semantics ----

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return v.as_bool();
    case Kind::kInt: return v.as_int() != 0;
    case Kind::kFloat: return v.as_double() != 0.0;
    case Kind::kString: return !v.str().empty();
    case Kind::kList:
    case Kind::kTuple: return !v.items().empty();
    case Kind::kDict: return !v.dict().entries.empty();
    case Kind::kIterator: {
      const IteratorState& it = v.iterator_state();
      // Generators are always true; dict views are true when not empty.
      if (it.kind == IteratorKind::kGenerator || it.kind == IteratorKind::kReversed) return true;
      return !it.items.empty();
    }
    case Kind::kObject: return true;
  }
  return false;
}

namespace {

long double as_long_double(const Value& v) {
  // long double holds every int64 exactly, so int-vs-float compares as Python's does.
  return v.kind() == Kind::kFloat ? static_cast<long double>(v.as_double()) : static_cast<long double>(v.as_int());
}

bool number_equals(const Value& a, const Value& b) {
  if (a.kind() != Kind::kFloat && b.kind() != Kind::kFloat) return a.as_int() == b.as_int();
  return as_long_double(a) == as_long_double(b);
}

bool number_less(const Value& a, const Value& b) {
  if (a.kind() != Kind::kFloat && b.kind() != Kind::kFloat) return a.as_int() < b.as_int();
  return as_long_double(a) < as_long_double(b);
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return number_equals(a, b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.str() == b.str();
    case Kind::kList:
    case Kind::kTuple: {
      const List& x = a.items();
      const List& y = b.items();
      if (x.size() != y.size()) return false;
      for (std::size_t i = 0; i < x.size(); ++i) {
        if (!equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Kind::kDict: {
      const Dict& x = a.dict();
      const Dict& y = b.dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !equals(v, *other)) return false;
      }
      return true;
    }
    default: return a.identity() == b.identity();
  }
}

Result<bool> less_than(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return number_less(a, b);
  if (a.is_string() && b.is_string()) return a.str() < b.str();  // UTF-8 byte order is code point order
  if (a.is_sequence() && a.kind() == b.kind()) {
    const List& x = a.items();
    const List& y = b.items();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  if (a.is_undefined() || b.is_undefined()) {
    return Status::invalid_input(a.is_undefined() ? a.undefined_message() : b.undefined_message());
  }
  return Status::invalid_input("TypeError: '<' not supported between instances of '" + type_name(a) + "' and '" +
                               type_name(b) + "'");
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "Undefined";
    case Kind::kNone: return "NoneType";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return v.safe() ? "Markup" : "str";
    case Kind::kList: return "list";
    case Kind::kTuple: return "tuple";
    case Kind::kDict: return "dict";
    case Kind::kIterator:
      switch (v.iterator_state().kind) {
        case IteratorKind::kGenerator: return "generator";
        case IteratorKind::kDictKeys: return "dict_keys";
        case IteratorKind::kDictValues: return "dict_values";
        case IteratorKind::kDictItems: return "dict_items";
        case IteratorKind::kReversed: return "list_reverseiterator";
      }
      return "iterator";
    case Kind::kObject: return std::string(v.object().type_name());
  }
  return "object";
}

bool hashable(const Value& v) {
  switch (v.kind()) {
    case Kind::kList:
    case Kind::kDict: return false;
    case Kind::kTuple:
      for (const Value& item : v.items()) {
        if (!hashable(item)) return false;
      }
      return true;
    case Kind::kIterator: return v.iterator_state().kind == IteratorKind::kGenerator;
    default: return true;
  }
}

Result<std::size_t> length(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return std::size_t{0};
    case Kind::kString: return codepoint_count(v.str());
    case Kind::kList:
    case Kind::kTuple: return v.items().size();
    case Kind::kDict: return v.dict().entries.size();
    case Kind::kIterator:
      if (v.iterator_state().kind != IteratorKind::kGenerator && v.iterator_state().kind != IteratorKind::kReversed) {
        return v.iterator_state().items.size();
      }
      break;
    default: break;
  }
  return Status::invalid_input("TypeError: object of type '" + type_name(v) + "' has no len()");
}

Result<List> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return List{};
    case Kind::kString: {
      List chars;
      std::string piece;
      for (char32_t c : decode_utf8(v.str())) {
        piece.clear();
        append_utf8(c, piece);
        chars.push_back(Value::string(piece));  // iterating a Markup yields plain str
      }
      return chars;
    }
    case Kind::kList:
    case Kind::kTuple: return v.items();
    case Kind::kDict: {
      List keys;
      keys.reserve(v.dict().entries.size());
      for (const auto& entry : v.dict().entries) keys.push_back(entry.first);
      return keys;
    }
    case Kind::kIterator: {
      IteratorState& it = v.iterator_state();
      if (it.kind != IteratorKind::kGenerator && it.kind != IteratorKind::kReversed) return it.items;
      List rest(it.items.begin() + static_cast<std::ptrdiff_t>(it.cursor), it.items.end());
      it.cursor = it.items.size();
      return rest;
    }
    default: break;
  }
  return Status::invalid_input("TypeError: '" + type_name(v) + "' object is not iterable");
}

std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci is "[-]d[.ddd]e[+-]xx": split into sign, digits and decimal exponent.
  std::string out;
  std::size_t pos = 0;
  if (sci[0] == '-') {
    out.push_back('-');
    pos = 1;
  }
  std::size_t e = sci.find('e');
  std::string digits;
  for (std::size_t i = pos; i < e; ++i) {
    if (sci[i] != '.') digits.push_back(sci[i]);
  }
  int exp10 = std::stoi(sci.substr(e + 1));
  int decpt = exp10 + 1;  // value = 0.digits * 10^decpt
  auto n = static_cast<int>(digits.size());
  if (decpt > 16 || decpt <= -4) {
    out += digits.substr(0, 1);
    if (n > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
    out += ebuf;
  } else if (decpt <= 0) {
    out += "0." + std::string(static_cast<std::size_t>(-decpt), '0') + digits;
  } else if (decpt >= n) {
    out += digits + std::string(static_cast<std::size_t>(decpt - n), '0') + ".0";
  } else {
    out += digits.substr(0, static_cast<std::size_t>(decpt)) + "." + digits.substr(static_cast<std::size_t>(decpt));
  }
  return out;
}

namespace {

Status append_sequence_repr(const List& items, char open, char close, bool tuple, std::string& out) {
  out.push_back(open);
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    TS_RETURN_IF_ERROR(append_repr(items[i], out));
  }
  if (tuple && items.size() == 1) out.push_back(',');
  out.push_back(close);
  return Status();
}

}  // namespace

Status append_repr(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Kind::kUndefined: out += "Undefined"; return Status();
    case Kind::kString:
      if (v.safe()) {
        out += "Markup(";
        append_str_repr(v.str(), out);
        out += ")";
      } else {
        append_str_repr(v.str(), out);
      }
      return Status();
    case Kind::kList: return append_sequence_repr(v.items(), '[', ']', false, out);
    case Kind::kTuple: return append_sequence_repr(v.items(), '(', ')', true, out);
    case Kind::kDict: {
      out.push_back('{');
      bool first = true;
      for (const auto& [k, val] : v.dict().entries) {
        if (!first) out += ", ";
        first = false;
        TS_RETURN_IF_ERROR(append_repr(k, out));
        out += ": ";
        TS_RETURN_IF_ERROR(append_repr(val, out));
      }
      out.push_back('}');
      return Status();
    }
    case Kind::kIterator: {
      const IteratorState& it = v.iterator_state();
      if (it.kind == IteratorKind::kGenerator || it.kind == IteratorKind::kReversed) {
        // Python prints "<generator object ... at 0x7f...>": an address nobody can reproduce.
        return Status::unsupported("printing a " + type_name(v) + " object is not supported (apply |list first)");
      }
      out += type_name(v) + "(";
      TS_RETURN_IF_ERROR(append_sequence_repr(it.items, '[', ']', false, out));
      out += ")";
      return Status();
    }
    case Kind::kObject:
      if (!v.object().stable_repr()) {
        return Status::unsupported("printing a " + type_name(v) + " object is not supported");
      }
      out += v.object().repr();
      return Status();
    default: return append_str(v, out);
  }
}

Status append_str(const Value& v, std::string& out) {
  switch (v.kind()) {
    case Kind::kUndefined: return Status();
    case Kind::kNone: out += "None"; return Status();
    case Kind::kBool: out += v.as_bool() ? "True" : "False"; return Status();
    case Kind::kInt: out += std::to_string(v.as_int()); return Status();
    case Kind::kFloat: out += float_repr(v.as_double()); return Status();
    case Kind::kString: out += v.str(); return Status();
    default: return append_repr(v, out);
  }
}

Result<std::string> to_str(const Value& v) {
  if (v.is_string()) return v.str();
  std::string out;
  TS_RETURN_IF_ERROR(append_str(v, out));
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

}  // namespace tessera::tmpl
