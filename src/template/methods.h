// Python methods templates call on values: str (strip, split, startswith,
// format, ...), dict (get, items, keys, values) and list/tuple (index, count).
// What obj.name gives, for a method name of obj's Python type:
//   - a callable bound method;
//   - for a mutating method the immutable sandbox refuses (list.append,
//     dict.update, ...), an undefined that fails with jinja2's SecurityError;
//   - for a real Python method tessera lacks, a callable that fails with
//     Status::unsupported naming it.
// nullopt when the type has no method of that name. Thread-safe.
#pragma once

#include <optional>
#include <string_view>

#include "template/value.h"

namespace tessera::tmpl {

std::optional<Value> method_of(const Value& object, std::string_view name);

}  // namespace tessera::tmpl
