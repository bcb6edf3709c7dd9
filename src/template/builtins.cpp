// Global functions of the chat template environment; see builtins.h.
#include "template/builtins.h"

#include <ctime>

#include "template/filters.h"

namespace tessera::tmpl {
namespace {

using BuiltinFn = Result<Value> (*)(Evaluator&, Args);

class Builtin final : public Object {
 public:
  Builtin(std::string name, BuiltinFn fn) : name_(std::move(name)), fn_(fn) {}
  std::string_view type_name() const override { return "function"; }
  bool stable_repr() const override { return false; }
  std::string repr() const override { return "<function " + name_ + ">"; }
  bool callable() const override { return true; }
  Result<Value> call(Evaluator& ev, Args args) override { return fn_(ev, std::move(args)); }

 private:
  std::string name_;
  BuiltinFn fn_;
};

Status type_error(std::string message) { return Status::invalid_input("TypeError: " + std::move(message)); }

Result<Value> builtin_range(Evaluator& ev, Args args) {
  if (!args.keyword.empty()) return type_error("range() takes no keyword arguments");
  std::size_t n = args.positional.size();
  if (n < 1 || n > 3) {
    std::string message = "range expected 1 to 3 arguments, got ";
    message += std::to_string(n);
    return type_error(std::move(message));
  }
  std::int64_t v[3] = {0, 0, 1};
  for (std::size_t i = 0; i < n; ++i) {
    const Value& a = args.positional[i];
    if (a.is_undefined()) return Status::invalid_input(a.undefined_message());
    if (!a.is_integral()) {
      std::string message(1, '\'');
      message.append(type_name(a)).append("' object cannot be interpreted as an integer");
      return type_error(std::move(message));
    }
    v[n == 1 ? 1 : i] = a.as_int();
  }
  if (v[2] == 0) return Status::invalid_input("ValueError: range() arg 3 must not be zero");
  long double count = v[2] > 0 ? (static_cast<long double>(v[1]) - v[0] + v[2] - 1) / v[2]
                               : (static_cast<long double>(v[0]) - v[1] - v[2] - 1) / -v[2];
  if (count > kMaxRange) {
    return Status::invalid_input("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (" +
                                 std::to_string(kMaxRange) + ").");
  }
  List out;
  for (std::int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2]) out.push_back(Value::integer(i));
  TS_RETURN_IF_ERROR(ev.step(out.size()));
  return Value::list(std::move(out));
}

// dict(mapping_or_pairs, **kwargs) and namespace(...) build their contents alike.
Result<Dict> dict_from(std::string_view what, Args args) {
  if (args.positional.size() > 1) {
    return type_error(std::string(what) + " expected at most 1 argument, got " +
                      std::to_string(args.positional.size()));
  }
  Dict d;
  if (!args.positional.empty()) {
    const Value& src = args.positional[0];
    if (src.is_dict()) {
      d = src.dict();
    } else {
      TS_ASSIGN_OR_RETURN(List pairs, iterate(src));
      for (const Value& p : pairs) {
        if (!p.is_sequence() || p.items().size() != 2) {
          return type_error("cannot convert " + std::string(what) + " update sequence element to a pair");
        }
        if (!hashable(p.items()[0])) return type_error("unhashable type: '" + type_name(p.items()[0]) + "'");
        d.set(p.items()[0], p.items()[1]);
      }
    }
  }
  for (auto& [k, v] : args.keyword) d.set(Value::string(k), std::move(v));
  return d;
}

Result<Value> builtin_dict(Evaluator&, Args args) {
  TS_ASSIGN_OR_RETURN(Dict d, dict_from("dict", std::move(args)));
  return Value::dict(std::move(d));
}

Result<Value> builtin_namespace(Evaluator&, Args args) {
  TS_ASSIGN_OR_RETURN(Dict d, dict_from("namespace", std::move(args)));
  auto ns = std::make_shared<Namespace>();
  for (auto& [k, v] : d.entries) {
    if (!k.is_string()) return type_error("namespace attribute names must be strings");
    ns->set(k.str(), v);
  }
  return Value::object(std::move(ns));
}

Result<Value> builtin_raise_exception(Evaluator& ev, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("raise_exception()", std::move(args), {"message"}, 1));
  TS_ASSIGN_OR_RETURN(std::string message, to_str(*a[0]));
  return Result<Value>(ev.raise(std::move(message)));
}

Result<Value> builtin_strftime_now(Evaluator& ev, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("strftime_now()", std::move(args), {"format"}, 1));
  if (!a[0]->is_string()) return type_error("strftime() argument 1 must be str, not " + type_name(*a[0]));
  const std::string& format = a[0]->str();
  if (format.empty()) return Value::string("");
  std::string buf(64 + format.size() * 8, '\0');
  std::size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &ev.now());
  if (n == 0) return Status::unsupported("strftime_now format '" + format + "' is not supported");
  buf.resize(n);
  return Value::string(std::move(buf));
}

Result<Value> builtin_unsupported(Evaluator&, Args) {
  return Status::unsupported("the cycler, joiner and lipsum globals are not supported");
}

}  // namespace

void install_builtins(Frame& globals) {
  auto add = [&](const char* name, BuiltinFn fn) {
    globals.set(name, Value::object(std::make_shared<Builtin>(name, fn)));
  };
  add("range", builtin_range);
  add("dict", builtin_dict);
  add("namespace", builtin_namespace);
  add("raise_exception", builtin_raise_exception);
  add("strftime_now", builtin_strftime_now);
  add("cycler", builtin_unsupported);
  add("joiner", builtin_unsupported);
  add("lipsum", builtin_unsupported);
}

}  // namespace tessera::tmpl
