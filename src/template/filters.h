// Jinja filters and tests, by name, as jinja2 defines them (jinja2/filters.py,
// jinja2/tests.py) plus transformers' tojson. The parser asks which names exist
// (to refuse unknown or unsupported ones up front); the evaluator applies them.
// Stateless; thread-safe (state lives in the Evaluator passed in).
#pragma once

#include <initializer_list>
#include <optional>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "template/value.h"

namespace tessera::tmpl {

class Evaluator;

enum class Support {
  kSupported,
  kUnsupported,  // jinja2 has it, tessera does not: refused, naming it
  kUnknown,      // jinja2 has no such filter/test either
};

Support filter_support(std::string_view name);
Support test_support(std::string_view name);

Result<Value> apply_filter(Evaluator& ev, std::string_view name, const Value& operand, Args args);
Result<bool> apply_test(Evaluator& ev, std::string_view name, const Value& operand, Args args);

// Binds call arguments to a Python-style signature: names in order, the first
// `required` of them mandatory. Optional arguments not passed come back empty.
using BoundArgs = std::vector<std::optional<Value>>;
Result<BoundArgs> bind_args(std::string_view what, Args args, std::initializer_list<std::string_view> names,
                            std::size_t required);

}  // namespace tessera::tmpl
