// Normalizer implementations (see normalizer.h).
#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>
#include <vector>

#include "tokenizer/json_util.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode_text.h"

namespace tessera::tok {

namespace {

class UnicodeForm final : public Normalizer {
 public:
  explicit UnicodeForm(NormalForm form) : form_(form) {}
  Status normalize(std::string& text) const override {
    if (is_ascii(text)) return {};
    TS_ASSIGN_OR_RETURN(text, normalize_form(text, form_));
    return {};
  }

 private:
  const NormalForm form_;
};

class Lowercase final : public Normalizer {
 public:
  Status normalize(std::string& text) const override {
    text = lowercase(text);
    return {};
  }
};

// Replaces every match of a literal or regex pattern with `content`.
class Replace final : public Normalizer {
 public:
  Replace(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  Status normalize(std::string& text) const override {
    std::string out;
    size_t last = 0;
    bool matched = false;
    pattern_.find_all(text, [&](size_t s, size_t e) {
      out.append(text, last, s - last);
      out += content_;
      last = e;
      matched = true;
    });
    if (!matched) return {};
    out.append(text, last, std::string::npos);
    text = std::move(out);
    return {};
  }

 private:
  const Regex pattern_;
  const std::string content_;
};

class Prepend final : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  Status normalize(std::string& text) const override {
    if (!text.empty()) text = prefix_ + text;
    return {};
  }

 private:
  const std::string prefix_;
};

// Strips Unicode white space on the left and/or right.
class Strip final : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  Status normalize(std::string& text) const override {
    size_t begin = 0, end = text.size();
    if (left_) {
      while (begin < end) {
        size_t next = begin;
        if (!is_white_space(next_code_point(text, next))) break;
        begin = next;
      }
    }
    if (right_) {
      while (end > begin) {
        size_t prev = end;
        if (!is_white_space(previous_code_point(text, prev))) break;
        end = prev;
      }
    }
    text = text.substr(begin, end - begin);
    return {};
  }

 private:
  const bool left_, right_;
};

class Sequence final : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> parts) : parts_(std::move(parts)) {}
  Status normalize(std::string& text) const override {
    for (const auto& part : parts_) TS_RETURN_IF_ERROR(part->normalize(text));
    return {};
  }

 private:
  const std::vector<std::unique_ptr<Normalizer>> parts_;
};

}  // namespace

Result<std::unique_ptr<Normalizer>> make_normalizer(const nlohmann::json& config) {
  if (config.is_null()) return std::unique_ptr<Normalizer>();
  TS_ASSIGN_OR_RETURN(const std::string type, get_type(config, "normalizer"));
  const std::string where = "normalizer " + type;
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeForm(NormalForm::kNFC));
  if (type == "NFD") return std::unique_ptr<Normalizer>(new UnicodeForm(NormalForm::kNFD));
  if (type == "NFKC") return std::unique_ptr<Normalizer>(new UnicodeForm(NormalForm::kNFKC));
  if (type == "NFKD") return std::unique_ptr<Normalizer>(new UnicodeForm(NormalForm::kNFKD));
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new Lowercase());
  if (type == "Replace") {
    bool is_regex = false;
    TS_ASSIGN_OR_RETURN(const std::string pattern, get_pattern(config, where, is_regex));
    TS_ASSIGN_OR_RETURN(std::string content, get_string(config, "content", where));
    TS_ASSIGN_OR_RETURN(Regex regex, is_regex ? Regex::compile(pattern, where) : Regex::literal(pattern, where));
    return std::unique_ptr<Normalizer>(new Replace(std::move(regex), std::move(content)));
  }
  if (type == "Prepend") {
    TS_ASSIGN_OR_RETURN(std::string prefix, get_string(config, "prepend", where));
    return std::unique_ptr<Normalizer>(new Prepend(std::move(prefix)));
  }
  if (type == "Strip") {
    TS_ASSIGN_OR_RETURN(const bool left, get_bool(config, "strip_left", where, true));
    TS_ASSIGN_OR_RETURN(const bool right, get_bool(config, "strip_right", where, true));
    return std::unique_ptr<Normalizer>(new Strip(left, right));
  }
  if (type == "Sequence") {
    const auto it = config.find("normalizers");
    if (it == config.end() || !it->is_array())
      return Status::invalid_input(where + ": field 'normalizers' must be an array");
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& part : *it) {
      TS_ASSIGN_OR_RETURN(auto normalizer, make_normalizer(part));
      if (normalizer == nullptr) return Status::invalid_input(where + ": a member is null");
      parts.push_back(std::move(normalizer));
    }
    return std::unique_ptr<Normalizer>(new Sequence(std::move(parts)));
  }
  return Status::unsupported("normalizer '" + type + "' is not supported by tessera");
}

}  // namespace tessera::tok
