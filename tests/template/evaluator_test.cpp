// Evaluation: loops (loop.*, for-else, loop filters, break/continue), jinja2's
// scoping (a {% set %} in a loop body lasts one iteration; namespace() carries
// state out), macros (defaults, varargs/kwargs, caller, recursion), block set,
// filter blocks, with, {% generation %}, attribute/item lookup with jinja2's
// fallbacks, undefined values, globals and Python methods.
// Expected strings are Python jinja2's output for the same source.
#include <gtest/gtest.h>

#include "render_util.h"

namespace tessera::template_test {
namespace {

TEST(TemplateEvaluator, Loops) {
  expect_renders({
      {"{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first "
       "}}{{ loop.last }}{{ loop.length }}|{% endfor %}",
       "", "1032TrueFalse3|2121FalseFalse3|3210FalseTrue3|"},
      {"{% for x in [1,2,3] %}{{ loop.previtem }}-{{ loop.nextitem }};{% endfor %}", "", "-2;1-3;2-;"},
      {"{% for x in [1,2] %}{{ loop.cycle('a', 'b') }}{{ loop.changed(x) }}{{ loop.changed(1) }}{% endfor %}", "",
       "aTrueFalsebTrueTrue"},
      {"{% for x in [1,2] %}{% for y in [3] %}{{ loop.index }}{% endfor %}{{ loop.index }}{% endfor %}", "", "1112"},
      {"{% for x in [] %}a{% else %}empty{% endfor %}|{% for x in [1] %}a{% else %}empty{% endfor %}", "", "empty|a"},
      {"{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.index }}{{ loop.length }}{{ loop.last }};{% endfor %}", "",
       "212False;422True;"},
      {"{% for x in [1,3] if x is even %}a{% else %}none passed{% endfor %}", "", "none passed"},
      {"{% for x in [1,2,3,4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}{{ x }}{% "
       "endfor %}",
       "", "13"},
      {"{% for k, v in x.items() %}{{ k }}={{ v }};{% endfor %}|{% for k in x %}{{ k }}{% endfor %}",
       R"({"x": {"b": 1, "a": 2}})", "b=1;a=2;|ba"},
      {"{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %}|{% for c in 'hé' %}{{ c }}.{% endfor %}", "",
       "1234|h.é."},
      {"{% for x in undefined_var %}a{% else %}b{% endfor %}", "", "b"},
  });
}

TEST(TemplateEvaluator, ScopingFollowsJinja2) {
  expect_renders({
      {"{% set a = 1 %}{% for x in [1,2] %}{% set a = a + x %}{{ a }}{% endfor %}|{{ a }}", "", "23|1"},
      {"{% set y = 0 %}{% for x in [1,2] %}[{{ y }}]{% set y = x %}{% endfor %}", "", "[0][0]"},
      {"{% for x in [1,2] %}{% if x == 2 %}[{{ y }}]{% endif %}{% set y = x %}{% endfor %}", "", "[]"},
      {"{% for x in [1] %}{% set inner = 3 %}{% endfor %}{{ inner is defined }}|{% set x = 9 %}{% for x in [1] %}{% "
       "endfor %}{{ x }}",
       "", "False|9"},
      {"{% set x = 1 %}{% if true %}{% set x = 2 %}{% endif %}{{ x }}", "", "2"},
      {"{% set ns = namespace(a=1, items=[]) %}{% for x in [1,2] %}{% set ns.a = ns.a + x %}{% endfor %}{{ ns.a }} {{ "
       "ns.items }} {{ ns.missing is defined }}",
       "", "4 [] False"},
      {"{% set ns = namespace({'k': 'v'}, z=1) %}{{ ns.k }}{{ ns.z }} {{ ns }}", "",
       "v1 <Namespace {'k': 'v', 'z': 1}>"},
      {"{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = 1, 2 %}{{ t }}", "", "12|(1, 2)"},
      {"{% with a = 1, b = 2 %}{{ a + b }}{% set c = 3 %}{% endwith %}{{ a is defined }}{{ c is defined }}", "",
       "3FalseFalse"},
      {"{% set x %}hello {{ 1 }}{% endset %}{{ x | upper }}|{{ x is string }}|{% set y | trim | upper %}  pad  {% "
       "endset %}[{{ y }}]",
       "", "HELLO 1|True|[PAD]"},
  });
}

TEST(TemplateEvaluator, Macros) {
  expect_renders({
      {"{% filter upper %}abc {{ 'd' }}{% endfilter %}|{%- filter trim -%}  x  {%- endfilter %}", "", "ABC D|x"},
      {"{% macro f(a, b=2, c=a) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1) }}|{{ f(1, c=5) }}|{{ f(b=3, a=0) }}|{{ "
       "f() }}",
       "", "121|125|030|2"},
      {"{% macro f(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ f(1, 2, 3, x=4) }}", "", "1(2, 3){'x': 4}"},
      {"{% macro wrap(x) %}<{{ caller(x) }}>{% endmacro %}{% call(v) wrap(5) %}got {{ v }}{% endcall %}|{% macro w2() "
       "%}[{{ caller() }}]{% endmacro %}{% call w2() %}body{% endcall %}",
       "", "<got 5>|[body]"},
      {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}{{ fact(6) }}",
       "", "720"},
      {"{% set y = 5 %}{% macro m() %}{% set y = y + 1 %}{{ y }}{% endmacro %}{{ m() }}{{ m() }}{{ y }}", "", "665"},
      {"{% macro m() %}{{ g }}{% endmacro %}{% set g = 5 %}{{ m() }}|{{ m }}|{{ m.name }}", "", "5|<Macro 'm'>|m"},
      {"{% for x in [1,2] %}{% macro m() %}{{ x }}{% endmacro %}{{ m() }}{% endfor %}", "", "12"},
      {"{% generation %}gen {{ 1 }}{% set q = 2 %}{% endgeneration %}{{ q is defined }}", "", "gen 1False"},
  });
}

TEST(TemplateEvaluator, LookupsAndUndefined) {
  expect_renders({
      {"{{ x.y }} {{ x['y'] }} {{ x.z }}|{{ x.z is defined }} {{ x['z'] is undefined }}", R"({"x": {"y": 1}})",
       "1 1 |False True"},
      {"{{ x.items is defined }} {{ x['items'] }} {{ x.get('items') }}", R"({"x": {"items": 5}})", "True 5 5"},
      {"{{ none.x }}|{{ (none.x) is defined }}|{{ [1,2][5] }}|{{ [1,2][5] is defined }}|{{ 'abc'[10] is defined }}|{{ "
       "3.x is defined }}",
       "", "|False||False|False|False"},
      {"{{ u }}|{{ u is undefined }}|{{ u | default('d') }}|{{ u ~ 'x' }}|{{ not u }}|{{ u == u }}|{{ u is none }}|{{ "
       "'a' in u }}|{% for x in u %}{% else %}empty{% endfor %}",
       "", "|True|d|x|True|True|False|False|empty"},
      {"{{ 'a' if u else 'b' }}|{{ u or 'z' }}|{{ u and 'z' }}|{{ 0 or '' or [] }}|{{ 1 and 'y' }}", "", "b|z||[]|y"},
  });
}

TEST(TemplateEvaluator, Globals) {
  expect_renders({
      {"{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d') }} {{ strftime_now('%A %H:%M') }}", "",
       "14 Mar 2025 2025-03-14 Friday 15:09"},
      {"{{ range(3) | list }} {{ range(2, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ dict(a=1, b=2) }} {{ "
       "dict([('x', 1)]) }}",
       "", "[0, 1, 2] [2, 5, 8] [5, 3, 1] {'a': 1, 'b': 2} {'x': 1}"},
      {"{%- set msgs = messages -%}{% for m in msgs %}{{ m.role }}:{{ m['content'] }}\n{% endfor %}{{ "
       "messages[-1].role }}{{ messages | length }}",
       R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})",
       "user:hi\nassistant:yo\nassistant2"},
  });
}

TEST(TemplateEvaluator, PythonMethods) {
  expect_renders({
      {"{{ 'x{}y{}'.format(1, 'b') }} {{ '{0}-{0}'.format('r') }} {{ '{a}!'.format(a=3) }} {{ '{{}}{}'.format(1) }} {{ "
       "'{!r}'.format('q') }} {{ '{0[k]}{1.k}'.format(d, d) }}",
       R"({"d": {"k": "K"}})", "x1yb r-r 3! {}1 'q' KK"},
      {"{{ 'abc'.upper() }} {{ ' x '.strip() }} {{ 'a,b,,c'.split(',') }} {{ 'a b  c'.split() }} {{ 'a b c'.split(' ', "
       "1) }} {{ 'a b c'.rsplit(' ', 1) }} {{ 'a\\nb\\r\\nc'.splitlines() }}",
       "", "ABC x ['a', 'b', '', 'c'] ['a', 'b', 'c'] ['a', 'b c'] ['a b', 'c'] ['a', 'b', 'c']"},
      {"{{ 'abc'.startswith('ab') }} {{ 'abc'.endswith(('x', 'c')) }} {{ 'hello'.find('l') }} {{ 'hello'.rfind('l') }} "
       "{{ 'hello'.count('l') }} {{ 'hello'.index('e') }} {{ 'abc'.startswith('b', 1) }}",
       "", "True True 2 3 2 1 True"},
      {"{{ 'Hello World'.lower() }} {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }} {{ 'abc'.replace('b', 'X') "
       "}} {{ '-'.join(['a', 'b']) }} {{ 'xxhixx'.strip('x') }} {{ 'pre_x'.removeprefix('pre_') }}",
       "", "hello world Hello World Hello aXc a-b hi x"},
      {"{{ x.get('a') }} {{ x.get('z') }} {{ x.get('z', 5) }} {{ x.keys() | list }} {{ x.values() | list }} {{ "
       "x.items() | list }} {{ x.keys() | length }}",
       R"({"x": {"a": 1, "b": 2}})", "1 None 5 ['a', 'b'] [1, 2] [('a', 1), ('b', 2)] 2"},
  });
}

TEST(TemplateEvaluator, RuntimeErrorsCarryThePosition) {
  // The position is where the failing operation is: here the .x of an undefined value.
  Status s = render_status("line one\n{{ 1 + undefined_thing.x }}");
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidInput);
  EXPECT_EQ(s.message(), "template error at 2:23: UndefinedError: 'undefined_thing' is undefined");
  s = render_status("{% for x in none %}{% endfor %}");
  EXPECT_EQ(s.message(), "template error at 1:13: TypeError: 'NoneType' object is not iterable");
  s = render_status("{{ 'a' + 1 }}");
  EXPECT_EQ(s.message(), "template error at 1:8: TypeError: can only concatenate str (not \"int\") to str");
}

TEST(TemplateEvaluator, MacroArgumentErrors) {
  EXPECT_NE(render_status("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(1, 2) }}")
                .message()
                .find("macro 'f' takes not more than 1 argument(s)"),
            std::string::npos);
  EXPECT_NE(render_status("{% macro f(a) %}{{ a }}{% endmacro %}{{ f(z=1) }}")
                .message()
                .find("macro 'f' takes no keyword argument 'z'"),
            std::string::npos);
}

TEST(TemplateEvaluator, ContextKeyOrderIsKept) {
  // tojson writes keys in the caller's order with ordered_json, sorted with json.
  const char* source = "{{ x | tojson }}";
  nlohmann::ordered_json ordered = nlohmann::ordered_json::parse(R"({"x": {"b": 1, "a": 2}})");
  EXPECT_EQ(*ChatTemplate::parse(source)->render(ordered), R"({"b": 1, "a": 2})");
  nlohmann::json sorted = nlohmann::json::parse(R"({"x": {"b": 1, "a": 2}})");
  EXPECT_EQ(*ChatTemplate::parse(source)->render(sorted), R"({"a": 2, "b": 1})");
}

TEST(TemplateEvaluator, RenderIsRepeatableAndSharedTemplatesAreIndependent) {
  Result<ChatTemplate> t = ChatTemplate::parse("{% set l = x %}{{ l.pop() }}{{ l }}");
  ASSERT_TRUE(t.ok());
  nlohmann::ordered_json context = nlohmann::ordered_json::parse(R"({"x": [1, 2]})");
  ChatTemplate copy = *t;
  EXPECT_EQ(*t->render(context), "2[1]");
  EXPECT_EQ(*copy.render(context), "2[1]");  // the context is converted afresh each render
}

}  // namespace
}  // namespace tessera::template_test
