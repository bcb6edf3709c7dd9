// UTF-8 and Unicode helpers for the tokenizer: decoding and validation, ICU-backed
// normalization forms (NFC, NFD, NFKC, NFKD), per-character lowercasing and the
// character classes that Hugging Face's tokenizers take from Rust's `char`
// (is_whitespace, is_numeric, is_punctuation) and from the `regex` crate (\w, \s).
//
// Character properties come from ICU (Unicode 15 on Debian 12); the reference
// library uses Unicode 16 tables, so characters assigned after Unicode 15 may be
// classified differently (see docs in tokenizer.h).
//
// Stateless free functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace tessera::tok {

// True when `text` is well-formed UTF-8 (no overlongs, surrogates or values past U+10FFFF).
bool is_valid_utf8(std::string_view text);
// Length of the longest well-formed UTF-8 prefix of `text`.
size_t valid_utf8_prefix(std::string_view text);

// Byte length of the UTF-8 sequence that starts with `lead` (1 for a stray continuation byte).
inline size_t utf8_length(uint8_t lead) {
  if (lead < 0x80) return 1;
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

// Decodes the code point at text[i] (valid UTF-8 assumed) and advances i past it.
char32_t next_code_point(std::string_view text, size_t& i);
// Decodes the code point that ends at text[end - 1] and moves end back to its start.
char32_t previous_code_point(std::string_view text, size_t& end);
void append_utf8(std::string& out, char32_t c);
inline bool is_ascii(std::string_view text) {
  for (const char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

enum class NormalForm { kNFC, kNFD, kNFKC, kNFKD };
// Unicode normalization of valid UTF-8 text (ICU). ASCII text is returned as is.
Result<std::string> normalize_form(std::string_view text, NormalForm form);
// Rust's str::to_lowercase applied char by char (full case mapping, no context).
std::string lowercase(std::string_view text);

bool is_white_space(char32_t c);  // Unicode White_Space (Rust char::is_whitespace, regex \s)
bool is_numeric(char32_t c);      // general category Nd, Nl or No (Rust char::is_numeric)
bool is_punctuation(char32_t c);  // ASCII punctuation or general category P* (HF is_punc)
bool is_word_char(char32_t c);    // regex crate \w: Alphabetic, M*, Nd, Pc, Join_Control

}  // namespace tessera::tok
