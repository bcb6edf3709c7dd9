// Lexing: whitespace control under trim_blocks + lstrip_blocks, comments, raw
// blocks, newline normalization, literals, and syntax errors with line:column.
// Expected strings are Python jinja2's output for the same source.
#include "template/lexer.h"

#include <gtest/gtest.h>

#include "render_util.h"

namespace tessera::template_test {
namespace {

TEST(TemplateLexer, TrimAndLstripBlocks) {
  expect_renders({
      // trim_blocks drops the newline after %}; lstrip_blocks the indentation before {%.
      {"a\n  {% if true %}\n  b\n  {% endif %}\nc", "", "a\n  b\nc"},
      {"{% for x in [1,2] %}\n  {{ x }}\n{% endfor %}\n", "", "  1\n  2\n"},
      {"{{ 1 }}\n{% if true %}\n  {{ 2 }}\n{% endif %}\n{{ 3 }}", "", "1\n  2\n3"},
      {"\t{% if true %}x{% endif %}", "", "x"},
      // Only whitespace from the line start is stripped, and never before {{ }}.
      {"a  {% if true %}x{% endif %}", "", "a  x"},
      {"a\n  {{ 'x' }}\n", "", "a\n  x"},
  });
}

TEST(TemplateLexer, ExplicitWhitespaceControl) {
  expect_renders({
      {"  {%- if true %} x {% endif -%}  \n y", "", " x y"},
      {"{%- for x in [1,2] -%}\n  {{- x -}}\n{%- endfor -%}", "", "12"},
      {"x {{- ' y' }}", "", "x y"},
      // + keeps what trim_blocks / lstrip_blocks would remove.
      {"{% if true +%}\nx{% endif %}", "", "\nx"},
      {"  {%+ if true %}x{% endif %}", "", "  x"},
  });
}

TEST(TemplateLexer, CommentsAndRaw) {
  expect_renders({
      {"a {# c #}\n  {# c2 #}\nb", "", "a b"},
      {"{#- comment -#}  x", "", "x"},
      {"{% raw %}{{ x }}{% endraw %}", "", "{{ x }}"},
      {"  {% raw -%}  {{ x }}  {%- endraw %}\n!", "", "{{ x }}!"},
  });
}

TEST(TemplateLexer, Newlines) {
  expect_renders({
      {"x\n\n", "", "x\n"},  // keep_trailing_newline=False drops one
      {"a\r\nb\rc", "", "a\nb\nc"},
  });
}

TEST(TemplateLexer, Literals) {
  expect_renders({
      {"{{ 'a\\tb\\n\\x41\\u00e9\\U0001F600\\101\\q' }}", "", "a\tb\nAé😀A\\q"},
      {"{{ 0x1F }} {{ 0b101 }} {{ 0o17 }} {{ 1_000 }} {{ 1.5e3 }} {{ 2.5 }} {{ 1e-5 }} {{ 0.1 + 0.2 }}", "",
       "31 5 15 1000 1500.0 2.5 1e-05 0.30000000000000004"},
      {"{{ \"a\" 'b' }}", "", "ab"},     // adjacent literals concatenate
      {"{{ {'a': 1}['a'] }}", "", "1"},  // braces inside a tag do not end it
  });
}

TEST(TemplateLexer, SyntaxErrorsCarryLineAndColumn) {
  struct Bad {
    const char* source;
    const char* where;
  };
  for (const Bad& bad : std::vector<Bad>{
           {"abc {# never closed", "1:5: Missing end of comment tag"},
           {"{{ 'unterminated }}", "1:4: unexpected char"},
           {"line1\n{{ 1 $ 2 }}", "2:6: unexpected char '$'"},
           {"{{ (1] }}", "1:6: unexpected ']', expected ')'"},
           {"{% raw %} never ends", "1:10: Missing end of raw directive"},
       }) {
    Status s = render_status(bad.source);
    EXPECT_EQ(s.kind(), ErrorKind::kInvalidInput) << bad.source;
    EXPECT_NE(s.message().find(std::string("template syntax error at ") + bad.where), std::string::npos)
        << bad.source << " -> " << s.message();
  }
}

TEST(TemplateLexer, PositionsCountCodePoints) {
  EXPECT_EQ(tmpl::describe_position("é\nab", 0), "1:1");
  EXPECT_EQ(tmpl::describe_position("éx", 2), "1:2");
  EXPECT_EQ(tmpl::describe_position("é\nab", 4), "2:2");
}

}  // namespace
}  // namespace tessera::template_test
