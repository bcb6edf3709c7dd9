// Pre-tokenizer implementations (see pre_tokenizer.h). The split logic follows
// HF's NormalizedString::split: a pattern yields spans covering the text, each
// marked match or not; a behavior decides which spans are kept and merged.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <array>
#include <functional>
#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_text.h"

namespace tessera::tok {

namespace {

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct Span {
  size_t start, end;
  bool is_match;
};

Result<Behavior> parse_behavior(const nlohmann::json& config, const std::string& where, Behavior fallback) {
  const auto it = config.find("behavior");
  if (it == config.end() || it->is_null()) return fallback;
  if (!it->is_string()) return Status::invalid_input(where + ": field 'behavior' must be a string");
  const std::string name = it->get<std::string>();
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  return Status::unsupported(where + ": split behavior '" + name + "' is not supported by tessera");
}

// Spans of a regex's matches and the gaps between them (HF Pattern for a regex).
void regex_spans(const Regex& regex, std::string_view text, std::vector<Span>& spans) {
  spans.clear();
  if (text.empty()) {
    spans.push_back({0, 0, false});
    return;
  }
  size_t prev = 0;
  regex.find_all(text, [&](size_t s, size_t e) {
    if (prev != s) spans.push_back({prev, s, false});
    spans.push_back({s, e, true});
    prev = e;
  });
  if (prev != text.size()) spans.push_back({prev, text.size(), false});
}

// Spans where each character for which `is_match` holds is its own match (HF Pattern for Fn(char)).
void char_spans(std::string_view text, const std::function<bool(char32_t)>& is_match, std::vector<Span>& spans) {
  spans.clear();
  if (text.empty()) {
    spans.push_back({0, 0, false});
    return;
  }
  size_t last = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t b = i;
    const char32_t c = next_code_point(text, i);
    if (is_match(c)) {
      if (last < b) spans.push_back({last, b, false});
      spans.push_back({b, i, true});
      last = i;
    }
  }
  if (text.size() > last) spans.push_back({last, text.size(), false});
}

// Applies a behavior (and invert) to spans and appends the kept, non-empty sub-pieces.
void emit_split(const Piece& piece, std::vector<Span>& spans, Behavior behavior, bool invert, std::vector<Piece>& out) {
  if (invert)
    for (auto& span : spans) span.is_match = !span.is_match;
  std::vector<std::pair<size_t, size_t>> kept;
  kept.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const auto& s : spans) kept.emplace_back(s.start, s.end);
      break;
    case Behavior::kRemoved:
      for (const auto& s : spans)
        if (!s.is_match) kept.emplace_back(s.start, s.end);
      break;
    case Behavior::kContiguous:
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().second = s.end;
        } else {
          kept.emplace_back(s.start, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().second = s.end;
        } else {
          kept.emplace_back(s.start, s.end);
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().first = it->start;
        } else {
          kept.emplace_back(it->start, it->end);
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const auto& [s, e] : kept) {
    if (e <= s) continue;
    out.push_back({piece.text.substr(s, e - s), piece.at_start && s == 0});
  }
}

// Runs `split_one` over every piece, replacing the list with the results.
template <typename F>
void split_each(std::vector<Piece>& pieces, F&& split_one) {
  std::vector<Piece> out;
  out.reserve(pieces.size() * 2);
  for (const Piece& piece : pieces) split_one(piece, out);
  pieces = std::move(out);
}

class ByteLevel final : public PreTokenizer {
 public:
  ByteLevel(bool add_prefix_space, bool use_regex, Regex regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex), regex_(std::move(regex)) {}

  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Span> spans;
    split_each(pieces, [&](const Piece& in, std::vector<Piece>& out) {
      Piece piece = in;
      if (add_prefix_space_ && (piece.text.empty() || piece.text[0] != ' ')) piece.text = " " + piece.text;
      const size_t first = out.size();
      if (use_regex_) {
        regex_spans(regex_, piece.text, spans);
        emit_split(piece, spans, Behavior::kIsolated, false, out);
      } else if (!piece.text.empty()) {
        out.push_back(std::move(piece));
      }
      for (size_t i = first; i < out.size(); ++i) out[i].text = map_bytes(out[i].text);
    });
  }

  static std::string map_bytes(std::string_view text) {
    std::string mapped;
    mapped.reserve(text.size() + text.size() / 2);
    for (const char c : text) mapped += byte_level_char(static_cast<uint8_t>(c));
    return mapped;
  }

 private:
  const bool add_prefix_space_, use_regex_;
  const Regex regex_;
};

class Split final : public PreTokenizer {
 public:
  Split(Regex pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Span> spans;
    split_each(pieces, [&](const Piece& piece, std::vector<Piece>& out) {
      regex_spans(pattern_, piece.text, spans);
      emit_split(piece, spans, behavior_, invert_, out);
    });
  }

 private:
  const Regex pattern_;
  const Behavior behavior_;
  const bool invert_;
};

// Splits on single characters chosen by a predicate (Digits, Punctuation, WhitespaceSplit, CharDelimiterSplit).
class CharSplit final : public PreTokenizer {
 public:
  CharSplit(std::function<bool(char32_t)> is_match, Behavior behavior)
      : is_match_(std::move(is_match)), behavior_(behavior) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Span> spans;
    split_each(pieces, [&](const Piece& piece, std::vector<Piece>& out) {
      char_spans(piece.text, is_match_, spans);
      emit_split(piece, spans, behavior_, false, out);
    });
  }

 private:
  const std::function<bool(char32_t)> is_match_;
  const Behavior behavior_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class Metaspace final : public PreTokenizer {
 public:
  Metaspace(char32_t replacement, PrependScheme scheme, bool split)
      : replacement_(replacement), scheme_(scheme), split_(split) {
    append_utf8(replacement_utf8_, replacement);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Span> spans;
    split_each(pieces, [&](const Piece& in, std::vector<Piece>& out) {
      Piece piece{std::string(), in.at_start};
      piece.text.reserve(in.text.size() + 3);
      for (const char c : in.text) {
        if (c == ' ') {
          piece.text += replacement_utf8_;
        } else {
          piece.text += c;
        }
      }
      const bool starts_with_replacement = piece.text.rfind(replacement_utf8_, 0) == 0;
      if (!starts_with_replacement &&
          (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && piece.at_start)))
        piece.text = replacement_utf8_ + piece.text;
      if (split_) {
        char_spans(
            piece.text, [this](char32_t c) { return c == replacement_; }, spans);
        emit_split(piece, spans, Behavior::kMergedWithNext, false, out);
      } else if (!piece.text.empty()) {
        out.push_back(std::move(piece));
      }
    });
  }

 private:
  const char32_t replacement_;
  std::string replacement_utf8_;
  const PrependScheme scheme_;
  const bool split_;
};

class Sequence final : public PreTokenizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<PreTokenizer>> parts) : parts_(std::move(parts)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& part : parts_) part->pre_tokenize(pieces);
  }

 private:
  const std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

// GPT-2's pre-tokenization regex, as HF's ByteLevel pre-tokenizer uses it.
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Oniguruma's \w (Letter, Mark, Decimal_Number, Connector_Punctuation), spelled out for PCRE2.
constexpr std::string_view kWhitespacePattern = R"([\p{L}\p{M}\p{Nd}\p{Pc}]+|[^\p{L}\p{M}\p{Nd}\p{Pc}\s]+)";

Result<char32_t> single_char(const nlohmann::json& config, std::string_view key, const std::string& where) {
  TS_ASSIGN_OR_RETURN(const std::string text, get_string(config, key, where));
  size_t i = 0;
  if (text.empty()) return Status::invalid_input(where + ": field '" + std::string(key) + "' is empty");
  const char32_t c = next_code_point(text, i);
  if (i != text.size())
    return Status::invalid_input(where + ": field '" + std::string(key) + "' must be a single character");
  return c;
}

}  // namespace

const std::string& byte_level_char(uint8_t b) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int n = 0;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
      append_utf8(t[byte], printable ? static_cast<char32_t>(byte) : static_cast<char32_t>(256 + n++));
    }
    return t;
  }();
  return table[b];
}

int byte_level_byte(char32_t c) {
  static const std::array<int16_t, 324> inverse = [] {
    std::array<int16_t, 324> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) {
      size_t i = 0;
      t[next_code_point(byte_level_char(static_cast<uint8_t>(b)), i)] = static_cast<int16_t>(b);
    }
    return t;
  }();
  return c < inverse.size() ? inverse[c] : -1;
}

Result<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const nlohmann::json& config) {
  using Ptr = std::unique_ptr<PreTokenizer>;
  if (config.is_null()) return Ptr();
  TS_ASSIGN_OR_RETURN(const std::string type, get_type(config, "pre_tokenizer"));
  const std::string where = "pre_tokenizer " + type;
  if (type == "ByteLevel") {
    TS_ASSIGN_OR_RETURN(const bool add_prefix_space, get_bool(config, "add_prefix_space", where, true));
    TS_ASSIGN_OR_RETURN(const bool use_regex, get_bool(config, "use_regex", where, true));
    TS_ASSIGN_OR_RETURN(Regex regex, Regex::compile(kGpt2Pattern, where));
    return Ptr(new ByteLevel(add_prefix_space, use_regex, std::move(regex)));
  }
  if (type == "Split") {
    bool is_regex = false;
    TS_ASSIGN_OR_RETURN(const std::string pattern, get_pattern(config, where, is_regex));
    TS_ASSIGN_OR_RETURN(Regex regex, is_regex ? Regex::compile(pattern, where) : Regex::literal(pattern, where));
    if (!config.contains("behavior")) return Status::invalid_input(where + ": field 'behavior' is missing");
    TS_ASSIGN_OR_RETURN(const Behavior behavior, parse_behavior(config, where, Behavior::kRemoved));
    TS_ASSIGN_OR_RETURN(const bool invert, get_bool(config, "invert", where, false));
    return Ptr(new Split(std::move(regex), behavior, invert));
  }
  if (type == "Metaspace") {
    TS_ASSIGN_OR_RETURN(const char32_t replacement, single_char(config, "replacement", where));
    PrependScheme scheme = PrependScheme::kAlways;
    const auto it = config.find("prepend_scheme");
    if (it != config.end() && !it->is_null()) {
      const std::string name = it->is_string() ? it->get<std::string>() : "";
      if (name == "always") {
        scheme = PrependScheme::kAlways;
      } else if (name == "first") {
        scheme = PrependScheme::kFirst;
      } else if (name == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return Status::invalid_input(where + ": field 'prepend_scheme' must be \"always\", \"first\" or \"never\"");
      }
    } else {
      TS_ASSIGN_OR_RETURN(const bool add_prefix_space, get_bool(config, "add_prefix_space", where, true));
      scheme = add_prefix_space ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    TS_ASSIGN_OR_RETURN(const bool split, get_bool(config, "split", where, true));
    return Ptr(new Metaspace(replacement, scheme, split));
  }
  if (type == "Digits") {
    TS_ASSIGN_OR_RETURN(const bool individual, get_bool(config, "individual_digits", where, false));
    return Ptr(new CharSplit(is_numeric, individual ? Behavior::kIsolated : Behavior::kContiguous));
  }
  if (type == "Punctuation") {
    TS_ASSIGN_OR_RETURN(const Behavior behavior, parse_behavior(config, where, Behavior::kIsolated));
    return Ptr(new CharSplit(is_punctuation, behavior));
  }
  if (type == "Whitespace") {
    TS_ASSIGN_OR_RETURN(Regex regex, Regex::compile(kWhitespacePattern, where));
    return Ptr(new Split(std::move(regex), Behavior::kRemoved, true));
  }
  if (type == "WhitespaceSplit") return Ptr(new CharSplit(is_white_space, Behavior::kRemoved));
  if (type == "CharDelimiterSplit") {
    TS_ASSIGN_OR_RETURN(const char32_t delimiter, single_char(config, "delimiter", where));
    return Ptr(new CharSplit([delimiter](char32_t c) { return c == delimiter; }, Behavior::kRemoved));
  }
  if (type == "Sequence") {
    const auto it = config.find("pretokenizers");
    if (it == config.end() || !it->is_array())
      return Status::invalid_input(where + ": field 'pretokenizers' must be an array");
    std::vector<Ptr> parts;
    for (const auto& part : *it) {
      TS_ASSIGN_OR_RETURN(Ptr pre_tokenizer, make_pre_tokenizer(part));
      if (pre_tokenizer == nullptr) return Status::invalid_input(where + ": a member is null");
      parts.push_back(std::move(pre_tokenizer));
    }
    return Ptr(new Sequence(std::move(parts)));
  }
  return Status::unsupported("pre_tokenizer '" + type + "' is not supported by tessera");
}

}  // namespace tessera::tok
