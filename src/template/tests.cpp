// Jinja tests (`x is defined`, `x is string`, ...) as jinja2/tests.py defines
// them; see filters.h.
#include <algorithm>
#include <iterator>

#include "template/evaluator.h"
#include "template/filters.h"
#include "template/operators.h"

namespace tessera::tmpl {
namespace {

constexpr std::string_view kSupportedTests[] = {
    "odd",      "even",     "divisibleby", "defined", "undefined", "filter",      "test",    "none",
    "boolean",  "false",    "true",        "integer", "float",     "string",      "mapping", "number",
    "sequence", "iterable", "callable",    "sameas",  "escaped",   "in",          "==",      "eq",
    "equalto",  "!=",       "ne",          ">",       "gt",        "greaterthan", "ge",      ">=",
    "<",        "lt",       "lessthan",    "<=",      "le",
};
constexpr std::string_view kUnsupportedTests[] = {"lower", "upper"};

Result<Value> one_arg(std::string_view name, Args args) {
  TS_ASSIGN_OR_RETURN(BoundArgs a, bind_args("test '" + std::string(name) + "'", std::move(args), {"other"}, 1));
  return *a[0];
}

bool is_sequence(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kString:
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kDict: return true;
    default: return false;
  }
}

bool is_iterable(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined:
    case Kind::kString:
    case Kind::kList:
    case Kind::kTuple:
    case Kind::kDict:
    case Kind::kIterator: return true;
    case Kind::kObject: return v.object().type_name() == "LoopContext";
    default: return false;
  }
}

}  // namespace

Support test_support(std::string_view name) {
  if (std::find(std::begin(kSupportedTests), std::end(kSupportedTests), name) != std::end(kSupportedTests)) {
    return Support::kSupported;
  }
  if (std::find(std::begin(kUnsupportedTests), std::end(kUnsupportedTests), name) != std::end(kUnsupportedTests)) {
    return Support::kUnsupported;
  }
  return Support::kUnknown;
}

Result<bool> apply_test(Evaluator& ev, std::string_view name, const Value& v, Args args) {
  TS_RETURN_IF_ERROR(ev.step());
  auto no_args = [&]() -> Status {
    return bind_args("test '" + std::string(name) + "'", std::move(args), {}, 0).status();
  };
  if (name == "defined" || name == "undefined") {
    TS_RETURN_IF_ERROR(no_args());
    return v.is_undefined() == (name == "undefined");
  }
  if (name == "none") {
    TS_RETURN_IF_ERROR(no_args());
    return v.is_none();
  }
  if (name == "boolean" || name == "true" || name == "false") {
    TS_RETURN_IF_ERROR(no_args());
    if (v.kind() != Kind::kBool) return false;
    return name == "boolean" || v.as_bool() == (name == "true");
  }
  if (name == "integer") {
    TS_RETURN_IF_ERROR(no_args());
    return v.kind() == Kind::kInt;
  }
  if (name == "float") {
    TS_RETURN_IF_ERROR(no_args());
    return v.kind() == Kind::kFloat;
  }
  if (name == "number") {
    TS_RETURN_IF_ERROR(no_args());
    return v.is_number();
  }
  if (name == "string") {
    TS_RETURN_IF_ERROR(no_args());
    return v.is_string();
  }
  if (name == "mapping") {
    TS_RETURN_IF_ERROR(no_args());
    return v.is_dict();
  }
  if (name == "sequence") {
    TS_RETURN_IF_ERROR(no_args());
    return is_sequence(v);
  }
  if (name == "iterable") {
    TS_RETURN_IF_ERROR(no_args());
    return is_iterable(v);
  }
  if (name == "callable") {
    TS_RETURN_IF_ERROR(no_args());
    // jinja2's Undefined defines __call__ (to fail), so Python calls it callable.
    return v.is_undefined() || (v.kind() == Kind::kObject && v.object().callable());
  }
  if (name == "escaped") {
    TS_RETURN_IF_ERROR(no_args());
    return v.is_string() && v.safe();
  }
  if (name == "filter" || name == "test") {
    TS_RETURN_IF_ERROR(no_args());
    if (!v.is_string()) return false;
    Support s = name == "filter" ? filter_support(v.str()) : test_support(v.str());
    return s != Support::kUnknown;
  }
  if (name == "odd" || name == "even") {
    TS_RETURN_IF_ERROR(no_args());
    TS_ASSIGN_OR_RETURN(Value r, binary_op(BinaryOp::kMod, v, Value::integer(2), ev.limits().max_output_bytes));
    return equals(r, Value::integer(name == "odd" ? 1 : 0));
  }
  if (name == "divisibleby") {
    TS_ASSIGN_OR_RETURN(Value n, one_arg(name, std::move(args)));
    TS_ASSIGN_OR_RETURN(Value r, binary_op(BinaryOp::kMod, v, n, ev.limits().max_output_bytes));
    return equals(r, Value::integer(0));
  }
  TS_ASSIGN_OR_RETURN(Value other, one_arg(name, std::move(args)));
  if (name == "sameas") {
    if (v.kind() != other.kind()) return false;
    if (v.kind() == Kind::kNone || v.kind() == Kind::kUndefined) return v.kind() == Kind::kNone;
    if (v.kind() == Kind::kBool) return v.as_bool() == other.as_bool();
    if (v.is_integral() || v.kind() == Kind::kFloat) return equals(v, other);  // small ints are shared in CPython
    return v.identity() == other.identity();
  }
  if (name == "in") return contains(other, v);
  if (name == "==" || name == "eq" || name == "equalto") return equals(v, other);
  if (name == "!=" || name == "ne") return !equals(v, other);
  if (name == "<" || name == "lt" || name == "lessthan") return less_than(v, other);
  if (name == ">" || name == "gt" || name == "greaterthan") return less_than(other, v);
  if (name == "<=" || name == "le") {
    TS_ASSIGN_OR_RETURN(bool lt, less_than(v, other));
    return lt || equals(v, other);
  }
  if (name == ">=" || name == "ge") {
    TS_ASSIGN_OR_RETURN(bool gt, less_than(other, v));
    return gt || equals(v, other);
  }
  if (test_support(name) == Support::kUnsupported) {
    return Status::unsupported("test '" + std::string(name) + "' is not supported");
  }
  return Status::invalid_input("TemplateRuntimeError: No test named '" + std::string(name) + "' found.");
}

}  // namespace tessera::tmpl
