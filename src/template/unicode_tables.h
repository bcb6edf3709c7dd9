// Python's character tables for the template engine's string methods: case
// mappings as str.lower()/upper()/title() apply them to one code point, and the
// classes behind isspace(), isprintable() (repr) and the final-sigma rule.
// Generated from Python itself (unicode_tables.cpp); pure functions, thread-safe.
#pragma once

#include <string>

namespace tessera::tmpl::unicode {

// Full mappings: may append several code points ('ß' upper is "SS").
void append_lower(char32_t c, std::u32string& out);
void append_upper(char32_t c, std::u32string& out);
void append_title(char32_t c, std::u32string& out);
bool is_cased(char32_t c);
bool is_case_ignorable(char32_t c);
bool is_printable(char32_t c);
bool is_space(char32_t c);

}  // namespace tessera::tmpl::unicode
