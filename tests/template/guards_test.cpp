// Guards: what the template engine refuses, and how. Chat templates come from
// model files, so they are untrusted input.
//
// Each guard below was verified to be able to fail: the guard was disabled in
// the source, this test was seen failing, and the guard was restored.
//   - syntax errors report invalid_input with line:column (lexer error(), parser fail())
//   - unsupported filter / test / tag / method / global: Status::unsupported naming it
//     (filter_support, test_support, parse_statement's tag list, str_method, builtin_unsupported)
//   - printing an object whose Python repr is a memory address (Object::stable_repr)
//   - raise_exception('msg'): invalid_input carrying exactly msg (Evaluator::raise)
//   - output size limit (Evaluator::check_size / emit)
//   - step limit (Evaluator::step)
//   - macro call depth limit (Evaluator::invoke_macro)
//   - bracket / block nesting limit (Parser::check_depth) and expression height (Parser::seal)
//   - template source size limit (ChatTemplate::parse)
//   - sandbox range size (builtin_range's kMaxRange)
//   - string repetition bound (operators.cpp repeat)
//   - mutating methods refused like the immutable sandbox (methods.cpp unsafe())
//   - invalid UTF-8 in the template or the context (valid_utf8 in ChatTemplate)
//   - 64-bit integer overflow refused, not wrapped (operators.cpp overflow())
#include <gtest/gtest.h>

#include <string>

#include "render_util.h"

namespace tessera::template_test {
namespace {

void expect_error(const Status& s, ErrorKind kind, const std::string& fragment) {
  EXPECT_EQ(s.kind(), kind) << s.to_string();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << "want '" << fragment << "' in: " << s.to_string();
}

TEST(TemplateGuards, SyntaxErrorIsInvalidInputWithPosition) {
  expect_error(render_status("ok\n  {% if %}"), ErrorKind::kInvalidInput, "template syntax error at 2:9:");
  expect_error(render_status("{{ 1 $ 2 }}"), ErrorKind::kInvalidInput, "template syntax error at 1:6:");
}

TEST(TemplateGuards, UnsupportedConstructsAreNamed) {
  struct Case {
    const char* source;
    const char* names;
  };
  for (const Case& c : std::vector<Case>{
           {"{{ 'x' | wordwrap(2) }}", "filter 'wordwrap' is not supported"},
           {"{% if x %}{{ 'x' | center }}{% endif %}", "filter 'center' is not supported"},
           {"{{ 'x' is lower }}", "test 'lower' is not supported"},
           {"{% include 'other.jinja' %}", "tag 'include' is not supported"},
           {"{% extends 'base' %}", "tag 'extends' is not supported"},
           {"{% for x in y recursive %}{% endfor %}", "recursive for loops are not supported"},
           {"{{ 'x'.isdigit() }}", "str.isdigit() is not supported"},
           {"{{ cycler(1, 2) }}", "cycler, joiner and lipsum globals are not supported"},
           {"{{ [1] | select }}", "printing a generator object is not supported"},
           {"{{ 'x'.upper }}", "printing a builtin_function_or_method object is not supported"},
           {"{{ '\\N{BULLET}' }}", "\\N{...} escapes"},
           {"{{ 2 ** 64 }}", "integer arithmetic beyond 64 bits is not supported"},
           {"{{ 9223372036854775808 }}", "does not fit in 64 bits"},
       }) {
    expect_error(render_status(c.source), ErrorKind::kUnsupported, c.names);
  }
}

TEST(TemplateGuards, RaiseExceptionCarriesTheTemplatesMessage) {
  Status s = render_status("{% if messages | length == 0 %}{{ raise_exception('No messages given!') }}{% endif %}",
                           R"({"messages": []})");
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidInput);
  EXPECT_EQ(s.message(), "No messages given!");
}

TEST(TemplateGuards, OutputSizeIsBounded) {
  ChatTemplate::RenderOptions options;
  options.max_output_bytes = 1000;
  expect_error(render_status("{% for i in range(100) %}0123456789abcdef{% endfor %}", "", options),
               ErrorKind::kInvalidInput, "output exceeded the limit of 1000 bytes");
  // Values built in memory count too, not only what is printed.
  expect_error(render_status("{% set s = 'ab' * 600 %}", "", options), ErrorKind::kInvalidInput,
               "exceeds the output limit");
  expect_error(render_status("{% set s = 'ab' * 100000000000 %}"), ErrorKind::kInvalidInput,
               "exceeds the output limit");
  EXPECT_TRUE(render_status("{% for i in range(50) %}0123456789{% endfor %}", "", options).ok());
}

TEST(TemplateGuards, WorkIsBounded) {
  ChatTemplate::RenderOptions options;
  options.max_steps = 100000;
  expect_error(
      render_status("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "", options),
      ErrorKind::kInvalidInput, "exceeded the limit of 100000 evaluation steps");
}

TEST(TemplateGuards, MacroRecursionIsBounded) {
  expect_error(render_status("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), ErrorKind::kInvalidInput,
               "macro call depth limit of 256");
  ChatTemplate::RenderOptions options;
  options.max_call_depth = 3;
  const char* three = "{% macro f(n) %}{% if n < 3 %}{{ f(n + 1) }}{% endif %}{% endmacro %}{{ f(1) }}";
  EXPECT_TRUE(render_status(three, "", options).ok());
  options.max_call_depth = 2;
  expect_error(render_status(three, "", options), ErrorKind::kInvalidInput, "macro call depth limit of 2");
}

TEST(TemplateGuards, NestingIsBounded) {
  std::string parens = "{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}";
  expect_error(render_status(parens), ErrorKind::kInvalidInput, "nested too deeply");
  std::string ifs;
  for (int i = 0; i < 500; ++i) ifs += "{% if true %}";
  for (int i = 0; i < 500; ++i) ifs += "{% endif %}";
  expect_error(render_status(ifs), ErrorKind::kInvalidInput, "nested too deeply");
  // Left-leaning chains do not recurse in the parser, but the tree they build would.
  std::string chain = "{{ 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  expect_error(render_status(chain + " }}"), ErrorKind::kInvalidInput, "expression nested too deeply");
  std::string filters = "{{ 'x'";
  for (int i = 0; i < 5000; ++i) filters += " | trim";
  expect_error(render_status(filters + " }}"), ErrorKind::kInvalidInput, "expression nested too deeply");
  // Ordinary templates stay well within the limits.
  std::string fine = "{{ 1";
  for (int i = 0; i < 100; ++i) fine += " + 1";
  EXPECT_EQ(*render(fine + " }}"), "101");
}

TEST(TemplateGuards, TemplateSizeIsBounded) {
  std::string big(ChatTemplate::kMaxSourceBytes + 1, 'x');
  expect_error(ChatTemplate::parse(big).status(), ErrorKind::kInvalidInput, "over the limit");
}

TEST(TemplateGuards, RangeIsBoundedAsInTheSandbox) {
  expect_error(render_status("{{ range(100001) | length }}"), ErrorKind::kInvalidInput,
               "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  EXPECT_EQ(*render("{{ range(100000) | length }}"), "100000");
}

TEST(TemplateGuards, MutatingMethodsAreRefusedAsInTheImmutableSandbox) {
  expect_error(render_status("{% set l = [] %}{% set _ = l.append(1) %}"), ErrorKind::kInvalidInput,
               "SecurityError: access to attribute 'append' of 'list' object is unsafe.");
  expect_error(render_status("{% set d = {} %}{{ d.update({'a': 1}) }}"), ErrorKind::kInvalidInput,
               "SecurityError: access to attribute 'update' of 'dict' object is unsafe.");
  // The refused method is an undefined until it is used, as in jinja2.
  EXPECT_EQ(*render("{{ [].append is defined }}"), "False");
}

TEST(TemplateGuards, InvalidUtf8IsRefused) {
  expect_error(ChatTemplate::parse("{{ 'a' }}\xC3").status(), ErrorKind::kInvalidInput, "not valid UTF-8");
  Result<ChatTemplate> t = ChatTemplate::parse("{{ x }}");
  ASSERT_TRUE(t.ok());
  nlohmann::ordered_json context;
  context["x"] = std::string("\xFF\xFE");
  expect_error(t->render(context).status(), ErrorKind::kInvalidInput, "invalid UTF-8");
}

TEST(TemplateGuards, IntegerOverflowIsRefusedNotWrapped) {
  expect_error(render_status("{{ 9223372036854775807 + 1 }}"), ErrorKind::kUnsupported, "beyond 64 bits");
  expect_error(render_status("{{ -9223372036854775807 - 2 }}"), ErrorKind::kUnsupported, "beyond 64 bits");
  expect_error(render_status("{{ 4294967296 * 4294967296 }}"), ErrorKind::kUnsupported, "beyond 64 bits");
}

}  // namespace
}  // namespace tessera::template_test
