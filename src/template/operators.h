// Python's operators on template values: + - * / // % ** (with int/float rules,
// str and list concatenation and repetition, Markup escaping), unary - and +,
// `in`, and printf-style `str % args`. Pure functions; thread-safe.
#pragma once

#include <cstddef>

#include "core/status.h"
#include "template/ast.h"
#include "template/value.h"

namespace tessera::tmpl {

// max_bytes bounds strings and lists the operator builds (repetition, concatenation).
Result<Value> binary_op(BinaryOp op, const Value& a, const Value& b, std::size_t max_bytes);
Result<Value> negate(const Value& v);
Result<Value> unary_plus(const Value& v);
// Python `item in container`.
Result<bool> contains(const Value& container, const Value& item);
// printf-style formatting: format % args (args a tuple or a single value).
Result<std::string> percent_format(const std::string& format, const Value& args);

}  // namespace tessera::tmpl
