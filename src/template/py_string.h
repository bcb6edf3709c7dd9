// Python str semantics over UTF-8 text, for the template engine: lengths and
// indices count code points, whitespace and case follow Python's tables
// (unicode_tables.h). All text passed in must be valid UTF-8 (the engine checks
// templates and context strings once, on the way in). Pure functions,
// thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::tmpl {

bool valid_utf8(std::string_view s);
std::u32string decode_utf8(std::string_view s);
void append_utf8(char32_t c, std::string& out);
std::string encode_utf8(std::u32string_view s);
std::size_t codepoint_count(std::string_view s);
bool py_isspace(char32_t c);

// str.strip / lstrip / rstrip; chars = nullopt strips whitespace.
std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split / rsplit; sep = nullopt splits on runs of whitespace. An empty sep is a ValueError.
Result<std::vector<std::string>> py_split(std::string_view s, const std::optional<std::string>& sep,
                                          std::int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(std::string_view s, bool keepends);
std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, std::int64_t count);
std::string py_lower(std::string_view s);
std::string py_upper(std::string_view s);
std::string py_capitalize(std::string_view s);
std::string py_title(std::string_view s);
// jinja2's title filter: split on runs of '-', whitespace, '(', '{', '[', '<';
// each piece gets its first character upper-cased and the rest lower-cased.
std::string jinja_title(std::string_view s);

// Python's slice of a sequence of `size` items: fills the indices picked by
// s[start:stop:step] (each optional). ValueError for step 0.
Result<std::vector<std::size_t>> slice_indices(std::size_t size, std::optional<std::int64_t> start,
                                               std::optional<std::int64_t> stop, std::optional<std::int64_t> step);
// str.find / rfind / count in code points, within s[start:end].
std::int64_t py_find(std::string_view s, std::string_view sub, std::optional<std::int64_t> start,
                     std::optional<std::int64_t> end, bool from_right);
std::int64_t py_count(std::string_view s, std::string_view sub, std::optional<std::int64_t> start,
                      std::optional<std::int64_t> end);

// Python's repr() of a str: quotes chosen and characters escaped as Python does.
void append_str_repr(std::string_view s, std::string& out);

}  // namespace tessera::tmpl
