// Python str methods over UTF-8; see py_string.h. Text is decoded to code
// points where Python's semantics are per code point (strip sets, case, find).
#include "template/py_string.h"

#include <algorithm>

#include "template/unicode_tables.h"

namespace tessera::tmpl {

bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    auto c = static_cast<unsigned char>(s[i]);
    int extra;
    char32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      extra = 1;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      cp = c & 0x07;
    } else {
      return false;
    }
    if (i + extra >= s.size()) return false;
    for (int k = 1; k <= extra; ++k) {
      auto cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    if ((extra == 1 && cp < 0x80) || (extra == 2 && cp < 0x800) || (extra == 3 && cp < 0x10000)) return false;
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    i += extra + 1;
  }
  return true;
}

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    }
    int extra = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : 3;
    char32_t cp = c & (extra == 1 ? 0x1F : extra == 2 ? 0x0F : 0x07);
    for (int k = 1; k <= extra && i + k < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
    out.push_back(cp);
    i += extra + 1;
  }
  return out;
}

void append_utf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string encode_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(c, out);
  return out;
}

std::size_t codepoint_count(std::string_view s) {
  std::size_t n = 0;
  for (char c : s) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

bool py_isspace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  return unicode::is_space(c);
}

std::string py_strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  std::u32string text = decode_utf8(s);
  std::u32string set;
  if (chars) set = decode_utf8(*chars);
  auto strip_it = [&](char32_t c) { return chars ? set.find(c) != std::u32string::npos : py_isspace(c); };
  std::size_t begin = 0, end = text.size();
  if (left) {
    while (begin < end && strip_it(text[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_it(text[end - 1])) --end;
  }
  return encode_utf8(std::u32string_view(text).substr(begin, end - begin));
}

namespace {

std::vector<std::string> split_whitespace(std::u32string_view t, std::int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (!from_right) {
    std::size_t i = 0;
    while (true) {
      while (i < t.size() && py_isspace(t[i])) ++i;
      if (i == t.size()) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit) {
        parts.push_back(encode_utf8(t.substr(i)));
        break;
      }
      std::size_t j = i;
      while (j < t.size() && !py_isspace(t[j])) ++j;
      parts.push_back(encode_utf8(t.substr(i, j - i)));
      i = j;
    }
    return parts;
  }
  std::size_t end = t.size();
  while (true) {
    while (end > 0 && py_isspace(t[end - 1])) --end;
    if (end == 0) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit) {
      parts.push_back(encode_utf8(t.substr(0, end)));
      break;
    }
    std::size_t j = end;
    while (j > 0 && !py_isspace(t[j - 1])) --j;
    parts.push_back(encode_utf8(t.substr(j, end - j)));
    end = j;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

}  // namespace

Result<std::vector<std::string>> py_split(std::string_view s, const std::optional<std::string>& sep,
                                          std::int64_t maxsplit, bool from_right) {
  if (!sep) return split_whitespace(decode_utf8(s), maxsplit, from_right);
  if (sep->empty()) return Status::invalid_input("ValueError: empty separator");
  std::vector<std::string> parts;
  // Byte search is code-point exact for valid UTF-8.
  if (!from_right) {
    std::size_t start = 0;
    while (true) {
      if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit) break;
      std::size_t hit = s.find(*sep, start);
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(start, hit - start));
      start = hit + sep->size();
    }
    parts.emplace_back(s.substr(start));
    return parts;
  }
  std::size_t end = s.size();
  while (true) {
    if (maxsplit >= 0 && static_cast<std::int64_t>(parts.size()) == maxsplit) break;
    if (end < sep->size()) break;
    std::size_t hit = s.rfind(*sep, end - sep->size());
    if (hit == std::string_view::npos) break;
    parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
    end = hit;
  }
  parts.emplace_back(s.substr(0, end));
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> py_splitlines(std::string_view s, bool keepends) {
  std::u32string t = decode_utf8(s);
  std::vector<std::string> lines;
  std::size_t start = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    char32_t c = t[i];
    bool boundary = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                    c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!boundary) continue;
    std::size_t eol = i + 1;
    if (c == '\r' && i + 1 < t.size() && t[i + 1] == '\n') eol = i + 2;
    lines.push_back(encode_utf8(std::u32string_view(t).substr(start, (keepends ? eol : i) - start)));
    start = eol;
    i = eol - 1;
  }
  if (start < t.size()) lines.push_back(encode_utf8(std::u32string_view(t).substr(start)));
  return lines;
}

std::string py_replace(std::string_view s, std::string_view old, std::string_view replacement, std::int64_t count) {
  std::string out;
  std::int64_t done = 0;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    std::size_t i = 0;
    while (i <= s.size()) {
      if (count < 0 || done < count) {
        out.append(replacement);
        ++done;
      }
      if (i == s.size()) break;
      std::size_t j = i + 1;
      while (j < s.size() && (static_cast<unsigned char>(s[j]) & 0xC0) == 0x80) ++j;
      out.append(s.substr(i, j - i));
      i = j;
    }
    return out;
  }
  std::size_t start = 0;
  while (count < 0 || done < count) {
    std::size_t hit = s.find(old, start);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(start, hit - start));
    out.append(replacement);
    start = hit + old.size();
    ++done;
  }
  out.append(s.substr(start));
  return out;
}

namespace {

constexpr char32_t kCapitalSigma = 0x3A3;

// Python's lower() of one code point in context (final sigma).
void lower_at(const std::u32string& t, std::size_t i, std::u32string& out) {
  if (t[i] != kCapitalSigma) {
    unicode::append_lower(t[i], out);
    return;
  }
  std::size_t j = i;
  bool final_sigma = false;
  while (j > 0 && unicode::is_case_ignorable(t[j - 1])) --j;
  final_sigma = j > 0 && unicode::is_cased(t[j - 1]);
  if (final_sigma) {
    std::size_t k = i + 1;
    while (k < t.size() && unicode::is_case_ignorable(t[k])) ++k;
    final_sigma = k == t.size() || !unicode::is_cased(t[k]);
  }
  out.push_back(final_sigma ? 0x3C2 : 0x3C3);
}

bool all_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

}  // namespace

std::string py_lower(std::string_view s) {
  if (all_ascii(s)) {
    std::string out(s);
    for (char& c : out) c = (c >= 'A' && c <= 'Z') ? static_cast<char>(c + 32) : c;
    return out;
  }
  std::u32string t = decode_utf8(s), out;
  for (std::size_t i = 0; i < t.size(); ++i) lower_at(t, i, out);
  return encode_utf8(out);
}

std::string py_upper(std::string_view s) {
  if (all_ascii(s)) {
    std::string out(s);
    for (char& c : out) c = (c >= 'a' && c <= 'z') ? static_cast<char>(c - 32) : c;
    return out;
  }
  std::u32string t = decode_utf8(s), out;
  for (char32_t c : t) unicode::append_upper(c, out);
  return encode_utf8(out);
}

std::string py_capitalize(std::string_view s) {
  std::u32string t = decode_utf8(s), out;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (i == 0) {
      unicode::append_title(t[i], out);
    } else {
      lower_at(t, i, out);
    }
  }
  return encode_utf8(out);
}

std::string py_title(std::string_view s) {
  std::u32string t = decode_utf8(s), out;
  bool previous_is_cased = false;
  for (std::size_t i = 0; i < t.size(); ++i) {
    if (previous_is_cased) {
      lower_at(t, i, out);
    } else {
      unicode::append_title(t[i], out);
    }
    previous_is_cased = unicode::is_cased(t[i]);
  }
  return encode_utf8(out);
}

std::string jinja_title(std::string_view s) {
  std::u32string t = decode_utf8(s), out;
  auto is_sep = [](char32_t c) { return c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || py_isspace(c); };
  std::size_t i = 0;
  while (i < t.size()) {
    std::size_t j = i;
    bool sep = is_sep(t[i]);
    while (j < t.size() && is_sep(t[j]) == sep) ++j;
    // item[0].upper() + item[1:].lower()
    std::u32string piece = t.substr(i, j - i);
    unicode::append_upper(piece[0], out);
    std::u32string rest = piece.substr(1);  // lower() of item[1:] sees only that text
    for (std::size_t k = 0; k < rest.size(); ++k) lower_at(rest, k, out);
    i = j;
  }
  return encode_utf8(out);
}

Result<std::vector<std::size_t>> slice_indices(std::size_t size, std::optional<std::int64_t> start,
                                               std::optional<std::int64_t> stop, std::optional<std::int64_t> step) {
  std::int64_t st = step.value_or(1);
  if (st == 0) return Status::invalid_input("ValueError: slice step cannot be zero");
  auto n = static_cast<std::int64_t>(size);
  std::int64_t b, e;
  if (st > 0) {
    b = start ? *start : 0;
    e = stop ? *stop : n;
    if (b < 0) b = std::max<std::int64_t>(b + n, 0);
    if (e < 0) e = std::max<std::int64_t>(e + n, 0);
    b = std::min(b, n);
    e = std::min(e, n);
  } else {
    b = start ? *start : n - 1;
    e = stop ? *stop : -1;
    if (start) {
      if (b < 0) b = std::max<std::int64_t>(b + n, -1);
      if (b >= n) b = n - 1;
    }
    if (stop) {
      if (e < 0) e = std::max<std::int64_t>(e + n, -1);
      if (e >= n) e = n - 1;
    }
  }
  std::vector<std::size_t> out;
  for (std::int64_t i = b; st > 0 ? i < e : i > e; i += st) out.push_back(static_cast<std::size_t>(i));
  return out;
}

namespace {

// start/end of str.find and friends, adjusted like a slice.
std::pair<std::int64_t, std::int64_t> find_bounds(std::int64_t n, std::optional<std::int64_t> start,
                                                  std::optional<std::int64_t> end) {
  std::int64_t b = start.value_or(0), e = end.value_or(n);
  if (b < 0) b = std::max<std::int64_t>(b + n, 0);
  if (e < 0) e = std::max<std::int64_t>(e + n, 0);
  e = std::min(e, n);
  return {b, e};
}

}  // namespace

std::int64_t py_find(std::string_view s, std::string_view sub, std::optional<std::int64_t> start,
                     std::optional<std::int64_t> end, bool from_right) {
  std::u32string t = decode_utf8(s), u = decode_utf8(sub);
  auto [b, e] = find_bounds(static_cast<std::int64_t>(t.size()), start, end);
  auto m = static_cast<std::int64_t>(u.size());
  if (b > e || e - b < m) return -1;
  std::u32string_view window = std::u32string_view(t).substr(b, e - b);
  std::size_t hit = from_right ? window.rfind(u) : window.find(u);
  return hit == std::u32string_view::npos ? -1 : b + static_cast<std::int64_t>(hit);
}

std::int64_t py_count(std::string_view s, std::string_view sub, std::optional<std::int64_t> start,
                      std::optional<std::int64_t> end) {
  std::u32string t = decode_utf8(s), u = decode_utf8(sub);
  auto [b, e] = find_bounds(static_cast<std::int64_t>(t.size()), start, end);
  if (b > e) return 0;
  if (u.empty()) return e - b + 1;
  std::u32string_view window = std::u32string_view(t).substr(b, e - b);
  std::int64_t n = 0;
  for (std::size_t pos = window.find(u); pos != std::u32string_view::npos; pos = window.find(u, pos + u.size())) ++n;
  return n;
}

void append_str_repr(std::string_view s, std::string& out) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = (has_single && !has_double) ? '"' : '\'';
  static constexpr char kHex[] = "0123456789abcdef";
  auto hex = [&](char32_t c, int digits) {
    for (int k = digits - 1; k >= 0; --k) out.push_back(kHex[(c >> (4 * k)) & 0xF]);
  };
  out.push_back(quote);
  for (char32_t c : decode_utf8(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7F) {
      out += "\\x";
      hex(c, 2);
    } else if (c < 0x7F || unicode::is_printable(c)) {
      append_utf8(c, out);
    } else if (c <= 0xFF) {
      out += "\\x";
      hex(c, 2);
    } else if (c <= 0xFFFF) {
      out += "\\u";
      hex(c, 4);
    } else {
      out += "\\U";
      hex(c, 8);
    }
  }
  out.push_back(quote);
}

}  // namespace tessera::tmpl
