// The globals a chat template sees besides its context, as transformers sets
// them: jinja2's defaults (range, dict, namespace; cycler, joiner and lipsum
// are refused as unsupported when called) plus raise_exception and
// strftime_now. Thread-safe; the objects are created per render.
#pragma once

#include "template/evaluator.h"

namespace tessera::tmpl {

// jinja2's sandbox refuses ranges longer than this (MAX_RANGE).
inline constexpr std::int64_t kMaxRange = 100000;

void install_builtins(Frame& globals);

}  // namespace tessera::tmpl
