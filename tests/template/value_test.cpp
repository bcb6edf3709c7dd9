// Values: Python's str()/repr() of every kind, int/float arithmetic and
// comparisons, json.dumps as transformers' tojson calls it, Unicode case
// mappings and whitespace (tables generated from Python), markupsafe.Markup,
// code-point indexing; plus the helpers under them.
// Expected strings are Python jinja2's output for the same source.
#include <gtest/gtest.h>

#include "render_util.h"
#include "template/py_string.h"
#include "template/value.h"

namespace tessera::template_test {
namespace {

TEST(TemplateValues, PrintsLikePythonStr) {
  expect_renders({
      {"{{ True }} {{ False }} {{ None }} {{ none }} {{ 42 }} {{ -7 }}", "", "True False None None 42 -7"},
      {"{{ x }}", R"({"x": [1, 2.5, "s", null, true, {"k": [false]}]})", "[1, 2.5, 's', None, True, {'k': [False]}]"},
      {"{{ (1, 2) }} {{ (1,) }} {{ () }}", "", "(1, 2) (1,) ()"},
      {"{{ \"it's\" }} {{ [\"it's\", 'a\"b', 'both\\'\"'] }}", "", "it's [\"it's\", 'a\"b', 'both\\'\"']"},
      {"{{ ['\\n\\t\\\\', 'é', '\\x00', '\\u200b', '\\xa0', '😀', '\\u2028'] }}", "",
       "['\\n\\t\\\\', 'é', '\\x00', '\\u200b', '\\xa0', '😀', '\\u2028']"},
      {"{{ 1e16 }} {{ 1e15 }} {{ 123456789012345678.0 }} {{ 0.0001 }} {{ 0.00001 }} {{ -0.0 }} {{ 1.0 }} {{ 3.14159 }} "
       "{{ 1/3 }} {{ 2.5e-7 }}",
       "", "1e+16 1000000000000000.0 1.2345678901234568e+17 0.0001 1e-05 -0.0 1.0 3.14159 0.3333333333333333 2.5e-07"},
      {"{{ x.keys() }} {{ x.values() }} {{ x.items() }}", R"({"x": {"a": 1}})",
       "dict_keys(['a']) dict_values([1]) dict_items([('a', 1)])"},
  });
}

TEST(TemplateValues, NumbersFollowPython) {
  expect_renders({
      {"{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 "
       "** 10 }} {{ 2 ** -1 }} {{ 2.0 ** 2 }}",
       "", "3 -4 1 2 3.5 2.0 3.0 0.5 1024 0.5 4.0"},
      {"{{ 'ab' * 3 }} {{ [1] * 2 }} {{ 2 * 'x' }} {{ 'x' * -1 }}|{{ [1, 2] + [3] }} {{ (1,) + (2,) }} {{ true + 1 }}",
       "", "ababab [1, 1] xx |[1, 2, 3] (1, 2) 2"},
      {"{{ 1 == 1.0 }} {{ true == 1 }} {{ [1] == [1] }} {{ (1,) == [1] }} {{ {'a': 1, 'b': 2} == {'b': 2, 'a': 1} }} "
       "{{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }} {{ 2 > 1.5 }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}",
       "", "True True True False True True True True True False"},
      {"{{ 1e400 }} {{ -1e400 }} {{ 1e400 * 0 }} {{ [1e400, -1e400] | tojson }} {{ 2 ** 62 - 1 + 2 ** 62 }} {{ -2 ** "
       "63 }}",
       "", "inf -inf nan [Infinity, -Infinity] 9223372036854775807 -9223372036854775808"},
  });
}

TEST(TemplateValues, ToJsonIsPythonJsonDumps) {
  expect_renders({
      {"{{ x | tojson }}", R"({"x": [1, 2.5, "sé\n\"\\\t", null, true, {"k": [false]}, 1e+20, 1e-07, "\u0001"]})",
       "[1, 2.5, \"sé\\n\\\"\\\\\\t\", null, true, {\"k\": [false]}, 1e+20, 1e-07, \"\\u0001\"]"},
      {"{{ x | tojson(indent=2) }}", R"({"x": {"a": [1, {"b": []}], "c": {}}})",
       "{\n  \"a\": [\n    1,\n    {\n      \"b\": []\n    }\n  ],\n  \"c\": {}\n}"},
      {"{{ x | tojson(indent='\\t') }}", R"({"x": [1, [2]]})", "[\n\t1,\n\t[\n\t\t2\n\t]\n]"},
      {"{{ x | tojson(ensure_ascii=True) }}", R"({"x": "é😀 "})", "\"\\u00e9\\ud83d\\ude00\\u2028\\u007f\""},
      {"{{ x | tojson(sort_keys=True) }}", R"({"x": {"b": 1, "a": 2, "c": {"z": 1, "y": 2}}})",
       "{\"a\": 2, \"b\": 1, \"c\": {\"y\": 2, \"z\": 1}}"},
      {"{{ x | tojson(separators=(',', ':')) }}", R"({"x": {"b": 1, "a": [1, 2]}})", "{\"b\":1,\"a\":[1,2]}"},
      {"{{ {1: 'a', none: 2, true: 3, 1.5: 4} | tojson }}", "", "{\"1\": 3, \"null\": 2, \"1.5\": 4}"},
  });
}

TEST(TemplateValues, UnicodeCaseAndWhitespace) {
  expect_renders({
      {"{{ 'é' | upper }} {{ 'ß' | upper }} {{ 'ΣΑΣ ΟΔΟΣ' | lower }} {{ 'İ' | lower | length }} {{ 'ǆa' | capitalize "
       "}} {{ 'hello ǆworld' .title() }} {{ 'ÉCOLE Ŧ' | lower }} {{ 'straße' | title }}",
       "", "É SS σας οδος 2 ǅa Hello ǅworld école ŧ Straße"},
      {"{{ 'a b\\u00a0c\\u2003d'.split() }} {{ '\\u3000x\\u3000'.strip() }}", "", "['a', 'b', 'c', 'd'] x"},
      {"{{ 'ﬁ' | upper }} {{ 'ŉ' | upper }} {{ 'Σ' | lower }} {{ 'ΑΣ.' | lower }} {{ 'Ⅻ' | lower }} {{ 'ⓐ' | upper }} "
       "{{ '𐐨' | upper }} {{ 'ǅ' | lower }} {{ 'ǆ' | title }}",
       "", "FI ʼN σ ας. ⅻ Ⓐ 𐐀 ǆ Ǆ"},
  });
}

TEST(TemplateValues, MarkupEscapesTheOtherSide) {
  expect_renders({
      {"{{ '<a>' | safe + '<b>' }} {{ '<a>' + '<b>' | safe }} {{ ('<a>' | safe) ~ '<b>' }} {{ ('<a>' | safe) + ('<b>' "
       "| safe) }} {{ ['<'|safe] }}",
       "", "<a>&lt;b&gt; &lt;a&gt;<b> <a><b> <a><b> [Markup('<')]"},
      {"{{ \"'\\\"&\" | e }}", "", "&#39;&#34;&amp;"},
  });
}

TEST(TemplateValues, StringsIndexByCodePoint) {
  expect_renders({
      {"{{ 'héllo'[1] }} {{ 'héllo'[1:3] }} {{ 'héllo'[::-1] }} {{ 'héllo' | length }} {{ 'héllo'.find('l') }}", "",
       "é él olléh 5 2"},
  });
}

TEST(TemplateValues, FloatReprMatchesPython) {
  // repr() of these in CPython 3.11.
  EXPECT_EQ(tmpl::float_repr(0.1), "0.1");
  EXPECT_EQ(tmpl::float_repr(1e16), "1e+16");
  EXPECT_EQ(tmpl::float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(tmpl::float_repr(0.0001), "0.0001");
  EXPECT_EQ(tmpl::float_repr(0.00001), "1e-05");
  EXPECT_EQ(tmpl::float_repr(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(tmpl::float_repr(123456789.125), "123456789.125");
  EXPECT_EQ(tmpl::float_repr(5e-324), "5e-324");
  EXPECT_EQ(tmpl::float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
}

TEST(TemplateValues, PythonStringHelpers) {
  using tmpl::py_split;
  EXPECT_EQ(*py_split("  a b  c ", std::nullopt, -1, false), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(*py_split("  a b  c ", std::nullopt, 1, false), (std::vector<std::string>{"a", "b  c "}));
  EXPECT_EQ(*py_split("  a b  c ", std::nullopt, 1, true), (std::vector<std::string>{"  a b", "c"}));
  EXPECT_EQ(*py_split("a::b::", std::string("::"), -1, false), (std::vector<std::string>{"a", "b", ""}));
  EXPECT_EQ(*py_split("a::b::c", std::string("::"), 1, true), (std::vector<std::string>{"a::b", "c"}));
  EXPECT_FALSE(py_split("a", std::string(""), -1, false).ok());  // ValueError: empty separator
  EXPECT_EQ(tmpl::py_replace("abc", "", "-", -1), "-a-b-c-");
  EXPECT_EQ(tmpl::py_replace("aaa", "a", "b", 2), "bba");
  EXPECT_EQ(tmpl::py_strip("\u3000 x\u00a0", std::nullopt, true, true), "x");
  EXPECT_EQ(tmpl::py_find("h\u00e9llo", "l", std::nullopt, std::nullopt, false), 2);
  EXPECT_EQ(tmpl::py_count("aaaa", "aa", std::nullopt, std::nullopt), 2);
  EXPECT_EQ(*tmpl::slice_indices(5, std::nullopt, std::nullopt, -2), (std::vector<std::size_t>{4, 2, 0}));
  EXPECT_FALSE(tmpl::slice_indices(5, std::nullopt, std::nullopt, 0).ok());
}

TEST(TemplateValues, Utf8Validation) {
  EXPECT_TRUE(tmpl::valid_utf8("h\u00e9llo \U0001F600"));
  EXPECT_FALSE(tmpl::valid_utf8("\xC3"));              // truncated
  EXPECT_FALSE(tmpl::valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(tmpl::valid_utf8("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(tmpl::valid_utf8("\xF4\x90\x80\x80"));  // past U+10FFFF
  Status s = render_status("{{ x }}", "{\"x\": \"ok\"}");
  EXPECT_TRUE(s.ok());
  Result<ChatTemplate> bad = ChatTemplate::parse("\xFF{{ 1 }}");
  EXPECT_EQ(bad.status().kind(), ErrorKind::kInvalidInput);
}

}  // namespace
}  // namespace tessera::template_test
