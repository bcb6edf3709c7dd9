// Decoder implementations (see decoder.h).
#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_text.h"

namespace tessera::tok {

namespace {

// Appends `bytes` as UTF-8, replacing each maximal invalid subsequence by U+FFFD
// (Rust's String::from_utf8_lossy).
void append_lossy(std::string& out, std::string_view bytes) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t i = 0;
  while (i < bytes.size()) {
    const uint8_t b = p[i];
    if (b < 0x80) {
      out += static_cast<char>(b);
      ++i;
      continue;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF;
    if (b >= 0xC2 && b <= 0xDF) {
      need = 1;
    } else if (b >= 0xE0 && b <= 0xEF) {
      need = 2;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      need = 3;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
      continue;
    }
    size_t k = 1;
    for (; k <= need && i + k < bytes.size(); ++k) {
      const uint8_t c = p[i + k];
      if (k == 1 ? (c < lo || c > hi) : (c < 0x80 || c > 0xBF)) break;
    }
    if (k == need + 1) {
      out.append(bytes.substr(i, need + 1));
      i += need + 1;
    } else {
      out += "\xEF\xBF\xBD";
      i += k;  // the valid prefix is replaced as one
    }
  }
}

class ByteLevel final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      const size_t mark = bytes.size();
      bool all = true;
      for (size_t i = 0; i < token.size();) {
        const int b = byte_level_byte(next_code_point(token, i));
        if (b < 0) {
          all = false;
          break;
        }
        bytes += static_cast<char>(b);
      }
      if (!all) {  // a token outside the byte alphabet passes through as its own bytes
        bytes.resize(mark);
        bytes += token;
      }
    }
    std::string text;
    append_lossy(text, bytes);
    tokens.assign(1, std::move(text));
  }
};

class Metaspace final : public Decoder {
 public:
  Metaspace(char32_t replacement, bool prepend) : replacement_(replacement), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t t = 0; t < tokens.size(); ++t) {
      std::string out;
      for (size_t i = 0; i < tokens[t].size();) {
        const size_t start = i;
        const char32_t c = next_code_point(tokens[t], i);
        if (c != replacement_) {
          out.append(tokens[t], start, i - start);
        } else if (!(t == 0 && prepend_)) {
          out += ' ';
        }
      }
      tokens[t] = std::move(out);
    }
  }

 private:
  const char32_t replacement_;
  const bool prepend_;
};

class ByteFallback final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t i = 0; i < pending.size(); ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (std::string& token : tokens) {
      int byte = -1;
      if (token.size() == 6 && token.compare(0, 3, "<0x") == 0 && token[5] == '>') byte = parse_hex(token[3], token[4]);
      if (byte >= 0) {
        pending += static_cast<char>(byte);
        continue;
      }
      flush();
      out.push_back(std::move(token));
    }
    flush();
    tokens = std::move(out);
  }

 private:
  static int parse_hex(char hi, char lo) {
    auto digit = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int h = digit(hi), l = digit(lo);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
  }
};

class Fuse final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string joined;
    for (const auto& token : tokens) joined += token;
    tokens.assign(1, std::move(joined));
  }
};

// Removes up to `start` leading and `stop` trailing copies of one character from each token.
class Strip final : public Decoder {
 public:
  Strip(char32_t content, size_t start, size_t stop) : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, code point)
      for (size_t i = 0; i < token.size();) {
        const size_t at = i;
        chars.emplace_back(at, next_code_point(token, i));
      }
      size_t start_cut = 0;
      for (size_t i = 0; i < start_ && i < chars.size() && chars[i].second == content_; ++i) start_cut = i + 1;
      size_t stop_cut = chars.size();
      for (size_t i = 0; i < stop_ && i < chars.size(); ++i) {
        const size_t index = chars.size() - i - 1;
        if (chars[index].second != content_) break;
        stop_cut = index;
      }
      if (stop_cut < start_cut) stop_cut = start_cut;
      const size_t begin = start_cut < chars.size() ? chars[start_cut].first : token.size();
      const size_t end = stop_cut < chars.size() ? chars[stop_cut].first : token.size();
      token = token.substr(begin, end - begin);
    }
  }

 private:
  const char32_t content_;
  const size_t start_, stop_;
};

class Replace final : public Decoder {
 public:
  Replace(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      std::string out;
      size_t last = 0;
      pattern_.find_all(token, [&](size_t s, size_t e) {
        out.append(token, last, s - last);
        out += content_;
        last = e;
      });
      out.append(token, last, std::string::npos);
      token = std::move(out);
    }
  }

 private:
  const Regex pattern_;
  const std::string content_;
};

class Sequence final : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& part : parts_) part->decode_chain(tokens);
  }

 private:
  const std::vector<std::unique_ptr<Decoder>> parts_;
};

Result<char32_t> one_char(const std::string& text, const std::string& where, const char* key) {
  size_t i = 0;
  if (text.empty()) return Status::invalid_input(where + ": field '" + key + "' is empty");
  const char32_t c = next_code_point(text, i);
  if (i != text.size()) return Status::invalid_input(where + ": field '" + key + "' must be a single character");
  return c;
}

}  // namespace

Result<std::unique_ptr<Decoder>> make_decoder(const nlohmann::json& config) {
  using Ptr = std::unique_ptr<Decoder>;
  if (config.is_null()) return Ptr();
  TS_ASSIGN_OR_RETURN(const std::string type, get_type(config, "decoder"));
  const std::string where = "decoder " + type;
  if (type == "ByteLevel") return Ptr(new ByteLevel());
  if (type == "ByteFallback") return Ptr(new ByteFallback());
  if (type == "Fuse") return Ptr(new Fuse());
  if (type == "Metaspace") {
    TS_ASSIGN_OR_RETURN(const std::string replacement, get_string(config, "replacement", where));
    TS_ASSIGN_OR_RETURN(const char32_t c, one_char(replacement, where, "replacement"));
    bool prepend = true;
    const auto scheme = config.find("prepend_scheme");
    if (scheme != config.end() && scheme->is_string()) {
      prepend = scheme->get<std::string>() != "never";
    } else {
      TS_ASSIGN_OR_RETURN(prepend, get_bool(config, "add_prefix_space", where, true));
    }
    return Ptr(new Metaspace(c, prepend));
  }
  if (type == "Strip") {
    TS_ASSIGN_OR_RETURN(const std::string content, get_string(config, "content", where));
    TS_ASSIGN_OR_RETURN(const char32_t c, one_char(content, where, "content"));
    TS_ASSIGN_OR_RETURN(const int64_t start, get_int(config, "start", where));
    TS_ASSIGN_OR_RETURN(const int64_t stop, get_int(config, "stop", where));
    if (start < 0 || stop < 0) return Status::invalid_input(where + ": start and stop must not be negative");
    return Ptr(new Strip(c, static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "Replace") {
    bool is_regex = false;
    TS_ASSIGN_OR_RETURN(const std::string pattern, get_pattern(config, where, is_regex));
    TS_ASSIGN_OR_RETURN(std::string content, get_string(config, "content", where));
    TS_ASSIGN_OR_RETURN(Regex regex, is_regex ? Regex::compile(pattern, where) : Regex::literal(pattern, where));
    return Ptr(new Replace(std::move(regex), std::move(content)));
  }
  if (type == "Sequence") {
    const auto it = config.find("decoders");
    if (it == config.end() || !it->is_array())
      return Status::invalid_input(where + ": field 'decoders' must be an array");
    std::vector<Ptr> parts;
    for (const auto& part : *it) {
      TS_ASSIGN_OR_RETURN(Ptr decoder, make_decoder(part));
      if (decoder == nullptr) return Status::invalid_input(where + ": a member is null");
      parts.push_back(std::move(decoder));
    }
    return Ptr(new Sequence(std::move(parts)));
  }
  return Status::unsupported("decoder '" + type + "' is not supported by tessera");
}

}  // namespace tessera::tok
