// Regex on PCRE2 (8-bit, UTF + UCP, JIT).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include <vector>

#include "tokenizer/unicode_text.h"

namespace tessera::tok {

namespace {

// Unicode White_Space, which Oniguruma (and Rust's regex) mean by \s.
constexpr std::string_view kWhiteSpaceSet =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}";

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

struct MatchDataDeleter {
  void operator()(pcre2_match_data* data) const { pcre2_match_data_free(data); }
};

// One match data block per thread, shared by all patterns (only group 0 is read).
pcre2_match_data* thread_match_data() {
  thread_local std::unique_ptr<pcre2_match_data, MatchDataDeleter> data(pcre2_match_data_create(1, nullptr));
  return data.get();
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Code() { pcre2_code_free(code); }
};

std::string rewrite_onig_pattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 64);
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpaceSet) : "[" + std::string(kWhiteSpaceSet) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpaceSet) + "]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (in_class && c == '[' && i + 1 < pattern.size() && pattern[i + 1] == ':') {
      const size_t close = pattern.find(":]", i + 2);  // POSIX class such as [:alpha:]
      if (close != std::string_view::npos) {
        out.append(pattern.substr(i, close + 2 - i));
        i = close + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Result<Regex> Regex::compile(std::string_view pattern, std::string_view where) {
  const std::string rewritten = rewrite_onig_pattern(pattern);
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()), rewritten.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset, nullptr);
  if (code == nullptr)
    return Status::invalid_input(std::string(where) + ": regex '" + std::string(pattern) +
                                 "' does not compile: " + pcre2_message(error));
  auto compiled = std::make_shared<Code>();
  compiled->code = code;
  compiled->jit = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
  Regex regex;
  regex.code_ = std::move(compiled);
  regex.source_ = std::string(pattern);
  return regex;
}

Result<Regex> Regex::literal(std::string_view text, std::string_view where) {
  if (!is_valid_utf8(text)) return Status::invalid_input(std::string(where) + ": pattern is not valid UTF-8");
  Regex regex;
  regex.literal_ = true;
  regex.literal_text_ = std::string(text);
  regex.source_ = std::string(text);
  return regex;
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const {
  matches.clear();
  find_all(text, [&](size_t s, size_t e) { matches.emplace_back(s, e); });
}

void Regex::find_all(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const {
  if (literal_) {
    if (literal_text_.empty()) return;  // an empty literal matches nothing (as in HF)
    for (size_t pos = text.find(literal_text_); pos != std::string_view::npos;
         pos = text.find(literal_text_, pos + literal_text_.size()))
      on_match(pos, pos + literal_text_.size());
    return;
  }
  pcre2_match_data* data = thread_match_data();
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  size_t last_end = std::string_view::npos;
  while (start <= text.size()) {
    const int rc = code_->jit
                       ? pcre2_jit_match(code_->code, subject, text.size(), start, 0, data, nullptr)
                       : pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH, or a resource limit: no more matches
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data);
    const size_t s = ovector[0], e = ovector[1];
    // Like the onig crate's find_iter: no empty match right where the last one ended.
    if (!(s == e && e == last_end)) on_match(s, e);
    last_end = e;
    if (e > s) {
      start = e;
    } else {
      if (e >= text.size()) break;
      start = e + utf8_length(static_cast<uint8_t>(text[e]));
    }
  }
}

}  // namespace tessera::tok
