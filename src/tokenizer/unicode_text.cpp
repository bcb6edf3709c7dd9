// Implementation of unicode_text.h on ICU (normalization, case mapping, properties).
#include "tokenizer/unicode_text.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/ustring.h>
#include <unicode/utypes.h>

namespace tessera::tok {

bool is_valid_utf8(std::string_view text) { return valid_utf8_prefix(text) == text.size(); }

size_t valid_utf8_prefix(std::string_view text) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const uint8_t b = p[i];
    if (b < 0x80) {
      ++i;
      continue;
    }
    size_t len;
    char32_t c;
    if (b >= 0xC2 && b <= 0xDF) {
      len = 2, c = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      len = 3, c = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      len = 4, c = b & 0x07;
    } else {
      return i;
    }
    if (i + len > n) return i;
    for (size_t k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      c = (c << 6) | (p[i + k] & 0x3F);
    }
    if ((len == 3 && c < 0x800) || (len == 4 && (c < 0x10000 || c > 0x10FFFF)) || (c >= 0xD800 && c <= 0xDFFF))
      return i;
    i += len;
  }
  return n;
}

char32_t next_code_point(std::string_view text, size_t& i) {
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const uint8_t b = p[i];
  if (b < 0x80) return p[i++];
  const size_t len = utf8_length(b);
  char32_t c = b & (0x7F >> len);
  for (size_t k = 1; k < len && i + k < text.size(); ++k) c = (c << 6) | (p[i + k] & 0x3F);
  i += len;
  return c;
}

char32_t previous_code_point(std::string_view text, size_t& end) {
  size_t start = end - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  size_t i = start;
  const char32_t c = next_code_point(text, i);
  end = start;
  return c;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

Result<std::string> normalize_form(std::string_view text, NormalForm form) {
  if (is_ascii(text)) return std::string(text);
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = nullptr;
  switch (form) {
    case NormalForm::kNFC: normalizer = icu::Normalizer2::getNFCInstance(error); break;
    case NormalForm::kNFD: normalizer = icu::Normalizer2::getNFDInstance(error); break;
    case NormalForm::kNFKC: normalizer = icu::Normalizer2::getNFKCInstance(error); break;
    case NormalForm::kNFKD: normalizer = icu::Normalizer2::getNFKDInstance(error); break;
  }
  if (U_FAILURE(error)) return Status::internal(std::string("ICU normalizer: ") + u_errorName(error));
  std::string out;
  out.reserve(text.size() + text.size() / 8);
  icu::StringByteSink<std::string> sink(&out);
  normalizer->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())), sink, nullptr, error);
  if (U_FAILURE(error)) return Status::internal(std::string("ICU normalization: ") + u_errorName(error));
  return out;
}

std::string lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const char32_t c = next_code_point(text, i);
    if (c < 0x80) {
      out += static_cast<char>(c >= 'A' && c <= 'Z' ? c + 32 : c);
      continue;
    }
    UChar src[2], dst[8];
    int32_t src_len = 0;
    U16_APPEND_UNSAFE(src, src_len, c);
    UErrorCode error = U_ZERO_ERROR;
    // A single character has no casing context, as in Rust's char::to_lowercase.
    const int32_t n = u_strToLower(dst, 8, src, src_len, "", &error);
    if (U_FAILURE(error)) {
      append_utf8(out, c);
      continue;
    }
    for (int32_t k = 0; k < n;) {
      UChar32 lc;
      U16_NEXT(dst, k, n, lc);
      append_utf8(out, static_cast<char32_t>(lc));
    }
  }
  return out;
}

bool is_white_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)); }

bool is_numeric(char32_t c) {
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

bool is_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~');
  return u_ispunct(static_cast<UChar32>(c));
}

bool is_word_char(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_hasBinaryProperty(u, UCHAR_ALPHABETIC) || u_hasBinaryProperty(u, UCHAR_JOIN_CONTROL)) return true;
  const int8_t t = u_charType(u);
  return t == U_NON_SPACING_MARK || t == U_ENCLOSING_MARK || t == U_COMBINING_SPACING_MARK ||
         t == U_DECIMAL_DIGIT_NUMBER || t == U_CONNECTOR_PUNCTUATION;
}

}  // namespace tessera::tok
