// Python operator semantics; see operators.h. Integers are 64-bit: a result
// that Python would grow past that is refused rather than wrapped.
#include "template/operators.h"

#include <cmath>
#include <cstdio>

#include "template/py_string.h"

namespace tessera::tmpl {
namespace {

Status type_error(std::string message) { return Status::invalid_input("TypeError: " + std::move(message)); }

Status overflow() { return Status::unsupported("integer arithmetic beyond 64 bits is not supported"); }

Status undefined_error(const Value& a, const Value& b) {
  return Status::invalid_input(a.is_undefined() ? a.undefined_message() : b.undefined_message());
}

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd: return "+";
    case BinaryOp::kSub: return "-";
    case BinaryOp::kMul: return "*";
    case BinaryOp::kDiv: return "/";
    case BinaryOp::kFloorDiv: return "//";
    case BinaryOp::kMod: return "%";
    case BinaryOp::kPow: return "** or pow()";
  }
  return "?";
}

Status unsupported_operands(BinaryOp op, const Value& a, const Value& b) {
  return type_error(std::string("unsupported operand type(s) for ") + op_symbol(op) + ": '" + type_name(a) + "' and '" +
                    type_name(b) + "'");
}

// CPython's float floor division and modulo (float_divmod).
void float_divmod(double vx, double wx, double* floordiv, double* mod) {
  double m = std::fmod(vx, wx);
  double div = (vx - m) / wx;
  if (m != 0.0) {
    if ((wx < 0) != (m < 0)) {
      m += wx;
      div -= 1.0;
    }
  } else {
    m = std::copysign(0.0, wx);
  }
  double fd;
  if (div != 0.0) {
    fd = std::floor(div);
    if (div - fd > 0.5) fd += 1.0;
  } else {
    fd = std::copysign(0.0, vx / wx);
  }
  *floordiv = fd;
  *mod = m;
}

Result<Value> repeat(const Value& seq, std::int64_t times, std::size_t max_bytes) {
  if (times < 0) times = 0;
  auto n = static_cast<std::size_t>(times);
  if (seq.is_string()) {
    if (n && seq.str().size() > max_bytes / n)
      return Status::invalid_input("string repetition exceeds the output limit");
    std::string out;
    out.reserve(seq.str().size() * n);
    for (std::size_t i = 0; i < n; ++i) out += seq.str();
    return Value::string(std::move(out), seq.safe());
  }
  const List& items = seq.items();
  if (n && items.size() > (max_bytes / 16) / n) return Status::invalid_input("list repetition exceeds the size limit");
  List out;
  out.reserve(items.size() * n);
  for (std::size_t i = 0; i < n; ++i) out.insert(out.end(), items.begin(), items.end());
  return seq.kind() == Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
}

Result<Value> add(const Value& a, const Value& b, std::size_t max_bytes) {
  if (a.is_integral() && b.is_integral()) {
    std::int64_t r;
    if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) return overflow();
    return Value::integer(r);
  }
  if (a.is_number() && b.is_number()) return Value::floating(a.as_double() + b.as_double());
  if (a.is_string() && b.is_string()) {
    if (a.str().size() + b.str().size() > max_bytes) return Status::invalid_input("string exceeds the output limit");
    // markupsafe: Markup + str escapes the str; the result is Markup.
    if (a.safe() != b.safe()) {
      return Value::string(a.safe() ? a.str() + html_escape(b.str()) : html_escape(a.str()) + b.str(), true);
    }
    return Value::string(a.str() + b.str(), a.safe());
  }
  if (a.is_sequence() && a.kind() == b.kind()) {
    List out = a.items();
    out.insert(out.end(), b.items().begin(), b.items().end());
    return a.kind() == Kind::kTuple ? Value::tuple(std::move(out)) : Value::list(std::move(out));
  }
  if (a.is_string() || a.is_sequence()) {
    return type_error("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
  }
  return unsupported_operands(BinaryOp::kAdd, a, b);
}

Result<Value> integer_pow(std::int64_t base, std::int64_t exp) {
  std::int64_t result = 1;
  while (exp > 0) {
    if (exp & 1) {
      if (__builtin_mul_overflow(result, base, &result)) return overflow();
    }
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) return overflow();
  }
  return Value::integer(result);
}

}  // namespace

Result<Value> binary_op(BinaryOp op, const Value& a, const Value& b, std::size_t max_bytes) {
  if (op == BinaryOp::kMod && a.is_string()) {  // str % Undefined formats it as '' (it is not an operand error)
    TS_ASSIGN_OR_RETURN(std::string s, percent_format(a.str(), b));
    return Value::string(std::move(s));
  }
  if (a.is_undefined() || b.is_undefined()) return undefined_error(a, b);
  if (op == BinaryOp::kAdd) return add(a, b, max_bytes);
  if (op == BinaryOp::kMul) {
    if ((a.is_string() || a.is_sequence()) && b.is_integral()) return repeat(a, b.as_int(), max_bytes);
    if ((b.is_string() || b.is_sequence()) && a.is_integral()) return repeat(b, a.as_int(), max_bytes);
  }
  if (!a.is_number() || !b.is_number()) return unsupported_operands(op, a, b);
  bool ints = a.is_integral() && b.is_integral();
  std::int64_t x = ints ? a.as_int() : 0, y = ints ? b.as_int() : 0;
  double fx = a.as_double(), fy = b.as_double();
  switch (op) {
    case BinaryOp::kSub: {
      if (!ints) return Value::floating(fx - fy);
      std::int64_t r;
      if (__builtin_sub_overflow(x, y, &r)) return overflow();
      return Value::integer(r);
    }
    case BinaryOp::kMul: {
      if (!ints) return Value::floating(fx * fy);
      std::int64_t r;
      if (__builtin_mul_overflow(x, y, &r)) return overflow();
      return Value::integer(r);
    }
    case BinaryOp::kDiv:
      if (fy == 0.0) return Status::invalid_input("ZeroDivisionError: division by zero");
      return Value::floating(fx / fy);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (ints) {
        if (y == 0) return Status::invalid_input("ZeroDivisionError: integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) return overflow();
        std::int64_t q = x / y, r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          q -= 1;
          r += y;
        }
        return Value::integer(op == BinaryOp::kFloorDiv ? q : r);
      }
      if (fy == 0.0) return Status::invalid_input("ZeroDivisionError: float modulo");
      double fd, m;
      float_divmod(fx, fy, &fd, &m);
      return Value::floating(op == BinaryOp::kFloorDiv ? fd : m);
    }
    case BinaryOp::kPow: {
      if (ints && y >= 0) return integer_pow(x, y);
      if (fx == 0.0 && fy < 0) {
        return Status::invalid_input("ZeroDivisionError: 0.0 cannot be raised to a negative power");
      }
      if (fx < 0 && std::floor(fy) != fy) return Status::unsupported("complex results of ** are not supported");
      return Value::floating(std::pow(fx, fy));
    }
    case BinaryOp::kAdd: break;
  }
  return unsupported_operands(op, a, b);
}

Result<Value> negate(const Value& v) {
  if (v.is_undefined()) return Status::invalid_input(v.undefined_message());
  if (v.kind() == Kind::kFloat) return Value::floating(-v.as_double());
  if (v.is_integral()) {
    if (v.as_int() == INT64_MIN) return overflow();
    return Value::integer(-v.as_int());
  }
  return type_error("bad operand type for unary -: '" + type_name(v) + "'");
}

Result<Value> unary_plus(const Value& v) {
  if (v.is_undefined()) return Status::invalid_input(v.undefined_message());
  if (v.kind() == Kind::kFloat) return v;
  if (v.is_integral()) return Value::integer(v.as_int());
  return type_error("bad operand type for unary +: '" + type_name(v) + "'");
}

Result<bool> contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Kind::kString:
      if (!item.is_string()) {
        return type_error("'in <string>' requires string as left operand, not " + type_name(item));
      }
      return container.str().find(item.str()) != std::string::npos;
    case Kind::kList:
    case Kind::kTuple:
      for (const Value& v : container.items()) {
        if (equals(v, item)) return true;
      }
      return false;
    case Kind::kDict:
      if (!hashable(item)) return type_error("unhashable type: '" + type_name(item) + "'");
      return container.dict().find(item) != nullptr;
    case Kind::kUndefined: return false;
    case Kind::kIterator: {
      IteratorState& it = container.iterator_state();
      bool one_shot = it.kind == IteratorKind::kGenerator || it.kind == IteratorKind::kReversed;
      for (std::size_t i = one_shot ? it.cursor : 0; i < it.items.size(); ++i) {
        if (equals(it.items[i], item)) {
          if (one_shot) it.cursor = i + 1;
          return true;
        }
      }
      if (one_shot) it.cursor = it.items.size();
      return false;
    }
    default: break;
  }
  return type_error("argument of type '" + type_name(container) + "' is not iterable");
}

Result<std::string> percent_format(const std::string& format, const Value& args) {
  List positional;
  const Dict* mapping = nullptr;
  // Python skips the "not all arguments converted" check when the single argument
  // has __getitem__ and is not a str or tuple (a list, a dict).
  bool check_leftover = !(args.kind() == Kind::kList || args.is_dict() || args.is_undefined());
  if (args.kind() == Kind::kTuple) {
    positional = args.items();
  } else if (args.is_dict()) {
    mapping = &args.dict();
  } else {
    positional.push_back(args);
  }
  std::size_t next = 0;
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    if (++i >= format.size()) return Status::invalid_input("ValueError: incomplete format");
    if (format[i] == '%') {
      out.push_back('%');
      continue;
    }
    const Value* arg = nullptr;
    if (format[i] == '(') {
      std::size_t close = format.find(')', i);
      if (!mapping || close == std::string::npos) return type_error("format requires a mapping");
      arg = mapping->find(std::string_view(format).substr(i + 1, close - i - 1));
      if (!arg) return Status::invalid_input("KeyError: " + format.substr(i + 1, close - i - 1));
      i = close + 1;
      if (i >= format.size()) return Status::invalid_input("ValueError: incomplete format");
    }
    int precision = -1;
    if (format[i] == '.') {
      precision = 0;
      while (++i < format.size() && format[i] >= '0' && format[i] <= '9')
        precision = precision * 10 + (format[i] - '0');
      if (i >= format.size()) return Status::invalid_input("ValueError: incomplete format");
    }
    char conv = format[i];
    if (!arg) {
      if (next >= positional.size()) return type_error("not enough arguments for format string");
      arg = &positional[next++];
    }
    switch (conv) {
      case 's': TS_RETURN_IF_ERROR(append_str(*arg, out)); break;
      case 'r': TS_RETURN_IF_ERROR(append_repr(*arg, out)); break;
      case 'd':
      case 'i':
        if (arg->is_undefined()) return Status::invalid_input(arg->undefined_message());
        if (!arg->is_number()) return type_error("%" + std::string(1, conv) + " format: a real number is required");
        out +=
            std::to_string(arg->kind() == Kind::kFloat ? static_cast<std::int64_t>(arg->as_double()) : arg->as_int());
        break;
      case 'f': {
        if (!arg->is_number()) return type_error("must be real number, not " + type_name(*arg));
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.*f", precision < 0 ? 6 : precision, arg->as_double());
        out += buf;
        break;
      }
      default: return Status::unsupported(std::string("printf-style conversion '%") + conv + "' is not supported");
    }
  }
  if (check_leftover && next < positional.size()) {
    return type_error("not all arguments converted during string formatting");
  }
  return out;
}

}  // namespace tessera::tmpl
