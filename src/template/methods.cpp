// Python methods of str, dict, list and tuple; see methods.h.
#include "template/methods.h"

#include <algorithm>
#include <array>

#include "template/evaluator.h"
#include "template/filters.h"
#include "template/py_string.h"

namespace tessera::tmpl {
namespace {

Status type_error(std::string message) { return Status::invalid_input("TypeError: " + std::move(message)); }

// str(x) for arguments that must already be str.
Result<std::string> str_arg(const std::string& what, const Value& v) {
  if (!v.is_string()) return type_error(what + " must be str, not " + type_name(v));
  return v.str();
}

Result<std::optional<std::int64_t>> index_arg(const std::optional<Value>& v) {
  if (!v || v->is_none()) return std::optional<std::int64_t>();
  if (!v->is_integral()) return type_error("slice indices must be integers or None");
  return std::optional<std::int64_t>(v->as_int());
}

Result<std::optional<std::string>> chars_arg(const std::optional<Value>& v) {
  if (!v || v->is_none()) return std::optional<std::string>();
  TS_ASSIGN_OR_RETURN(std::string s, str_arg("argument", *v));
  return std::optional<std::string>(std::move(s));
}

// str.format's replacement fields: {}, {0}, {name}, {0.attr}, {0[key]}, !r / !s, no format spec.
Result<Value> str_format(Evaluator& ev, const Value& self, Args args) {
  const std::string& f = self.str();
  std::string out;
  std::size_t auto_index = 0;
  bool used_auto = false, used_manual = false;
  for (std::size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if (c == '}') {
      if (i + 1 < f.size() && f[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      return Status::invalid_input("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < f.size() && f[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    std::size_t close = f.find('}', i + 1);
    if (close == std::string::npos) return Status::invalid_input("ValueError: Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    i = close;
    char conversion = 0;
    if (std::size_t colon = field.find(':'); colon != std::string::npos) {
      if (colon + 1 < field.size()) return Status::unsupported("format specs in str.format() are not supported");
      field.resize(colon);
    }
    if (std::size_t bang = field.find('!'); bang != std::string::npos) {
      if (bang + 2 != field.size()) return Status::invalid_input("ValueError: invalid conversion in format string");
      conversion = field[bang + 1];
      field.resize(bang);
    }
    std::size_t name_end = std::min(field.find('.'), field.find('['));
    std::string head = field.substr(0, name_end);
    Value value;
    if (head.empty()) {
      if (used_manual) {
        return Status::invalid_input(
            "ValueError: cannot switch from manual field specification to automatic field numbering");
      }
      used_auto = true;
      if (auto_index >= args.positional.size()) {
        return Status::invalid_input("IndexError: Replacement index " + std::to_string(auto_index) +
                                     " out of range for positional args tuple");
      }
      value = args.positional[auto_index++];
    } else if (std::all_of(head.begin(), head.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      if (used_auto) {
        return Status::invalid_input(
            "ValueError: cannot switch from automatic field numbering to manual field specification");
      }
      used_manual = true;
      std::size_t k = std::stoul(head);
      if (k >= args.positional.size()) {
        return Status::invalid_input("IndexError: Replacement index " + head +
                                     " out of range for positional args tuple");
      }
      value = args.positional[k];
    } else {
      auto it =
          std::find_if(args.keyword.begin(), args.keyword.end(), [&](const auto& kw) { return kw.first == head; });
      if (it == args.keyword.end()) return Status::invalid_input("KeyError: '" + head + "'");
      value = it->second;
    }
    // .attr and [key] parts, looked up as the sandbox does.
    std::size_t p = name_end;
    while (p < field.size()) {
      if (field[p] == '.') {
        std::size_t e = std::min(field.find('.', p + 1), field.find('[', p + 1));
        TS_ASSIGN_OR_RETURN(value, ev.getattr(value, field.substr(p + 1, e - p - 1)));
        p = e;
      } else {
        std::size_t e = field.find(']', p);
        if (e == std::string::npos) return Status::invalid_input("ValueError: Missing ']' in format string");
        std::string key = field.substr(p + 1, e - p - 1);
        bool numeric = !key.empty() && std::all_of(key.begin(), key.end(), [](char d) { return d >= '0' && d <= '9'; });
        TS_ASSIGN_OR_RETURN(value, ev.getitem(value, numeric ? Value::integer(std::stoll(key)) : Value::string(key)));
        p = e + 1;
      }
    }
    if (value.is_undefined() && conversion != 'r') return Status::invalid_input(value.undefined_message());
    if (conversion == 'r' || conversion == 'a') {
      TS_RETURN_IF_ERROR(append_repr(value, out));
    } else if (conversion == 's' || conversion == 0) {
      TS_RETURN_IF_ERROR(append_str(value, out));
    } else {
      return Status::invalid_input(std::string("ValueError: Unknown conversion specifier ") + conversion);
    }
    TS_RETURN_IF_ERROR(ev.check_size(out.size()));
  }
  return Value::string(std::move(out));
}

Result<Value> str_method(Evaluator& ev, const Value& self, std::string_view name, Args args) {
  const std::string& s = self.str();
  std::string what = "str." + std::string(name) + "()";
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"chars"}, 0));
    TS_ASSIGN_OR_RETURN(std::optional<std::string> chars, chars_arg(a[0]));
    return Value::string(py_strip(s, chars, name != "rstrip", name != "lstrip"), self.safe());
  }
  if (name == "split" || name == "rsplit") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"sep", "maxsplit"}, 0));
    TS_ASSIGN_OR_RETURN(std::optional<std::string> sep, chars_arg(a[0]));
    std::int64_t maxsplit = -1;
    if (a[1]) {
      if (!a[1]->is_integral())
        return type_error("'" + type_name(*a[1]) + "' object cannot be interpreted as an integer");
      maxsplit = a[1]->as_int();
    }
    TS_ASSIGN_OR_RETURN(std::vector<std::string> parts, py_split(s, sep, maxsplit, name == "rsplit"));
    List out;
    for (std::string& part : parts) out.push_back(Value::string(std::move(part), self.safe()));
    return Value::list(std::move(out));
  }
  if (name == "splitlines") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"keepends"}, 0));
    List out;
    for (std::string& line : py_splitlines(s, a[0] && truthy(*a[0]))) out.push_back(Value::string(std::move(line)));
    return Value::list(std::move(out));
  }
  if (name == "startswith" || name == "endswith") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"prefix", "start", "end"}, 1));
    TS_ASSIGN_OR_RETURN(std::optional<std::int64_t> start, index_arg(a[1]));
    TS_ASSIGN_OR_RETURN(std::optional<std::int64_t> end, index_arg(a[2]));
    List candidates = a[0]->kind() == Kind::kTuple ? a[0]->items() : List{*a[0]};
    std::u32string text = decode_utf8(s);
    TS_ASSIGN_OR_RETURN(std::vector<std::size_t> idx, slice_indices(text.size(), start, end, std::nullopt));
    std::u32string window;
    for (std::size_t k : idx) window.push_back(text[k]);
    for (const Value& c : candidates) {
      if (!c.is_string()) {
        return type_error(std::string(name) + " first arg must be str or a tuple of str, not " + type_name(c));
      }
      std::u32string p = decode_utf8(c.str());
      // Python: an empty window still matches "" unless start is past the end.
      if (start && *start > static_cast<std::int64_t>(text.size())) continue;
      bool hit = p.size() <= window.size() &&
                 (name == "startswith" ? window.compare(0, p.size(), p) == 0
                                       : window.compare(window.size() - p.size(), p.size(), p) == 0);
      if (hit) return Value::boolean(true);
    }
    return Value::boolean(false);
  }
  if (name == "upper") return Value::string(py_upper(s), self.safe());
  if (name == "lower") return Value::string(py_lower(s), self.safe());
  if (name == "title") return Value::string(py_title(s), self.safe());
  if (name == "capitalize") return Value::string(py_capitalize(s), self.safe());
  if (name == "replace") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"old", "new", "count"}, 2));
    TS_ASSIGN_OR_RETURN(std::string old, str_arg("replace() argument 1", *a[0]));
    TS_ASSIGN_OR_RETURN(std::string replacement, str_arg("replace() argument 2", *a[1]));
    std::int64_t count = a[2] && a[2]->is_integral() ? a[2]->as_int() : -1;
    std::string out = py_replace(s, old, replacement, count);
    TS_RETURN_IF_ERROR(ev.check_size(out.size()));
    return Value::string(std::move(out), self.safe());
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"sub", "start", "end"}, 1));
    TS_ASSIGN_OR_RETURN(std::string sub, str_arg("argument", *a[0]));
    TS_ASSIGN_OR_RETURN(std::optional<std::int64_t> start, index_arg(a[1]));
    TS_ASSIGN_OR_RETURN(std::optional<std::int64_t> end, index_arg(a[2]));
    if (name == "count") return Value::integer(py_count(s, sub, start, end));
    std::int64_t at = py_find(s, sub, start, end, name[0] == 'r');
    if (at < 0 && (name == "index" || name == "rindex"))
      return Status::invalid_input("ValueError: substring not found");
    return Value::integer(at);
  }
  if (name == "join") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"iterable"}, 1));
    TS_ASSIGN_OR_RETURN(List items, iterate(*a[0]));
    std::string out;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        return type_error("sequence item " + std::to_string(i) + ": expected str instance, " + type_name(items[i]) +
                          " found");
      }
      if (i) out += s;
      out += items[i].str();
      TS_RETURN_IF_ERROR(ev.check_size(out.size()));
    }
    return Value::string(std::move(out));
  }
  if (name == "format") return str_format(ev, self, std::move(args));
  if (name == "removeprefix" || name == "removesuffix") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"affix"}, 1));
    TS_ASSIGN_OR_RETURN(std::string affix, str_arg("argument", *a[0]));
    if (name == "removeprefix" && s.compare(0, affix.size(), affix) == 0) return Value::string(s.substr(affix.size()));
    if (name == "removesuffix" && s.size() >= affix.size() &&
        s.compare(s.size() - affix.size(), affix.size(), affix) == 0) {
      return Value::string(s.substr(0, s.size() - affix.size()));
    }
    return Value::string(s);
  }
  if (name == "isspace") {
    TS_RETURN_IF_ERROR(bind_args(what, std::move(args), {}, 0).status());
    std::u32string t = decode_utf8(s);
    return Value::boolean(!t.empty() && std::all_of(t.begin(), t.end(), py_isspace));
  }
  return Status::unsupported(what + " is not supported");
}

Result<Value> dict_method(const Value& self, std::string_view name, Args args) {
  const Dict& d = self.dict();
  std::string what = "dict." + std::string(name) + "()";
  if (name == "get") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"key", "default"}, 1));
    if (!hashable(*a[0])) return type_error("unhashable type: '" + type_name(*a[0]) + "'");
    if (const Value* v = d.find(*a[0])) return *v;
    return a[1] ? *a[1] : Value::none();
  }
  TS_RETURN_IF_ERROR(bind_args(what, std::move(args), {}, 0).status());
  if (name == "copy") return Value::dict(d);
  List out;
  for (const auto& [k, v] : d.entries) {
    if (name == "keys") {
      out.push_back(k);
    } else if (name == "values") {
      out.push_back(v);
    } else {
      out.push_back(Value::tuple({k, v}));
    }
  }
  IteratorKind kind = name == "keys"     ? IteratorKind::kDictKeys
                      : name == "values" ? IteratorKind::kDictValues
                                         : IteratorKind::kDictItems;
  return Value::iterator(kind, std::move(out));
}

Result<Value> list_method(const Value& self, std::string_view name, Args args) {
  std::string what = type_name(self) + "." + std::string(name) + "()";
  if (name == "index" || name == "count") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"value"}, 1));
    const List& items = self.items();
    std::int64_t n = 0;
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (!equals(items[i], *a[0])) continue;
      if (name == "index") return Value::integer(static_cast<std::int64_t>(i));
      ++n;
    }
    if (name == "index") return Status::invalid_input("ValueError: value is not in " + type_name(self));
    return Value::integer(n);
  }
  if (name == "copy") {
    TS_RETURN_IF_ERROR(bind_args(what, std::move(args), {}, 0).status());
    return Value::list(self.items());
  }
  if (name == "clear") {
    TS_RETURN_IF_ERROR(bind_args(what, std::move(args), {}, 0).status());
    self.mutable_items().clear();
    return Value::none();
  }
  if (name == "pop") {  // not in the sandbox's list of mutating methods, so jinja2 allows it
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(what, std::move(args), {"index"}, 0));
    List& items = self.mutable_items();
    if (items.empty()) return Status::invalid_input("IndexError: pop from empty list");
    std::int64_t i = static_cast<std::int64_t>(items.size()) - 1;
    if (a[0]) {
      if (!a[0]->is_integral())
        return type_error("'" + type_name(*a[0]) + "' object cannot be interpreted as an integer");
      i = a[0]->as_int();
      if (i < 0) i += static_cast<std::int64_t>(items.size());
      if (i < 0 || i >= static_cast<std::int64_t>(items.size())) {
        return Status::invalid_input("IndexError: pop index out of range");
      }
    }
    Value v = items[static_cast<std::size_t>(i)];
    items.erase(items.begin() + i);
    return v;
  }
  return Status::unsupported(what + " is not supported");
}

class BoundMethod final : public Object {
 public:
  BoundMethod(Value self, std::string name) : self_(std::move(self)), name_(std::move(name)) {}
  std::string_view type_name() const override { return "builtin_function_or_method"; }
  bool stable_repr() const override { return false; }
  std::string repr() const override {
    return "<built-in method " + name_ + " of " + tmpl::type_name(self_) + " object>";
  }
  bool callable() const override { return true; }
  Result<Value> call(Evaluator& ev, Args args) override {
    switch (self_.kind()) {
      case Kind::kString: return str_method(ev, self_, name_, std::move(args));
      case Kind::kDict: return dict_method(self_, name_, std::move(args));
      default: return list_method(self_, name_, std::move(args));
    }
  }

 private:
  Value self_;
  std::string name_;
};

constexpr std::array<std::string_view, 47> kStrMethods = {
    "capitalize",   "casefold",   "center",    "count",       "encode",    "endswith",     "expandtabs",   "find",
    "format",       "format_map", "index",     "isalnum",     "isalpha",   "isascii",      "isdecimal",    "isdigit",
    "isidentifier", "islower",    "isnumeric", "isprintable", "isspace",   "istitle",      "isupper",      "join",
    "ljust",        "lower",      "lstrip",    "maketrans",   "partition", "removeprefix", "removesuffix", "replace",
    "rfind",        "rindex",     "rjust",     "rpartition",  "rsplit",    "rstrip",       "split",        "splitlines",
    "startswith",   "strip",      "swapcase",  "title",       "translate", "upper",        "zfill",
};

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

Value unsafe(const Value& object, std::string_view name) {
  return Value::undefined("SecurityError: access to attribute '" + std::string(name) + "' of '" + type_name(object) +
                          "' object is unsafe.");
}

}  // namespace

std::optional<Value> method_of(const Value& object, std::string_view name) {
  auto bound = [&] { return Value::object(std::make_shared<BoundMethod>(object, std::string(name))); };
  switch (object.kind()) {
    case Kind::kString:
      if (std::find(kStrMethods.begin(), kStrMethods.end(), name) != kStrMethods.end()) return bound();
      return std::nullopt;
    case Kind::kDict:
      if (one_of(name, {"get", "items", "keys", "values", "copy"})) return bound();
      if (one_of(name, {"clear", "pop", "popitem", "setdefault", "update"})) return unsafe(object, name);
      return std::nullopt;
    case Kind::kList:
      if (one_of(name, {"index", "count", "copy", "pop", "clear"})) return bound();
      if (one_of(name, {"append", "extend", "insert", "remove", "reverse", "sort"})) return unsafe(object, name);
      return std::nullopt;
    case Kind::kTuple:
      if (one_of(name, {"index", "count"})) return bound();
      return std::nullopt;
    default: return std::nullopt;
  }
}

}  // namespace tessera::tmpl
