// Jinja parser: tokens (lexer.h) to a Program (ast.h), following jinja2's
// parser.py grammar and precedence, including its quirks (`is` tests bind
// tighter than comparisons, ** is left-associative, `x if y` without else).
//
// Refusals, all before anything renders:
//   - syntax errors: invalid_input "template syntax error at line:col: ...";
//   - a filter or test jinja2 does not know, outside an {% if %} / inline if
//     (where jinja2 itself refuses the template at compile time): invalid_input;
//   - constructs jinja2 has but tessera does not (include, import, extends,
//     block, autoescape, recursive loops, unsupported filters/tests):
//     unsupported, naming the construct.
// Pure function; thread-safe.
#pragma once

#include <memory>
#include <string_view>

#include "core/status.h"
#include "template/ast.h"

namespace tessera::tmpl {

// Nesting (brackets, blocks) deeper than this is refused: templates are untrusted
// and the parser and evaluator recurse.
inline constexpr int kMaxNesting = 200;

Result<std::shared_ptr<const Program>> parse_program(std::string_view source);

}  // namespace tessera::tmpl
