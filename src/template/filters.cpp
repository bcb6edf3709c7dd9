// Jinja filters as jinja2/filters.py defines them (autoescape off, as in HF's
// environment), plus transformers' tojson; see filters.h. Lazy filters
// (select, map, unique, ...) return one-shot generators, as jinja2's do.
#include "template/filters.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>

#include "template/evaluator.h"
#include "template/methods.h"
#include "template/operators.h"
#include "template/py_string.h"

namespace tessera::tmpl {
namespace {

constexpr std::string_view kSupportedFilters[] = {
    "abs",     "attr",    "batch", "capitalize",  "count",  "d",          "default", "dictsort", "e",
    "escape",  "first",   "float", "forceescape", "format", "indent",     "int",     "items",    "join",
    "last",    "length",  "list",  "lower",       "map",    "max",        "min",     "reject",   "rejectattr",
    "replace", "reverse", "round", "safe",        "select", "selectattr", "sort",    "string",   "sum",
    "title",   "tojson",  "trim",  "unique",      "upper",
};
constexpr std::string_view kUnsupportedFilters[] = {
    "center",   "filesizeformat", "groupby", "pprint",    "random",   "slice",   "striptags",
    "truncate", "urlencode",      "urlize",  "wordcount", "wordwrap", "xmlattr",
};

Status type_error(std::string message) { return Status::invalid_input("TypeError: " + std::move(message)); }

// jinja2's soft_str: strings (Markup included) stay as they are, the rest goes through str().
Result<Value> soft_str(const Value& v) {
  if (v.is_string()) return v;
  TS_ASSIGN_OR_RETURN(std::string s, to_str(v));
  return Value::string(std::move(s));
}

Value lower_if_string(const Value& v) { return v.is_string() ? Value::string(py_lower(v.str())) : v; }

// make_attrgetter: "a.b.0" looks up a, then b, then item 0, with environment.getitem.
Result<Value> get_path(Evaluator& ev, Value item, const Value& attribute, const std::optional<Value>& fallback) {
  std::vector<Value> parts;
  if (attribute.is_string()) {
    TS_ASSIGN_OR_RETURN(std::vector<std::string> pieces, py_split(attribute.str(), std::string("."), -1, false));
    for (std::string& p : pieces) {
      bool digits = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
      parts.push_back(digits ? Value::integer(std::stoll(p)) : Value::string(std::move(p)));
    }
  } else if (!attribute.is_none()) {
    parts.push_back(attribute);
  }
  for (const Value& part : parts) {
    TS_ASSIGN_OR_RETURN(item, ev.getitem(item, part));
    if (fallback && item.is_undefined()) item = *fallback;
  }
  return item;
}

Result<bool> bool_arg(const std::optional<Value>& v, bool fallback) { return v ? truthy(*v) : fallback; }

// Sorts with Python's sorted(): stable, by a key, optionally reversed.
Result<List> sorted_by(List items, const std::vector<Value>& keys, bool reverse) {
  std::vector<std::size_t> order(items.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  Status failed;
  auto less = [&](std::size_t a, std::size_t b) {
    if (!failed.ok()) return false;
    Result<bool> lt = reverse ? less_than(keys[b], keys[a]) : less_than(keys[a], keys[b]);
    if (!lt.ok()) {
      failed = lt.status();
      return false;
    }
    return *lt;
  };
  std::stable_sort(order.begin(), order.end(), less);
  TS_RETURN_IF_ERROR(failed);
  List out;
  out.reserve(items.size());
  for (std::size_t i : order) out.push_back(std::move(items[i]));
  return out;
}

Result<Value> do_join(Evaluator& ev, const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'join'", std::move(args), {"d", "attribute"}, 0));
  TS_ASSIGN_OR_RETURN(List items, iterate(value));
  std::string sep;
  if (a[0]) {
    TS_ASSIGN_OR_RETURN(sep, to_str(*a[0]));
  }
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (a[1] && !a[1]->is_none()) {
      TS_ASSIGN_OR_RETURN(item, get_path(ev, item, *a[1], std::nullopt));
    }
    if (i) out += sep;
    TS_RETURN_IF_ERROR(append_str(item, out));
    TS_RETURN_IF_ERROR(ev.check_size(out.size()));
  }
  return Value::string(std::move(out));
}

Result<Value> do_indent(const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'indent'", std::move(args), {"width", "first", "blank"}, 0));
  if (value.is_undefined()) return Status::invalid_input(value.undefined_message());
  if (!value.is_string()) return type_error("unsupported operand type(s) for +=: '" + type_name(value) + "' and 'str'");
  std::string indention = "    ";
  if (a[0]) {
    if (a[0]->is_string()) {
      indention = a[0]->str();
    } else if (a[0]->is_integral()) {
      indention = std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, a[0]->as_int())), ' ');
    } else {
      return type_error("can't multiply sequence by non-int of type '" + type_name(*a[0]) + "'");
    }
  }
  TS_ASSIGN_OR_RETURN(bool first, bool_arg(a[1], false));
  TS_ASSIGN_OR_RETURN(bool blank, bool_arg(a[2], false));
  std::vector<std::string> lines = py_splitlines(value.str() + "\n", false);
  std::string rv;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i) rv += "\n";
    if (i == 0 || blank || !lines[i].empty()) {
      if (i > 0) rv += indention;
    }
    rv += lines[i];
  }
  if (first) rv = indention + rv;
  return Value::string(std::move(rv), value.safe());
}

// Python's int(str, base) for base 10 and base 0 style prefixes.
std::optional<std::int64_t> parse_int(std::string_view text, int base) {
  std::string s = py_strip(text, std::nullopt, true, true);
  if (s.empty()) return std::nullopt;
  bool negative = false;
  std::size_t i = 0;
  if (s[0] == '+' || s[0] == '-') {
    negative = s[0] == '-';
    i = 1;
  }
  if (base == 16 || base == 8 || base == 2) {
    char p = base == 16 ? 'x' : base == 8 ? 'o' : 'b';
    if (i + 1 < s.size() && s[i] == '0' && (s[i + 1] | 0x20) == p) i += 2;
  }
  if (i >= s.size()) return std::nullopt;
  std::int64_t v = 0;
  bool last_underscore = true;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      if (last_underscore) return std::nullopt;
      last_underscore = true;
      continue;
    }
    int d = (c >= '0' && c <= '9') ? c - '0' : ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') ? (c | 0x20) - 'a' + 10 : 99;
    if (d >= base) return std::nullopt;
    if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return std::nullopt;
    last_underscore = false;
  }
  if (last_underscore) return std::nullopt;
  return negative ? -v : v;
}

// Python's float(str).
std::optional<double> parse_float(std::string_view text) {
  std::string s = py_strip(text, std::nullopt, true, true);
  std::string lower = py_lower(s);
  std::string body = lower;
  double sign = 1;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    sign = body[0] == '-' ? -1 : 1;
    body = body.substr(1);
  }
  if (body == "inf" || body == "infinity") return sign * HUGE_VAL;
  if (body == "nan") return std::nan("");
  std::string cleaned;
  for (std::size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '_') {
      bool ok = i > 0 && i + 1 < s.size() && std::isdigit(static_cast<unsigned char>(s[i - 1])) &&
                std::isdigit(static_cast<unsigned char>(s[i + 1]));
      if (!ok) return std::nullopt;
      continue;
    }
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-')) {
      return std::nullopt;
    }
    cleaned.push_back(c);
  }
  if (cleaned.empty()) return std::nullopt;
  char* end = nullptr;
  double v = std::strtod(cleaned.c_str(), &end);
  if (end != cleaned.c_str() + cleaned.size()) return std::nullopt;
  return v;
}

Result<Value> do_int(const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'int'", std::move(args), {"default", "base"}, 0));
  Value fallback = a[0] ? *a[0] : Value::integer(0);
  int base = a[1] && a[1]->is_integral() ? static_cast<int>(a[1]->as_int()) : 10;
  switch (value.kind()) {
    case Kind::kUndefined: return Status::invalid_input(value.undefined_message());
    case Kind::kBool:
    case Kind::kInt: return Value::integer(value.as_int());
    case Kind::kFloat: {
      double d = value.as_double();
      if (std::isnan(d)) return fallback;  // ValueError, which the filter catches
      if (std::isinf(d)) return Status::invalid_input("OverflowError: cannot convert float infinity to integer");
      if (std::fabs(d) >= 9.2e18) return Status::unsupported("integer beyond 64 bits is not supported");
      return Value::integer(static_cast<std::int64_t>(d));
    }
    case Kind::kString: {
      if (auto v = parse_int(value.str(), base)) return Value::integer(*v);
      std::optional<double> f = parse_float(value.str());
      if (!f || std::isnan(*f)) return fallback;
      if (std::isinf(*f)) return Status::invalid_input("OverflowError: cannot convert float infinity to integer");
      if (std::fabs(*f) >= 9.2e18) return Status::unsupported("integer beyond 64 bits is not supported");
      return Value::integer(static_cast<std::int64_t>(*f));
    }
    default: return fallback;
  }
}

Result<Value> do_float(const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'float'", std::move(args), {"default"}, 0));
  Value fallback = a[0] ? *a[0] : Value::floating(0.0);
  switch (value.kind()) {
    case Kind::kUndefined: return Status::invalid_input(value.undefined_message());
    case Kind::kBool:
    case Kind::kInt:
    case Kind::kFloat: return Value::floating(value.as_double());
    case Kind::kString:
      if (auto f = parse_float(value.str())) return Value::floating(*f);
      return fallback;
    default: return fallback;
  }
}

Result<Value> do_round(const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'round'", std::move(args), {"precision", "method"}, 0));
  std::int64_t precision = a[0] && a[0]->is_integral() ? a[0]->as_int() : 0;
  std::string method = a[1] && a[1]->is_string() ? a[1]->str() : "common";
  if (method != "common" && method != "ceil" && method != "floor") {
    return Status::invalid_input("FilterArgumentError: method must be common, ceil or floor");
  }
  if (value.is_undefined()) return Status::invalid_input(value.undefined_message());
  if (!value.is_number()) return type_error("type " + type_name(value) + " doesn't define __round__ method");
  if (precision < 0 || precision > 15) return Status::unsupported("round() precision outside 0..15 is not supported");
  if (method == "common") {
    if (value.is_integral()) return Value::integer(value.as_int());
    // Python rounds the exact binary value half-to-even at `precision` digits, as printf does.
    char buf[512];
    std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(precision), value.as_double());
    return Value::floating(std::strtod(buf, nullptr));
  }
  double scale = std::pow(10.0, static_cast<double>(precision));
  double x = value.as_double() * scale;
  return Value::floating((method == "ceil" ? std::ceil(x) : std::floor(x)) / scale);
}

Result<Value> do_tojson(const Value& value, Args args) {
  // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'tojson'", std::move(args),
                                             {"ensure_ascii", "indent", "separators", "sort_keys"}, 0));
  JsonOptions options;
  options.ensure_ascii = a[0] && truthy(*a[0]);
  if (a[1] && !a[1]->is_none()) {
    options.indent_set = true;
    if (a[1]->is_string()) {
      options.indent = a[1]->str();
    } else if (a[1]->is_integral()) {
      options.indent = std::string(static_cast<std::size_t>(std::max<std::int64_t>(0, a[1]->as_int())), ' ');
    } else {
      return type_error("indent must be an int or a str");
    }
  }
  if (a[2] && !a[2]->is_none()) {
    if (!a[2]->is_sequence() || a[2]->items().size() != 2 || !a[2]->items()[0].is_string() ||
        !a[2]->items()[1].is_string()) {
      return type_error("separators must be a pair of strings");
    }
    options.separators_set = true;
    options.item_separator = a[2]->items()[0].str();
    options.key_separator = a[2]->items()[1].str();
  }
  options.sort_keys = a[3] && truthy(*a[3]);
  TS_ASSIGN_OR_RETURN(std::string json, to_json(value, options));
  return Value::string(std::move(json));
}

// map / select / reject / selectattr / rejectattr: all take `if value:` first.
Result<Value> do_map(Evaluator& ev, const Value& value, Args args) {
  if (!truthy(value)) return Value::iterator(IteratorKind::kGenerator, {});
  TS_ASSIGN_OR_RETURN(List items, iterate(value));
  List out;
  if (args.positional.empty() &&
      std::any_of(args.keyword.begin(), args.keyword.end(), [](const auto& kw) { return kw.first == "attribute"; })) {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'map'", std::move(args), {"attribute", "default"}, 1));
    for (const Value& item : items) {
      TS_ASSIGN_OR_RETURN(Value v, get_path(ev, item, *a[0], a[1]));
      out.push_back(std::move(v));
    }
    return Value::iterator(IteratorKind::kGenerator, std::move(out));
  }
  if (args.positional.empty()) return Status::invalid_input("FilterArgumentError: map requires a filter argument");
  Value name = args.positional.front();
  args.positional.erase(args.positional.begin());
  if (!name.is_string()) return type_error("filter name must be a string");
  for (const Value& item : items) {
    TS_ASSIGN_OR_RETURN(Value v, apply_filter(ev, name.str(), item, args));
    out.push_back(std::move(v));
  }
  return Value::iterator(IteratorKind::kGenerator, std::move(out));
}

Result<Value> select_or_reject(Evaluator& ev, const Value& value, Args args, bool lookup_attr, bool reject) {
  if (!truthy(value)) return Value::iterator(IteratorKind::kGenerator, {});
  TS_ASSIGN_OR_RETURN(List items, iterate(value));
  std::optional<Value> attr;
  if (lookup_attr) {
    if (args.positional.empty())
      return Status::invalid_input("FilterArgumentError: Missing parameter for attribute name");
    attr = args.positional.front();
    args.positional.erase(args.positional.begin());
  }
  std::optional<std::string> test;
  if (!args.positional.empty()) {
    if (!args.positional.front().is_string()) return type_error("test name must be a string");
    test = args.positional.front().str();
    args.positional.erase(args.positional.begin());
  }
  List out;
  for (const Value& item : items) {
    Value subject = item;
    if (attr) {
      TS_ASSIGN_OR_RETURN(subject, get_path(ev, item, *attr, std::nullopt));
    }
    bool pass;
    if (test) {
      if (test_support(*test) == Support::kUnknown) {
        return Status::invalid_input("TemplateRuntimeError: No test named '" + *test + "'.");
      }
      TS_ASSIGN_OR_RETURN(pass, apply_test(ev, *test, subject, args));
    } else {
      pass = truthy(subject);
    }
    if (pass != reject) out.push_back(item);
  }
  return Value::iterator(IteratorKind::kGenerator, std::move(out));
}

Result<Value> min_or_max(Evaluator& ev, const Value& value, Args args, bool want_max) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args(want_max ? "filter 'max'" : "filter 'min'", std::move(args),
                                             {"case_sensitive", "attribute"}, 0));
  TS_ASSIGN_OR_RETURN(List items, iterate(value));
  if (items.empty()) return Value::undefined("UndefinedError: No aggregated item, sequence was empty.");
  TS_ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(a[0], false));
  std::size_t best = 0;
  Value best_key;
  for (std::size_t i = 0; i < items.size(); ++i) {
    Value key = items[i];
    if (a[1] && !a[1]->is_none()) {
      TS_ASSIGN_OR_RETURN(key, get_path(ev, key, *a[1], std::nullopt));
    }
    if (!case_sensitive) key = lower_if_string(key);
    if (i == 0) {
      best_key = key;
      continue;
    }
    TS_ASSIGN_OR_RETURN(bool better, want_max ? less_than(best_key, key) : less_than(key, best_key));
    if (better) {
      best = i;
      best_key = key;
    }
  }
  return items[best];
}

Result<Value> do_sort(Evaluator& ev, const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a,
                      bind_args("filter 'sort'", std::move(args), {"reverse", "case_sensitive", "attribute"}, 0));
  TS_ASSIGN_OR_RETURN(List items, iterate(value));
  TS_ASSIGN_OR_RETURN(bool reverse, bool_arg(a[0], false));
  TS_ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(a[1], false));
  std::vector<Value> attributes;
  if (a[2] && a[2]->is_string()) {
    TS_ASSIGN_OR_RETURN(std::vector<std::string> names, py_split(a[2]->str(), std::string(","), -1, false));
    for (std::string& n : names) attributes.push_back(Value::string(std::move(n)));
  } else if (a[2] && !a[2]->is_none()) {
    attributes.push_back(*a[2]);
  }
  std::vector<Value> keys;
  for (const Value& item : items) {
    // make_multi_attrgetter: the key is a list of the attribute values (a one-item list without attribute).
    List key;
    if (attributes.empty()) {
      key.push_back(case_sensitive ? item : lower_if_string(item));
    }
    for (const Value& attribute : attributes) {
      TS_ASSIGN_OR_RETURN(Value v, get_path(ev, item, attribute, std::nullopt));
      key.push_back(case_sensitive ? v : lower_if_string(v));
    }
    keys.push_back(attributes.empty() ? key[0] : Value::list(std::move(key)));
  }
  TS_ASSIGN_OR_RETURN(List sorted, sorted_by(std::move(items), keys, reverse));
  return Value::list(std::move(sorted));
}

Result<Value> do_dictsort(const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a,
                      bind_args("filter 'dictsort'", std::move(args), {"case_sensitive", "by", "reverse"}, 0));
  if (value.is_undefined()) return Status::invalid_input(value.undefined_message());
  if (!value.is_dict()) {
    return Status::invalid_input("UndefinedError: '" + type_name(value) + " object' has no attribute 'items'");
  }
  TS_ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(a[0], false));
  std::string by = a[1] && a[1]->is_string() ? a[1]->str() : "key";
  if (by != "key" && by != "value") {
    return Status::invalid_input("FilterArgumentError: You can only sort by either \"key\" or \"value\"");
  }
  TS_ASSIGN_OR_RETURN(bool reverse, bool_arg(a[2], false));
  List items;
  std::vector<Value> keys;
  for (const auto& [k, v] : value.dict().entries) {
    items.push_back(Value::tuple({k, v}));
    const Value& key = by == "key" ? k : v;
    keys.push_back(case_sensitive ? key : lower_if_string(key));
  }
  TS_ASSIGN_OR_RETURN(List sorted, sorted_by(std::move(items), keys, reverse));
  return Value::list(std::move(sorted));
}

Result<Value> do_unique(Evaluator& ev, const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'unique'", std::move(args), {"case_sensitive", "attribute"}, 0));
  TS_ASSIGN_OR_RETURN(List items, iterate(value));
  TS_ASSIGN_OR_RETURN(bool case_sensitive, bool_arg(a[0], false));
  List seen, out;
  for (const Value& item : items) {
    Value key = item;
    if (a[1] && !a[1]->is_none()) {
      TS_ASSIGN_OR_RETURN(key, get_path(ev, key, *a[1], std::nullopt));
    }
    if (!case_sensitive) key = lower_if_string(key);
    if (!hashable(key)) return type_error("unhashable type: '" + type_name(key) + "'");
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    TS_RETURN_IF_ERROR(ev.step());
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::iterator(IteratorKind::kGenerator, std::move(out));
}

Result<Value> do_first_or_last(const Value& value, bool last) {
  if (last) {
    if (value.kind() == Kind::kIterator) {
      IteratorKind k = value.iterator_state().kind;
      if (k == IteratorKind::kGenerator || k == IteratorKind::kReversed) {
        return type_error("'" + type_name(value) + "' object is not reversible");
      }
    } else if (!value.is_undefined() && !value.is_string() && !value.is_sequence() && !value.is_dict()) {
      return type_error("'" + type_name(value) + "' object is not reversible");
    }
  }
  if (!last && value.kind() == Kind::kIterator) {
    IteratorState& it = value.iterator_state();
    bool one_shot = it.kind == IteratorKind::kGenerator || it.kind == IteratorKind::kReversed;
    std::size_t at = one_shot ? it.cursor : 0;
    if (at >= it.items.size()) return Value::undefined("UndefinedError: No first item, sequence was empty.");
    if (one_shot) ++it.cursor;
    return it.items[at];
  }
  TS_ASSIGN_OR_RETURN(List items, iterate(value));
  if (items.empty()) {
    return Value::undefined(last ? "UndefinedError: No last item, sequence was empty."
                                 : "UndefinedError: No first item, sequence was empty.");
  }
  return last ? items.back() : items.front();
}

Result<Value> do_reverse(const Value& value) {
  if (value.is_string()) {
    std::u32string t = decode_utf8(value.str());
    std::reverse(t.begin(), t.end());
    return Value::string(encode_utf8(t), value.safe());
  }
  if (value.is_sequence() || value.is_dict() || value.is_undefined()) {
    TS_ASSIGN_OR_RETURN(List items, iterate(value));
    std::reverse(items.begin(), items.end());
    return Value::iterator(IteratorKind::kReversed, std::move(items));
  }
  // reversed() refused it: jinja2 falls back to list(value) reversed.
  TS_ASSIGN_OR_RETURN(List items, iterate(value));
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Result<Value> do_sum(Evaluator& ev, const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'sum'", std::move(args), {"attribute", "start"}, 0));
  TS_ASSIGN_OR_RETURN(List items, iterate(value));
  Value total = a[1] ? *a[1] : Value::integer(0);
  for (const Value& item : items) {
    Value v = item;
    if (a[0] && !a[0]->is_none()) {
      TS_ASSIGN_OR_RETURN(v, get_path(ev, v, *a[0], std::nullopt));
    }
    if (total.is_string()) return type_error("sum() can't sum strings [use ''.join(seq) instead]");
    TS_ASSIGN_OR_RETURN(total, binary_op(BinaryOp::kAdd, total, v, ev.limits().max_output_bytes));
  }
  return total;
}

Result<Value> do_batch(const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'batch'", std::move(args), {"linecount", "fill_with"}, 1));
  if (!a[0]->is_integral() || a[0]->as_int() <= 0) return type_error("batch size must be a positive integer");
  auto n = static_cast<std::size_t>(a[0]->as_int());
  TS_ASSIGN_OR_RETURN(List items, iterate(value));
  List out, row;
  for (const Value& item : items) {
    if (row.size() == n) {
      out.push_back(Value::list(std::move(row)));
      row.clear();
    }
    row.push_back(item);
  }
  if (!row.empty()) {
    if (a[1] && !a[1]->is_none()) {
      while (row.size() < n) row.push_back(*a[1]);
    }
    out.push_back(Value::list(std::move(row)));
  }
  return Value::iterator(IteratorKind::kGenerator, std::move(out));
}

Result<Value> do_items(const Value& value) {
  if (value.is_undefined()) return Value::iterator(IteratorKind::kGenerator, {});
  if (!value.is_dict()) return type_error("Can only get item pairs from a mapping.");
  List out;
  for (const auto& [k, v] : value.dict().entries) out.push_back(Value::tuple({k, v}));
  return Value::iterator(IteratorKind::kGenerator, std::move(out));
}

Result<Value> do_attr(const Value& value, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'attr'", std::move(args), {"name"}, 1));
  if (!a[0]->is_string()) return type_error("attribute name must be a string");
  if (value.is_undefined()) return Status::invalid_input(value.undefined_message());
  if (std::optional<Value> m = method_of(value, a[0]->str())) return *m;
  if (value.kind() == Kind::kObject) {
    if (std::optional<Value> v = value.object().attribute(a[0]->str())) return *v;
  }
  return Value::undefined("UndefinedError: '" + type_name(value) + " object' has no attribute '" + a[0]->str() + "'");
}

Result<Value> do_format(const Value& value, Args args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    return Status::invalid_input("FilterArgumentError: can't handle positional and keyword arguments at the same time");
  }
  TS_ASSIGN_OR_RETURN(Value s, soft_str(value));
  Value format_args;
  if (!args.keyword.empty()) {
    Dict d;
    for (auto& [k, v] : args.keyword) d.set(Value::string(k), v);
    format_args = Value::dict(std::move(d));
  } else {
    format_args = Value::tuple(std::move(args.positional));
  }
  TS_ASSIGN_OR_RETURN(std::string out, percent_format(s.str(), format_args));
  return Value::string(std::move(out));
}

Result<Value> string_filter(const Value& value, std::string_view name, Args args) {
  if (name == "trim") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'trim'", std::move(args), {"chars"}, 0));
    TS_ASSIGN_OR_RETURN(Value s, soft_str(value));
    std::optional<std::string> chars;
    if (a[0] && !a[0]->is_none()) {
      if (!a[0]->is_string()) return type_error("strip arg must be None or str");
      chars = a[0]->str();
    }
    return Value::string(py_strip(s.str(), chars, true, true), s.safe());
  }
  TS_RETURN_IF_ERROR(bind_args("filter '" + std::string(name) + "'", std::move(args), {}, 0).status());
  TS_ASSIGN_OR_RETURN(Value s, soft_str(value));
  if (name == "upper") return Value::string(py_upper(s.str()), s.safe());
  if (name == "lower") return Value::string(py_lower(s.str()), s.safe());
  if (name == "capitalize") return Value::string(py_capitalize(s.str()), s.safe());
  if (name == "title") return Value::string(jinja_title(s.str()), s.safe());
  if (name == "string") return s;
  if (name == "safe") return Value::string(s.str(), true);
  // escape / e / forceescape
  if (s.safe() && name != "forceescape") return s;
  return Value::string(html_escape(s.str()), true);
}

}  // namespace

Support filter_support(std::string_view name) {
  if (std::find(std::begin(kSupportedFilters), std::end(kSupportedFilters), name) != std::end(kSupportedFilters)) {
    return Support::kSupported;
  }
  if (std::find(std::begin(kUnsupportedFilters), std::end(kUnsupportedFilters), name) !=
      std::end(kUnsupportedFilters)) {
    return Support::kUnsupported;
  }
  return Support::kUnknown;
}

Result<BoundArgs> bind_args(std::string_view what, Args args, std::initializer_list<std::string_view> names,
                            std::size_t required) {
  BoundArgs bound(names.size());
  if (args.positional.size() > names.size()) {
    return type_error(std::string(what) + " takes at most " + std::to_string(names.size()) + " argument(s) (" +
                      std::to_string(args.positional.size()) + " given)");
  }
  for (std::size_t i = 0; i < args.positional.size(); ++i) bound[i] = std::move(args.positional[i]);
  for (auto& [key, value] : args.keyword) {
    auto it = std::find(names.begin(), names.end(), key);
    if (it == names.end()) return type_error(std::string(what) + " got an unexpected keyword argument '" + key + "'");
    auto index = static_cast<std::size_t>(it - names.begin());
    if (bound[index]) return type_error(std::string(what) + " got multiple values for argument '" + key + "'");
    bound[index] = std::move(value);
  }
  for (std::size_t i = 0; i < required; ++i) {
    if (!bound[i]) {
      return type_error(std::string(what) + " missing required argument '" + std::string(*(names.begin() + i)) + "'");
    }
  }
  return bound;
}

Result<Value> apply_filter(Evaluator& ev, std::string_view name, const Value& value, Args args) {
  TS_RETURN_IF_ERROR(ev.step());
  if (name == "length" || name == "count") {
    TS_RETURN_IF_ERROR(bind_args("filter 'length'", std::move(args), {}, 0).status());
    TS_ASSIGN_OR_RETURN(std::size_t n, length(value));
    return Value::integer(static_cast<std::int64_t>(n));
  }
  if (name == "default" || name == "d") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'default'", std::move(args), {"default_value", "boolean"}, 0));
    bool boolean = a[1] && truthy(*a[1]);
    if (value.is_undefined() || (boolean && !truthy(value))) return a[0] ? *a[0] : Value::string("");
    return value;
  }
  if (name == "join") return do_join(ev, value, std::move(args));
  if (name == "tojson") return do_tojson(value, std::move(args));
  if (name == "list") {
    TS_RETURN_IF_ERROR(bind_args("filter 'list'", std::move(args), {}, 0).status());
    TS_ASSIGN_OR_RETURN(List items, iterate(value));
    return Value::list(std::move(items));
  }
  if (name == "items") {
    TS_RETURN_IF_ERROR(bind_args("filter 'items'", std::move(args), {}, 0).status());
    return do_items(value);
  }
  if (name == "first" || name == "last") {
    TS_RETURN_IF_ERROR(bind_args("filter '" + std::string(name) + "'", std::move(args), {}, 0).status());
    return do_first_or_last(value, name == "last");
  }
  if (name == "reverse") {
    TS_RETURN_IF_ERROR(bind_args("filter 'reverse'", std::move(args), {}, 0).status());
    return do_reverse(value);
  }
  if (name == "replace") {
    TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("filter 'replace'", std::move(args), {"old", "new", "count"}, 2));
    TS_ASSIGN_OR_RETURN(std::string s, to_str(value));
    TS_ASSIGN_OR_RETURN(std::string old, to_str(*a[0]));
    TS_ASSIGN_OR_RETURN(std::string replacement, to_str(*a[1]));
    std::int64_t count = a[2] && a[2]->is_integral() ? a[2]->as_int() : -1;
    std::string out = py_replace(s, old, replacement, count);
    TS_RETURN_IF_ERROR(ev.check_size(out.size()));
    return Value::string(std::move(out));
  }
  if (name == "map") return do_map(ev, value, std::move(args));
  if (name == "select" || name == "reject")
    return select_or_reject(ev, value, std::move(args), false, name == "reject");
  if (name == "selectattr" || name == "rejectattr") {
    return select_or_reject(ev, value, std::move(args), true, name == "rejectattr");
  }
  if (name == "dictsort") return do_dictsort(value, std::move(args));
  if (name == "sort") return do_sort(ev, value, std::move(args));
  if (name == "unique") return do_unique(ev, value, std::move(args));
  if (name == "min" || name == "max") return min_or_max(ev, value, std::move(args), name == "max");
  if (name == "indent") return do_indent(value, std::move(args));
  if (name == "int") return do_int(value, std::move(args));
  if (name == "float") return do_float(value, std::move(args));
  if (name == "round") return do_round(value, std::move(args));
  if (name == "abs") {
    TS_RETURN_IF_ERROR(bind_args("filter 'abs'", std::move(args), {}, 0).status());
    if (value.is_undefined()) return Status::invalid_input(value.undefined_message());
    if (value.kind() == Kind::kFloat) return Value::floating(std::fabs(value.as_double()));
    if (value.is_integral()) {
      if (value.as_int() == INT64_MIN) return Status::unsupported("integer beyond 64 bits is not supported");
      return Value::integer(value.as_int() < 0 ? -value.as_int() : value.as_int());
    }
    return type_error("bad operand type for abs(): '" + type_name(value) + "'");
  }
  if (name == "sum") return do_sum(ev, value, std::move(args));
  if (name == "batch") return do_batch(value, std::move(args));
  if (name == "attr") return do_attr(value, std::move(args));
  if (name == "format") return do_format(value, std::move(args));
  if (name == "trim" || name == "upper" || name == "lower" || name == "capitalize" || name == "title" ||
      name == "string" || name == "safe" || name == "escape" || name == "e" || name == "forceescape") {
    return string_filter(value, name, std::move(args));
  }
  if (filter_support(name) == Support::kUnsupported) {
    return Status::unsupported("filter '" + std::string(name) + "' is not supported");
  }
  return Status::invalid_input("TemplateRuntimeError: No filter named '" + std::string(name) + "' found.");
}

}  // namespace tessera::tmpl
