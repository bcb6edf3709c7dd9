// Jinja lexer: splits template source into text and tag tokens exactly as
// jinja2's lexer does with the settings Hugging Face uses for chat templates
// (trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False):
//   - newlines are normalized to \n and one trailing newline is dropped;
//   - {%- / {{- / {#- strip all whitespace before the tag, -%} -}} -#} after it;
//   - trim_blocks drops the first newline after %} and #}; +%} keeps it;
//   - lstrip_blocks drops spaces/tabs between a line start and {% or {#; {%+ keeps them;
//   - {% raw %}...{% endraw %} is text.
// Pure function; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::tmpl {

enum class TokenType : std::uint8_t {
  kData,
  kVariableBegin,
  kVariableEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInteger,
  kFloat,
  kOperator,
  kEof,
};

struct Token {
  TokenType type;
  std::string text;  // data, name, operator, or the decoded string literal
  std::int64_t int_value = 0;
  double float_value = 0;
  std::size_t offset = 0;  // into the normalized source
};

struct LexedTemplate {
  std::string source;         // newline-normalized; token offsets point into it
  std::vector<Token> tokens;  // ends with kEof
};

// Syntax errors are invalid_input with "line:column".
Result<LexedTemplate> lex(std::string_view source);

// "line:column" (1-based, columns in code points) of an offset into source.
std::string describe_position(std::string_view source, std::size_t offset);

}  // namespace tessera::tmpl
