// Jinja lexer; see lexer.h. Follows jinja2/lexer.py rule by rule: the root
// state finds the next {{ {% {# (or {% raw %}), applies whitespace control to
// the text before it, and the tag states tokenize until the matching end with
// brackets balanced.
#include "template/lexer.h"

#include <algorithm>
#include <array>

#include "template/py_string.h"

namespace tessera::tmpl {
namespace {

constexpr std::array<std::string_view, 25> kOperators = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
    "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",",
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }
int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's \n, \r\n, \r -> \n, then keep_trailing_newline=False drops one final newline.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  Result<LexedTemplate> run() {
    while (pos_ < src_.size()) TS_RETURN_IF_ERROR(lex_root());
    push(TokenType::kEof, "", src_.size());
    return LexedTemplate{std::move(src_), std::move(tokens_)};
  }

 private:
  enum class Tag { kVariable, kBlock, kComment };

  Status error(std::size_t offset, const std::string& message) const {
    return Status::invalid_input("template syntax error at " + describe_position(src_, offset) + ": " + message);
  }

  void push(TokenType type, std::string text, std::size_t offset) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.offset = offset;
    tokens_.push_back(std::move(t));
  }

  // Length of the Python whitespace code point at i (0 if none).
  std::size_t space_at(std::size_t i) const {
    if (i >= src_.size()) return 0;
    auto c = static_cast<unsigned char>(src_[i]);
    if (c < 0x80) return py_isspace(c) ? 1 : 0;
    std::size_t len = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
    std::u32string cp = decode_utf8(std::string_view(src_).substr(i, len));
    return !cp.empty() && py_isspace(cp[0]) ? len : 0;
  }
  std::size_t skip_spaces(std::size_t i) const {
    while (std::size_t n = space_at(i)) i += n;
    return i;
  }
  bool at(std::size_t i, std::string_view s) const { return src_.compare(i, s.size(), s) == 0; }

  // text.rstrip() with Python's whitespace.
  static std::string rstrip(std::string_view text) {
    std::u32string t = decode_utf8(text);
    while (!t.empty() && py_isspace(t.back())) t.pop_back();
    return encode_utf8(t);
  }

  // The text before a tag, after {%- / lstrip_blocks; `lstrip` is false for {{ }}.
  std::string strip_before(std::string_view text, char sign, bool lstrip) const {
    if (sign == '-') return rstrip(text);
    if (sign == '+' || !lstrip) return std::string(text);
    std::size_t nl = text.rfind('\n');
    std::size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos > 0 || line_starting_) {
      std::string_view tail = text.substr(l_pos);
      bool all_space = !tail.empty();
      for (char32_t c : decode_utf8(tail)) all_space = all_space && py_isspace(c);
      if (all_space) return std::string(text.substr(0, l_pos));
    }
    return std::string(text);
  }

  void push_data(std::string text, std::size_t offset) {
    if (!text.empty()) push(TokenType::kData, std::move(text), offset);
  }

  Status lex_root() {
    std::size_t start = pos_;
    std::size_t tag = std::string::npos;
    for (std::size_t i = src_.find('{', pos_); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        tag = i;
        break;
      }
    }
    if (tag == std::string::npos) {
      push_data(src_.substr(pos_), pos_);
      pos_ = src_.size();
      return Status();
    }
    char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : '\0';
    std::size_t after = tag + 2 + (sign ? 1 : 0);
    std::string_view text = std::string_view(src_).substr(start, tag - start);
    Tag kind = src_[tag + 1] == '{' ? Tag::kVariable : src_[tag + 1] == '%' ? Tag::kBlock : Tag::kComment;

    if (kind == Tag::kBlock) {
      // {% raw %} ... {% endraw %}
      std::size_t p = skip_spaces(after);
      if (at(p, "raw") && (p + 3 >= src_.size() || !is_name_char(src_[p + 3]))) {
        std::size_t q = skip_spaces(p + 3);
        std::size_t end = std::string::npos;
        if (at(q, "-%}")) {
          end = skip_spaces(q + 3);
        } else if (at(q, "%}")) {
          end = q + 2;
        }
        if (end != std::string::npos) {
          push_data(strip_before(text, sign, true), start);
          line_starting_ = src_[end - 1] == '\n';
          return lex_raw(end);
        }
      }
    }
    push_data(strip_before(text, sign, kind != Tag::kVariable), start);
    pos_ = after;
    line_starting_ = false;
    if (kind == Tag::kComment) return lex_comment(tag);
    push(kind == Tag::kVariable ? TokenType::kVariableBegin : TokenType::kBlockBegin, "", tag);
    return lex_tag(kind);
  }

  Status lex_raw(std::size_t body) {
    for (std::size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      char sign = i + 2 < src_.size() && (src_[i + 2] == '-' || src_[i + 2] == '+') ? src_[i + 2] : '\0';
      std::size_t p = skip_spaces(i + 2 + (sign ? 1 : 0));
      if (!at(p, "endraw")) continue;
      std::size_t q = skip_spaces(p + 6);
      std::size_t end;
      if (at(q, "+%}")) {
        end = q + 3;
      } else if (at(q, "-%}")) {
        end = skip_spaces(q + 3);
      } else if (at(q, "%}")) {
        end = q + 2 + (q + 2 < src_.size() && src_[q + 2] == '\n' ? 1 : 0);
      } else {
        continue;
      }
      push_data(strip_before(std::string_view(src_).substr(body, i - body), sign, true), body);
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return Status();
    }
    return error(body, "Missing end of raw directive");
  }

  Status lex_comment(std::size_t open) {
    for (std::size_t i = src_.find("#}", pos_); i != std::string::npos; i = src_.find("#}", i + 1)) {
      std::size_t end;
      if (i > pos_ && src_[i - 1] == '+') {
        end = i + 2;
      } else if (i > pos_ && src_[i - 1] == '-') {
        end = skip_spaces(i + 2);
      } else {
        end = i + 2 + (i + 2 < src_.size() && src_[i + 2] == '\n' ? 1 : 0);
      }
      line_starting_ = src_[end - 1] == '\n';
      pos_ = end;
      return Status();
    }
    return error(open, "Missing end of comment tag");
  }

  Status lex_tag(Tag kind) {
    std::vector<char> balance;
    while (true) {
      if (pos_ >= src_.size()) return Status();  // the parser reports the unclosed tag
      if (balance.empty()) {
        if (kind == Tag::kBlock) {
          if (at(pos_, "+%}")) return end_tag(TokenType::kBlockEnd, pos_ + 3);
          if (at(pos_, "-%}")) return end_tag(TokenType::kBlockEnd, skip_spaces(pos_ + 3));
          if (at(pos_, "%}")) {
            return end_tag(TokenType::kBlockEnd, pos_ + 2 + (pos_ + 2 < src_.size() && src_[pos_ + 2] == '\n'));
          }
        } else {
          if (at(pos_, "-}}")) return end_tag(TokenType::kVariableEnd, skip_spaces(pos_ + 3));
          if (at(pos_, "}}")) return end_tag(TokenType::kVariableEnd, pos_ + 2);
        }
      }
      if (std::size_t n = space_at(pos_)) {
        pos_ = skip_spaces(pos_ + n);
        continue;
      }
      char c = src_[pos_];
      if (is_digit(c)) {
        TS_RETURN_IF_ERROR(lex_number());
        continue;
      }
      if (is_name_start(c)) {
        std::size_t e = pos_;
        while (e < src_.size() && is_name_char(src_[e])) ++e;
        push(TokenType::kName, src_.substr(pos_, e - pos_), pos_);
        pos_ = e;
        continue;
      }
      if (c == '\'' || c == '"') {
        TS_RETURN_IF_ERROR(lex_string());
        continue;
      }
      std::string_view op;
      for (std::string_view candidate : kOperators) {
        if (at(pos_, candidate)) {
          op = candidate;
          break;
        }
      }
      if (op.empty()) {
        std::string shown;
        append_str_repr(std::string_view(src_).substr(pos_, std::max<std::size_t>(1, space_len_any(pos_))), shown);
        return error(pos_, "unexpected char " + shown);
      }
      if (op == "(" || op == "[" || op == "{") {
        balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (balance.empty()) return error(pos_, "unexpected '" + std::string(op) + "'");
        if (balance.back() != op[0]) {
          return error(pos_, "unexpected '" + std::string(op) + "', expected '" + std::string(1, balance.back()) + "'");
        }
        balance.pop_back();
      }
      push(TokenType::kOperator, std::string(op), pos_);
      pos_ += op.size();
    }
  }

  // Byte length of the UTF-8 sequence at i (for error messages).
  std::size_t space_len_any(std::size_t i) const {
    auto c = static_cast<unsigned char>(src_[i]);
    return c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
  }

  Status end_tag(TokenType type, std::size_t end) {
    push(type, "", pos_);
    line_starting_ = src_[end - 1] == '\n';
    pos_ = end;
    return Status();
  }

  // Digits with optional single underscores between them, from i; returns the end.
  std::size_t digits_from(std::size_t i) const {
    if (i >= src_.size() || !is_digit(src_[i])) return i;
    std::size_t e = i + 1;
    while (e < src_.size()) {
      if (is_digit(src_[e])) {
        ++e;
      } else if (src_[e] == '_' && e + 1 < src_.size() && is_digit(src_[e + 1])) {
        e += 2;
      } else {
        break;
      }
    }
    return e;
  }

  Status lex_number() {
    std::size_t start = pos_;
    auto strip_underscores = [](std::string s) {
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      return s;
    };
    // float_re: digits ((. digits)? e[+-]? digits | . digits), not preceded by '.'
    bool after_dot = start > 0 && src_[start - 1] == '.';
    std::size_t int_end = digits_from(start);
    if (!after_dot) {
      std::size_t e = int_end;
      bool has_fraction = false;
      if (e < src_.size() && src_[e] == '.' && digits_from(e + 1) > e + 1) {
        e = digits_from(e + 1);
        has_fraction = true;
      }
      std::size_t exp_end = e;
      if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
        std::size_t d = e + 1;
        if (d < src_.size() && (src_[d] == '+' || src_[d] == '-')) ++d;
        if (digits_from(d) > d) exp_end = digits_from(d);
      }
      if (has_fraction || exp_end > e) {
        std::string text = strip_underscores(src_.substr(start, exp_end - start));
        Token t;
        t.type = TokenType::kFloat;
        t.text = text;
        t.float_value = std::strtod(text.c_str(), nullptr);
        t.offset = start;
        tokens_.push_back(std::move(t));
        pos_ = exp_end;
        return Status();
      }
    }
    // integer_re: 0b / 0o / 0x prefixes, [1-9](_?\d)*, 0(_?0)*
    int base = 10;
    std::size_t e = start;
    if (src_[start] == '0' && start + 1 < src_.size()) {
      char p = static_cast<char>(src_[start + 1] | 0x20);
      base = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 10;
    }
    if (base != 10) {
      std::size_t d = start + 2;
      auto ok = [&](char c) {
        int v = hex_value(c);
        return v >= 0 && v < base;
      };
      while (d < src_.size()) {
        if (ok(src_[d])) {
          ++d;
        } else if (src_[d] == '_' && d + 1 < src_.size() && ok(src_[d + 1])) {
          d += 2;
        } else {
          break;
        }
      }
      if (d == start + 2) base = 10;  // "0x" with no digits: just the 0
      e = d;
    }
    if (base == 10) {
      if (src_[start] == '0') {
        e = start + 1;
        while (e < src_.size()) {
          if (src_[e] == '0') {
            ++e;
          } else if (src_[e] == '_' && e + 1 < src_.size() && src_[e + 1] == '0') {
            e += 2;
          } else {
            break;
          }
        }
      } else {
        e = int_end;
      }
    }
    std::string text = strip_underscores(src_.substr(start, e - start));
    std::string digits = base == 10 ? text : text.substr(2);
    std::int64_t value = 0;
    for (char c : digits) {
      int v = hex_value(c);
      if (__builtin_mul_overflow(value, base, &value) || __builtin_add_overflow(value, v, &value)) {
        return Status::unsupported("integer literal " + text + " does not fit in 64 bits");
      }
    }
    Token t;
    t.type = TokenType::kInteger;
    t.text = text;
    t.int_value = value;
    t.offset = start;
    tokens_.push_back(std::move(t));
    pos_ = e;
    return Status();
  }

  // A quoted literal decoded as Python's unicode-escape codec decodes it.
  Status lex_string() {
    char quote = src_[pos_];
    std::size_t start = pos_;
    std::size_t i = pos_ + 1;
    std::string out;
    while (true) {
      if (i >= src_.size()) {
        return error(start, std::string("unexpected char '") + quote + "'");
      }
      char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        out.push_back(c);
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) return error(start, std::string("unexpected char '") + quote + "'");
      char e = src_[i + 1];
      i += 2;
      switch (e) {
        case '\n': break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case 'x':
        case 'u':
        case 'U': {
          int n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          char32_t v = 0;
          for (int k = 0; k < n; ++k) {
            int h = i + k < src_.size() ? hex_value(src_[i + k]) : -1;
            if (h < 0) return error(start, std::string("truncated \\") + e + " escape");
            v = v * 16 + static_cast<char32_t>(h);
          }
          i += n;
          if (v > 0x10FFFF) return error(start, "illegal Unicode character");
          if (v >= 0xD800 && v <= 0xDFFF)
            return Status::unsupported("surrogate escapes in string literals are not supported");
          append_utf8(v, out);
          break;
        }
        case 'N': return Status::unsupported("\\N{...} escapes in string literals are not supported");
        default:
          if (e >= '0' && e <= '7') {
            char32_t v = static_cast<char32_t>(e - '0');
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k, ++i) {
              v = v * 8 + static_cast<char32_t>(src_[i] - '0');
            }
            append_utf8(v, out);
          } else if (static_cast<unsigned char>(e) >= 0x80) {
            // Python first turns the non-ASCII character into \xNN / \uNNNN text,
            // so the backslash stays and the character comes out as that escape text.
            std::size_t len = space_len_any(i - 1);
            char32_t cp = decode_utf8(std::string_view(src_).substr(i - 1, len))[0];
            static constexpr char kHex[] = "0123456789abcdef";
            int n = cp <= 0xFF ? 2 : cp <= 0xFFFF ? 4 : 8;
            out += "\\";
            out += n == 2 ? "x" : n == 4 ? "u" : "U";
            for (int k = n - 1; k >= 0; --k) out.push_back(kHex[(cp >> (4 * k)) & 0xF]);
            i = i - 1 + len;
          } else {
            out.push_back('\\');
            out.push_back(e);
          }
      }
    }
    Token t;
    t.type = TokenType::kString;
    t.text = std::move(out);
    t.offset = start;
    tokens_.push_back(std::move(t));
    pos_ = i + 1;
    return Status();
  }

  std::string src_;
  std::size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

std::string describe_position(std::string_view source, std::size_t offset) {
  std::string_view before = source.substr(0, std::min(offset, source.size()));
  std::size_t line = 1 + static_cast<std::size_t>(std::count(before.begin(), before.end(), '\n'));
  std::size_t nl = before.rfind('\n');
  std::size_t column = 1 + codepoint_count(before.substr(nl == std::string_view::npos ? 0 : nl + 1));
  return std::to_string(line) + ":" + std::to_string(column);
}

Result<LexedTemplate> lex(std::string_view source) {
  Lexer lexer(normalize_newlines(source));
  return lexer.run();
}

}  // namespace tessera::tmpl
