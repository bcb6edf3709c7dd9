// Regex: a compiled PCRE2 pattern (UTF + UCP, JIT when available) with the
// find-all iteration that Hugging Face's tokenizers apply (via Oniguruma) in Split
// pre-tokenizers, Replace normalizers and decoders.
//
// Oniguruma and PCRE2 agree on the patterns real tokenizer.json files use, with
// two known gaps that the constructor closes or states:
//   - `\s` / `\S`: PCRE2 also counts U+180E as a space; Oniguruma follows Unicode's
//     White_Space. Outside a character class tessera rewrites both to the exact
//     White_Space set; inside a class it rewrites `\s` (`\S` inside a class stays).
//   - `\p{...}`: PCRE2 10.42 has Unicode 14 tables, the reference Unicode 16;
//     characters assigned in Unicode 15 and 16 are classified differently.
//
// Immutable after compile; copies share the compiled code. find_all is safe from
// any thread (per-thread match data).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tessera::tok {

class Regex {
 public:
  // Compiles an Oniguruma-style pattern from tokenizer.json. A pattern PCRE2 refuses
  // gets invalid_input naming `where` and the PCRE2 message.
  static Result<Regex> compile(std::string_view pattern, std::string_view where);
  // Matches a literal string (HF's {"String": ...} patterns).
  static Result<Regex> literal(std::string_view text, std::string_view where);

  // Calls on_match(start, end) for each successive non-overlapping match in
  // `text` (valid UTF-8), left to right; after an empty match the search resumes
  // one character later, as Oniguruma's find_iter does.
  void find_all(std::string_view text, const std::function<void(size_t, size_t)>& on_match) const;
  // Same, into a caller-owned vector of (start, end) pairs (cleared first).
  void find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>& matches) const;

  const std::string& pattern() const { return source_; }

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
  std::string source_;
  bool literal_ = false;
  std::string literal_text_;
};

// Rewrites `\s`/`\S` to Unicode White_Space (see above). Exposed for tests.
std::string rewrite_onig_pattern(std::string_view pattern);

}  // namespace tessera::tok
