// A Hugging Face tokenizer as llama.cpp's converter writes it into a GGUF. The
// steps restate convert_hf_to_gguf.py's get_vocab_base (token list and types)
// and gguf-py's SpecialVocab (merges, special ids, add flags, chat template),
// reading tokenizer.json directly where the converter asks transformers'
// AutoTokenizer (its vocab and added tokens are tokenizer.json's).
#include "io/gguf_hf_vocab.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

namespace tessera {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5;  // gguf-py's TokenType

Result<json> read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::not_found(path.string() + ": cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  json j = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::invalid_input(path.string() + ": not a JSON object");
  return j;
}

// convert_hf_to_gguf.py's does_token_look_special.
bool looks_special(const std::string& t) {
  const auto wrapped = [&](std::string_view open, std::string_view close) {
    return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

// The pre-tokenizers we name, as tokenizer.json writes them: a lone ByteLevel that
// splits with its own regex (GPT-2's), or a Split by one of these regexes before a
// ByteLevel that does not. Each name's regex in llama.cpp (llama-vocab.cpp) is the
// same split, written without (?i:...), and llama3's ignores merges as its
// tokenizer.json says.
struct PreForm {
  const char* name;    // tokenizer.ggml.pre
  const char* regex;   // the Split's, "" for the lone ByteLevel
  bool ignore_merges;  // what llama.cpp assumes for the name
};
constexpr PreForm kPreForms[] = {
    {"gpt-2", "", false},
    {"llama-bpe",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
     "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+",
     true},
    {"qwen2",
     "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+",
     false},
};

// The regex of tokenizer.json's pre-tokenizer in one of the forms above ("" for the
// lone ByteLevel), or nullopt.
std::optional<std::string> pre_regex(const json& pre) {
  const auto byte_level = [](const json& p, bool regex) {
    return p.is_object() && p.value("type", "") == "ByteLevel" && p.value("use_regex", true) == regex &&
           !p.value("add_prefix_space", false);
  };
  if (byte_level(pre, true)) return std::string();
  if (!pre.is_object() || pre.value("type", "") != "Sequence") return std::nullopt;
  const json& parts = pre.value("pretokenizers", json::array());
  if (!parts.is_array() || parts.size() != 2 || !byte_level(parts[1], false)) return std::nullopt;
  const json& split = parts[0];
  if (!split.is_object() || split.value("type", "") != "Split" || split.value("behavior", "") != "Isolated" ||
      split.value("invert", true) || !split.contains("pattern") || !split["pattern"].is_object() ||
      !split["pattern"].contains("Regex") || !split["pattern"]["Regex"].is_string())
    return std::nullopt;
  return split["pattern"]["Regex"].get<std::string>();
}

Result<std::string> pre_tokenizer_name(const json& tokenizer, const std::string& file) {
  const json& pre = tokenizer.value("pre_tokenizer", json());
  const bool ignore_merges = tokenizer["model"].value("ignore_merges", false);
  if (const auto regex = pre_regex(pre)) {
    for (const PreForm& form : kPreForms)
      if (*regex == form.regex) {
        if (ignore_merges != form.ignore_merges)
          return Status::unsupported(file + ": ignore_merges " + (ignore_merges ? "true" : "false") +
                                     " with the pre-tokenizer of '" + form.name + "', which llama.cpp runs with " +
                                     (form.ignore_merges ? "true" : "false"));
        return std::string(form.name);
      }
  }
  return Status::unsupported(file + ": pre_tokenizer " + pre.dump().substr(0, 200) +
                             " is not one tessera can name for llama.cpp (supported: GPT-2's, llama3's, qwen2's)");
}

// SpecialVocab: the content of tokenizer_config's `<type>_token` (a string or {"content": ...}).
std::optional<std::string> config_token(const json& config, const std::string& type) {
  const json& entry = config.value(type + "_token", json());
  if (entry.is_string()) return entry.get<std::string>();
  if (entry.is_object() && entry.contains("content") && entry["content"].is_string())
    return entry["content"].get<std::string>();
  return std::nullopt;
}

class SpecialIds {
 public:
  void set(const std::string& type, const json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) return;
    for (const auto& [t, v] : ids_)
      if (t == type) return;  // the first found wins
    ids_.emplace_back(type, id.get<int64_t>());
  }
  void set_add(const std::string& type, bool value) {
    for (auto& [t, v] : add_)
      if (t == type) {
        v = value;
        return;
      }
    add_.emplace_back(type, value);
  }
  std::vector<std::pair<std::string, int64_t>> ids_;
  std::vector<std::pair<std::string, bool>> add_;
};

}  // namespace

Result<HfGgufVocab> read_hf_gguf_vocab(const std::string& dir, int64_t vocab_size) {
  const fs::path root(dir);
  const std::string file = (root / "tokenizer.json").string();
  if (!fs::is_regular_file(root / "tokenizer.json"))
    return Status::not_found(
        dir + " has no tokenizer.json" +
        (fs::exists(root / "tokenizer.model") ? " (a SentencePiece tokenizer.model alone is not converted)" : ""));
  TS_ASSIGN_OR_RETURN(const json tokenizer, read_json(file));
  const json& model = tokenizer.value("model", json::object());
  if (model.value("type", "") != "BPE" || !model.contains("vocab") || !model["vocab"].is_object())
    return Status::unsupported(file + ": model type '" + model.value("type", "") +
                               "' is not converted (supported: BPE)");
  if (model.value("byte_fallback", false))
    return Status::unsupported(file + ": a BPE with byte_fallback (SentencePiece style) is not converted");
  // llama.cpp applies no normalizer. NFC (Qwen's) changes only text that is not in
  // NFC already, so it is written as llama.cpp's converter writes it: dropped. An
  // empty Sequence (DeepSeek V3's) does nothing.
  if (const json& n = tokenizer.value("normalizer", json());
      !n.is_null() && n != json{{"type", "NFC"}} && n != json{{"type", "Sequence"}, {"normalizers", json::array()}})
    return Status::unsupported(file + ": the normalizer " + n.dump().substr(0, 200) + " is not converted");
  HfGgufVocab v;
  TS_ASSIGN_OR_RETURN(v.pre, pre_tokenizer_name(tokenizer, file));

  // get_vocab_base: ids from the vocab and the added tokens; gaps are "[PAD<i>]".
  std::vector<std::optional<std::string>> reverse(static_cast<size_t>(vocab_size));
  const auto place = [&](const std::string& token, const json& id) -> Status {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= vocab_size)
      return Status::invalid_input(file + ": token '" + token + "' has id " + id.dump() +
                                   ", outside the config's vocab_size " + std::to_string(vocab_size));
    reverse[id.get<size_t>()] = token;
    return {};
  };
  for (const auto& [token, id] : model["vocab"].items()) TS_RETURN_IF_ERROR(place(token, id));
  std::map<int64_t, const json*> added;
  const json& added_tokens = tokenizer.value("added_tokens", json::array());
  if (!added_tokens.is_array()) return Status::invalid_input(file + ": added_tokens is not an array");
  for (const json& a : added_tokens) {
    if (!a.is_object() || !a.contains("content") || !a["content"].is_string())
      return Status::invalid_input(file + ": an added token without a string content");
    TS_RETURN_IF_ERROR(place(a["content"].get<std::string>(), a.value("id", json())));
    added[a["id"].get<int64_t>()] = &a;
  }
  for (int64_t i = 0; i < vocab_size; ++i) {
    const auto& token = reverse[static_cast<size_t>(i)];
    if (!token) {
      v.tokens.push_back("[PAD" + std::to_string(i) + "]");
      v.token_types.push_back(kUnused);
    } else if (const auto it = added.find(i); it != added.end()) {
      // The converter round-trips a non-normalized added token through the
      // tokenizer; a byte-level BPE gives an added token back as it is.
      if (it->second->value("special", false) || looks_special(*token)) {
        v.tokens.push_back(*token);
        v.token_types.push_back(kControl);
      } else {
        std::string text = *token;
        for (size_t at; (at = text.find("\xE2\x96\x81")) != std::string::npos;) text.replace(at, 3, " ");
        v.tokens.push_back(text);
        v.token_types.push_back(kUserDefined);
      }
    } else {
      v.tokens.push_back(*token);
      v.token_types.push_back(kNormal);
    }
  }

  // SpecialVocab: merges as "a b" (a space inside a part written as U+0120).
  const json& merges = model.value("merges", json::array());
  for (const json& m : merges) {
    if (m.is_string()) {
      v.merges.push_back(m.get<std::string>());
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      std::string joined;
      for (int part = 0; part < 2; ++part) {
        if (part) joined += ' ';
        for (char c : m[part].get<std::string>()) joined += c == ' ' ? std::string("\xC4\xA0") : std::string(1, c);
      }
      v.merges.push_back(joined);
    } else {
      return Status::invalid_input(file + ": a merge that is neither \"a b\" nor [\"a\", \"b\"]");
    }
  }

  json config = json::object();
  if (fs::is_regular_file(root / "tokenizer_config.json")) {
    TS_ASSIGN_OR_RETURN(config, read_json(root / "tokenizer_config.json"));
  }
  const bool has_config = !config.empty();  // SpecialVocab reads no ids or template from an empty one
  std::vector<std::string> types = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  SpecialIds special;
  // The post-processor's template: a leading special token is the BOS to add, a trailing one the EOS.
  const json& post = tokenizer.value("post_processor", json());
  if (post.is_object()) {
    const json processors = post.contains("processors") ? post["processors"] : json::array({post});
    for (const json& p : processors) {
      if (!p.is_object() || p.value("type", "") != "TemplateProcessing") continue;
      const json& single = p.value("single", json::array());
      if (!single.is_array() || single.size() < 2) continue;
      const auto special_id = [](const json& piece) {
        return piece.is_object() && piece.contains("SpecialToken") ? piece["SpecialToken"].value("id", "")
                                                                   : std::string();
      };
      const std::string first = special_id(single.front()), last = special_id(single.back());
      if (!first.empty()) {
        const auto is_bos = [&] {
          return first == config_token(config, "bos") || first == config_token(config, "cls");
        };
        if (has_config && !is_bos()) {
          if (!config_token(config, "bos")) config["bos_token"] = first;
          if (!config_token(config, "cls")) config["cls_token"] = first;
        }
        special.set_add("bos", !has_config || is_bos());
      }
      if (!last.empty()) {
        // A trailing token other than the EOS becomes the EOS; the EOS named before is the EOT.
        const auto eos = config_token(config, "eos");
        if (has_config && eos != last) {
          if (std::find(types.begin(), types.end(), "eot") == types.end()) {
            types.push_back("eot");
            config["eot_token"] = eos ? json(*eos) : json();
          }
          config["eos_token"] = last;
        }
        special.set_add("eos", true);
      }
      // The pair template without those: "A [sep] [eos] B" says whether a separator is added.
      json pair = p.value("pair", json::array());
      if (!pair.is_array() || pair.empty()) continue;
      if (!first.empty() && special_id(pair.front()) == first) pair.erase(pair.begin());
      if (!last.empty() && !pair.empty() && special_id(pair.back()) == last) pair.erase(pair.end() - 1);
      const auto sequence_id = [](const json& piece) {
        return piece.is_object() && piece.contains("Sequence") ? piece["Sequence"].value("id", "") : std::string();
      };
      if (pair.size() < 3 || sequence_id(pair.front()) != "A" || sequence_id(pair.back()) != "B") continue;
      const auto separates = [&](const json& piece) {
        const std::string id = special_id(piece);
        return !id.empty() && (id == config_token(config, "sep") || id == config_token(config, "eos"));
      };
      bool add_sep = separates(pair[1]) && last.empty();
      if (pair.size() == 4 && separates(pair[2])) add_sep = true;
      special.set_add("sep", add_sep);
      if (add_sep && !config_token(config, "sep") && config_token(config, "eos"))
        config["sep_token"] = *config_token(config, "eos");
    }
  }
  // SpecialVocab reads the template (tokenizer_config's, else chat_template.jinja) only with a config.
  if (has_config) {
    json chat = config.contains("chat_template") ? config["chat_template"] : json();
    if (!config.contains("chat_template") && fs::is_regular_file(root / "chat_template.jinja")) {
      std::ifstream in(root / "chat_template.jinja", std::ios::binary);
      std::stringstream text;
      text << in.rdbuf();
      chat = text.str();
    }
    if (chat.is_string()) {
      v.chat_template = chat.get<std::string>();
    } else if (!chat.is_null()) {
      return Status::unsupported((root / "tokenizer_config.json").string() +
                                 ": a chat_template that is not one string is not converted");
    }
  }
  for (const std::string& type : has_config ? types : std::vector<std::string>()) {
    if (const json& add = config.value("add_" + type + "_token", json()); add.is_boolean())
      special.set_add(type, add.get<bool>());
    const auto content = config_token(config, type);
    if (!content) continue;
    for (const json& a : added_tokens)
      if (a["content"] == *content) {
        special.set(type, a.value("id", json()));
        break;
      }
  }
  if (fs::is_regular_file(root / "config.json")) {
    TS_ASSIGN_OR_RETURN(const json hf_config, read_json(root / "config.json"));
    for (const std::string& type : types) special.set(type, hf_config.value(type + "_token_id", json()));
  }
  for (const auto& [type, id] : special.ids_) {
    if (id >= vocab_size)
      return Status::invalid_input(dir + ": the " + type + " token id " + std::to_string(id) +
                                   " is outside the vocab_size " + std::to_string(vocab_size));
    v.special_ids.emplace_back(type, static_cast<uint32_t>(id));
  }
  v.add_special = special.add_;
  return v;
}

void write_hf_gguf_vocab(const HfGgufVocab& v, GgufWriter& w) {
  w.set_string("tokenizer.ggml.model", v.model);
  w.set_string("tokenizer.ggml.pre", v.pre);
  w.set_string_array("tokenizer.ggml.tokens", v.tokens);
  w.set_i32_array("tokenizer.ggml.token_type", v.token_types);
  if (!v.merges.empty()) w.set_string_array("tokenizer.ggml.merges", v.merges);
  // gguf-py's GGUFWriter has keys for these (SpecialVocab skips the others, a cls id and add_unk too).
  static const std::map<std::string, std::string> kIdKeys = {
      {"bos", "bos_token_id"},       {"eos", "eos_token_id"},   {"unk", "unknown_token_id"},
      {"sep", "seperator_token_id"},  // gguf-py's spelling of the key
      {"pad", "padding_token_id"},   {"mask", "mask_token_id"}, {"eot", "eot_token_id"}};
  for (const auto& [type, id] : v.special_ids)
    if (const auto key = kIdKeys.find(type); key != kIdKeys.end()) w.set_u32("tokenizer.ggml." + key->second, id);
  for (const auto& [type, add] : v.add_special)
    if (type == "bos" || type == "eos" || type == "sep") w.set_bool("tokenizer.ggml.add_" + type + "_token", add);
  if (v.chat_template) w.set_string("tokenizer.chat_template", *v.chat_template);
}

}  // namespace tessera
