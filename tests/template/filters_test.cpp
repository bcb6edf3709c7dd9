// Filters (jinja2's, with transformers' tojson) and tests, including the lazy
// filters' generator behaviour (always true, no len(), consumed once).
// Expected strings are Python jinja2's output for the same source.
#include <gtest/gtest.h>

#include "render_util.h"

namespace tessera::template_test {
namespace {

TEST(TemplateFilters, StringFilters) {
  expect_renders({
      {"{{ '  x  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ none | trim }}|{{ u | trim }}|{{ 5 | trim }}", "",
       "x|a|None||5"},
      {"{{ 'ab' | upper }} {{ 'AB' | lower }} {{ 'hello wORLD-foo(bar' | title }} {{ 'hELLO' | capitalize }}", "",
       "AB ab Hello World-Foo(Bar Hello"},
      {"{{ 'a-b-a' | replace('a', 'x') }} {{ 'a-b-a' | replace('a', 'x', 1) }} {{ 5 | replace('5', '6') }}", "",
       "x-b-x x-b-a 6"},
      {"{{ 5 | string }} {{ [1] | string }} {{ none | string }} [{{ u | string }}]", "", "5 [1] None []"},
      {"{{ -3 | abs }} {{ -2.5 | abs }} {{ 2.5 | round }} {{ 3.5 | round }} {{ 2.675 | round(2) }} {{ 2.1 | round(0, "
       "'ceil') }} {{ 2.99 | round(1, 'floor') }} {{ 7 | round }}",
       "", "3 2.5 2.0 4.0 2.67 3.0 2.9 7"},
      {"{{ '<a href=\"x\">&\\'' | e }} {{ '<b>' | safe }} {{ ('<b>' | safe) | e }} {{ '<b>' | forceescape }} {{ '<b>' "
       "| escape | safe }}",
       "", "&lt;a href=&#34;x&#34;&gt;&amp;&#39; <b> <b> &lt;b&gt; &lt;b&gt;"},
  });
}

TEST(TemplateFilters, SequenceFilters) {
  expect_renders({
      {"{{ [1,2,3] | length }} {{ 'héllo' | length }} {{ {'a':1} | count }} {{ u | length }}", "", "3 5 1 0"},
      {"{{ [1,2,3] | first }} {{ [1,2,3] | last }} {{ [] | first is defined }} {{ 'abc' | first }} {{ u | last is "
       "defined }}|{{ {'a':1,'b':2} | last }}",
       "", "1 3 False a False|b"},
      {"{{ [1,2,3] | join(', ') }} {{ [1,'a',none] | join }} {{ [{'n':'a'},{'n':'b'}] | join('-', attribute='n') }}",
       "", "1, 2, 3 1aNone a-b"},
      {"{{ 'abc' | list }} {{ {'a':1} | list }} {{ (1,2) | list }} {{ u | list }}", "",
       "['a', 'b', 'c'] ['a'] [1, 2] []"},
      {"{% for k, v in {'b':1,'a':2} | items %}{{ k }}{{ v }}{% endfor %}{{ u | items | list }}", "", "b1a2[]"},
      {"{{ {'b':1,'A':2,'a':3} | dictsort }} {{ {'b':1,'a':2} | dictsort(by='value') }} {{ {'b':1,'a':2} | "
       "dictsort(reverse=true) }} {{ {'b':1,'A':2} | dictsort(true) }}",
       "", "[('A', 2), ('a', 3), ('b', 1)] [('b', 1), ('a', 2)] [('b', 1), ('a', 2)] [('A', 2), ('b', 1)]"},
      {"{{ [3,1,2] | sort }} {{ ['b','A','a'] | sort }} {{ ['b','A','a'] | sort(case_sensitive=true) }} {{ [3,1,2] | "
       "sort(reverse=true) }} {{ [{'t':'b'},{'t':'a'}] | sort(attribute='t') }}",
       "", "[1, 2, 3] ['A', 'a', 'b'] ['A', 'a', 'b'] [3, 2, 1] [{'t': 'a'}, {'t': 'b'}]"},
      {"{{ [{'a':2,'b':1},{'a':1,'b':2},{'a':1,'b':1}] | sort(attribute='a,b') }}", "",
       "[{'a': 1, 'b': 1}, {'a': 1, 'b': 2}, {'a': 2, 'b': 1}]"},
      {"{{ [1,2,1,'A','a'] | unique | list }} {{ ['A','a'] | unique(case_sensitive=true) | list }} {{ "
       "[{'k':1},{'k':1}] | unique(attribute='k') | list }}",
       "", "[1, 2, 'A'] ['A', 'a'] [{'k': 1}]"},
      {"{{ [3,1,2] | min }} {{ [3,1,2] | max }} {{ [] | min is defined }} {{ ['b','A'] | min }} {{ [{'v':2},{'v':1}] | "
       "max(attribute='v') }}",
       "", "1 3 False A {'v': 2}"},
      {"{{ [1,2,3] | reverse | list }} {{ 'abc' | reverse }} {{ [1,2] | reverse | join }} {{ {'a':1,'b':2} | reverse | "
       "list }}",
       "", "[3, 2, 1] cba 21 ['b', 'a']"},
      {"{{ [1,2,3] | sum }} {{ [{'v':1},{'v':2.5}] | sum(attribute='v') }} {{ [[1],[2]] | sum(start=[]) }}", "",
       "6 3.5 [1, 2]"},
      {"{{ [1,2,3,4,5] | batch(2) | list }} {{ [1,2,3] | batch(2, 'x') | list }}", "",
       "[[1, 2], [3, 4], [5]] [[1, 2], [3, 'x']]"},
  });
}

TEST(TemplateFilters, DefaultAndConversions) {
  expect_renders({
      {"{{ u | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ none | d('x') }} [{{ u | "
       "default }}] {{ false | default('f', boolean=true) }}",
       "", "d  d None [] f"},
      {"{{ '42' | int }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ true | int }} {{ none "
       "| int }} {{ '0x1A' | int(0, 16) }} {{ ' 12 ' | int }} {{ '1_000' | int }}",
       "", "42 4 0 7 3 1 0 26 12 1000"},
      {"{{ '4.5' | float }} {{ 'x' | float }} {{ 3 | float }} {{ '1e3' | float }} {{ ' 2 ' | float }} {{ 'inf' | float "
       "}}",
       "", "4.5 0.0 3.0 1000.0 2.0 inf"},
      {"{{ '%s-%d' | format('a', 3) }} {{ '%s is %s' % ('x', 'y') }} {{ '%(a)s' % {'a': 1} }} {{ '%.2f' % 3.14159 }} "
       "{{ 'plain' % [] }} {{ '100%%' % () }}",
       "", "a-3 x is y 1 3.14 plain 100%"},
      {"{{ x | attr('items') is defined }} {{ x | attr('a') is defined }} {{ x.a }}", R"({"x": {"a": 1}})",
       "True False 1"},
  });
}

TEST(TemplateFilters, SelectMapAndGenerators) {
  expect_renders({
      {"{{ [{'r':'u'},{'r':'a'},{'r':'u'}] | selectattr('r', 'equalto', 'u') | list | length }} {{ "
       "[{'r':'u'},{'r':'a'}] | rejectattr('r', 'equalto', 'u') | list }}",
       "", "2 [{'r': 'a'}]"},
      {"{{ [1,2,3,4] | select('even') | list }} {{ [1,0,2] | select | list }} {{ [1,2,3] | reject('odd') | list }} {{ "
       "[1,5,9] | select('gt', 4) | list }} {{ ['a','b'] | select('in', ['b']) | list }}",
       "", "[2, 4] [1, 2] [2] [5, 9] ['b']"},
      {"{{ [{'a':{'b':1}},{'a':{'b':2}}] | map(attribute='a.b') | list }} {{ ['a','b'] | map('upper') | list }} {{ "
       "[{'x':1},{}] | map(attribute='x', default=9) | list }} {{ [[1,2],[3]] | map('join', ',') | list }}",
       "", "[1, 2] ['A', 'B'] [1, 9] ['1,2', '3']"},
      {"{{ [{'t':'x'},{'u':1}] | selectattr('t', 'defined') | list }} {{ [{'t':'x'},{'u':1}] | selectattr('t') | list "
       "}} {{ [{'t':[1,2]}] | map(attribute='t.1') | list }}",
       "", "[{'t': 'x'}] [{'t': 'x'}] [2]"},
      {"{{ none | map(attribute='x') | list }} {{ none | selectattr('x') | list }} {{ [] | select | list }}", "",
       "[] [] []"},
      {"{% if [] | select %}generators are true{% endif %}|{% if x.keys() %}views by length{% endif %}", R"({"x": {}})",
       "generators are true|"},
  });
}

TEST(TemplateFilters, Tests) {
  expect_renders({
      {"{{ 'abc' is string }} {{ 3 is number }} {{ true is number }} {{ none is none }} {{ 1 is integer }} {{ 1.0 is "
       "float }} {{ true is integer }} {{ true is boolean }} {{ 1 is boolean }}",
       "", "True True True True True True False True False"},
      {"{{ false is false }} {{ 0 is false }} {{ true is true }} {{ {} is mapping }} {{ [] is mapping }} {{ range is "
       "callable }} {{ u is callable }} {{ 'upper' is filter }} {{ 'from_json' is filter }} {{ 'even' is test }}",
       "", "True False True True False True True True False True"},
      {"{{ 'a' is in 'cat' }} {{ 'abc' is iterable }} {{ 3 is iterable }} {{ u is iterable }} {{ u is sequence }} {{ "
       "{} is sequence }} {{ 'x' is sequence }} {{ x.items() is sequence }} {{ x.items() is iterable }}",
       R"({"x": {"a": 1}})", "True True False True True True True False True"},
      {"{{ 4 is lt 5 }} {{ 4 is le 4 }} {{ 4 is ge 5 }} {{ 4 is ne 4 }} {{ 3 is odd }} {{ 3.0 is odd }} {{ 10 is "
       "divisibleby 5 }} {{ none is sameas none }}",
       "", "True True False False True True True True"},
  });
}

TEST(TemplateFilters, ToJson) {
  expect_renders({
      {"{{ x | tojson }} {{ 'é' | tojson }} {{ 'é' | tojson(ensure_ascii=True) }} {{ [1, [2]] | tojson(indent=2) }} {{ "
       "{'b': 1, 'a': 2} | tojson(sort_keys=true) }}",
       R"({"x": {"a": [1.5, -0.0, 1.2345678901234567e+19, 1e+300]}})",
       "{\"a\": [1.5, -0.0, 1.2345678901234567e+19, 1e+300]} \"é\" \"\\u00e9\" [\n  1,\n  [\n    2\n  ]\n] {\"a\": 2, "
       "\"b\": 1}"},
  });
}

TEST(TemplateFilters, Indent) {
  expect_renders({
      {"{{ 'a\\nb\\n\\nc' | indent }}|{{ 'a\\nb' | indent(2, true) }}|{{ 'a\\n\\nb' | indent(2, blank=true) }}|{{ "
       "'a\\nb' | indent('> ') }}|{{ '' | indent(first=true) }}",
       "", "a\n    b\n\n    c|  a\n  b|a\n  \n  b|a\n> b|    "},
  });
}

TEST(TemplateFilters, GeneratorsHaveNoLengthAndCannotBePrinted) {
  Status s = render_status("{{ [1, 2, 3] | select('even') | length }}");
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(s.message().find("object of type 'generator' has no len()"), std::string::npos) << s.message();
  // Python prints "<generator object ... at 0x7f...>"; tessera will not make up an address.
  s = render_status("{{ [1] | map('string') }}");
  EXPECT_EQ(s.kind(), ErrorKind::kUnsupported);
  s = render_status("{{ [1] | tojson }}{{ [1] | select | tojson }}");
  EXPECT_NE(s.message().find("Object of type generator is not JSON serializable"), std::string::npos) << s.message();
}

TEST(TemplateFilters, FilterArgumentErrors) {
  Status s = render_status("{{ 'x' | trim(1, 2) }}");
  EXPECT_EQ(s.kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(s.message().find("takes at most 1 argument(s)"), std::string::npos) << s.message();
  s = render_status("{{ 'x' | replace('a') }}");
  EXPECT_NE(s.message().find("missing required argument 'new'"), std::string::npos) << s.message();
  s = render_status("{{ [1] | join(sep=',') }}");
  EXPECT_NE(s.message().find("unexpected keyword argument 'sep'"), std::string::npos) << s.message();
  s = render_status("{{ [{}] | unique | list }}");
  EXPECT_NE(s.message().find("unhashable type: 'dict'"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace tessera::template_test
