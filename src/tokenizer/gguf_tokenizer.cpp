// tokenizer.ggml.* -> tokenizer.json. The pre-tokenizer regexes are copied from
// llama.cpp's src/llama-vocab.cpp (llm_tokenizer_bpe), the SentencePiece layout
// from transformers' GGUF converter (integrations/ggml.py, GGUFLlamaConverter).
#include "tokenizer/gguf_tokenizer.h"

#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <unordered_map>

namespace tessera {

namespace {

using json = nlohmann::json;  // ordered_json finds keys by a linear search: quadratic over a vocabulary

constexpr int32_t kTokenControl = 3;
constexpr int32_t kTokenUserDefined = 4;

const char* const kGpt2Regex = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
const char* const kLlama3Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen2Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const char* const kQwen35Regex =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

struct PreKind {
  std::vector<const char*> names;  // tokenizer.ggml.pre values
  std::vector<const char*> regexes;
  bool ignore_merges = false;
};

const std::vector<PreKind>& pre_kinds() {
  static const std::vector<PreKind> kKinds = {
      {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral"}, {kLlama3Regex}, true},
      {{"dbrx", "smaug-bpe"}, {kLlama3Regex}, false},
      {{"default", "gpt-2", "phi-2", "mpt", "olmo", "jais"}, {kGpt2Regex}, false},
      {{"qwen2", "deepseek-r1-qwen", "stablelm2"}, {kQwen2Regex}, false},
      {{"qwen35"}, {kQwen35Regex}, false},
      {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone"}, {"\\p{N}", kGpt2Regex}, false},
      {{"falcon"},
       {"[\\p{P}\\$\\+<=>\\^~\\|`]+", "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
        "[0-9][0-9][0-9]"},
       false},
      {{"deepseek-coder"}, {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"}, false},
  };
  return kKinds;
}

Result<const PreKind*> find_pre(std::string_view pre) {
  for (const PreKind& kind : pre_kinds())
    for (const char* name : kind.names)
      if (pre == name) return &kind;
  return Status::unsupported("tokenizer.ggml.pre '" + std::string(pre) + "' is not supported");
}

template <typename T>
Result<T> optional_key(const GgufMetadata& m, std::string_view key, T fallback,
                       Result<T> (GgufMetadata::*get)(std::string_view) const) {
  if (!m.find(key)) return fallback;
  return (m.*get)(key);
}

// The token id under `key`, checked against the vocabulary; nullopt when absent.
Result<std::optional<uint64_t>> read_token_id(const GgufMetadata& m, const char* key, size_t token_count) {
  if (!m.find(key)) return std::optional<uint64_t>();
  TS_ASSIGN_OR_RETURN(const uint64_t id, m.get_uint(key));
  if (id >= token_count)
    return Status::invalid_input(std::string(key) + " = " + std::to_string(id) + " is not a token id below " +
                                 std::to_string(token_count));
  return std::optional<uint64_t>(id);
}

// transformers' SentencePiece merges: every split of a piece into two pieces of
// the vocabulary, ranked by the score of the piece they make (highest first).
json spm_merges(const std::vector<std::string_view>& tokens, const std::vector<float>& scores,
                const std::unordered_map<std::string_view, int32_t>& ids) {
  struct Merge {
    float score;
    int32_t piece;
    size_t split;
  };
  std::vector<Merge> merges;
  for (size_t id = 0; id < tokens.size(); ++id) {
    const std::string_view piece = tokens[id];
    for (size_t k = 1; k < piece.size(); ++k) {
      if ((static_cast<unsigned char>(piece[k]) & 0xC0) == 0x80) continue;  // not a character boundary
      if (ids.count(piece.substr(0, k)) && ids.count(piece.substr(k)))
        merges.push_back({scores[id], static_cast<int32_t>(id), k});
    }
  }
  std::stable_sort(merges.begin(), merges.end(), [](const Merge& a, const Merge& b) {
    return a.score != b.score ? a.score > b.score : a.piece < b.piece;
  });
  json out = json::array();
  for (const Merge& m : merges) {
    const std::string_view piece = tokens[static_cast<size_t>(m.piece)];
    out.push_back(json::array({std::string(piece.substr(0, m.split)), std::string(piece.substr(m.split))}));
  }
  return out;
}

json bos_template(const std::string& bos, int32_t bos_id) {
  const json special = {{"SpecialToken", {{"id", bos}, {"type_id", 0}}}};
  return {{"type", "TemplateProcessing"},
          {"single", json::array({special, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
          {"pair", json::array({special,
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                                special,
                                {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
          {"special_tokens", {{bos, {{"id", bos}, {"ids", json::array({bos_id})}, {"tokens", json::array({bos})}}}}}};
}

}  // namespace

Result<std::string> gguf_tokenizer_json(const GgufMetadata& m) {
  TS_ASSIGN_OR_RETURN(const std::string_view model, m.get_string("tokenizer.ggml.model"));
  if (model != "gpt2" && model != "llama")
    return Status::unsupported("tokenizer.ggml.model '" + std::string(model) +
                               "' is not supported (supported: gpt2, llama)");
  const bool spm = model == "llama";
  TS_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens, m.get_string_array("tokenizer.ggml.tokens"));
  if (tokens.empty() || tokens.size() > (size_t{1} << 31))
    return Status::invalid_input("tokenizer.ggml.tokens has " + std::to_string(tokens.size()) + " tokens");
  std::vector<int32_t> types(tokens.size(), 1);
  if (m.find("tokenizer.ggml.token_type")) {
    TS_ASSIGN_OR_RETURN(types, m.get_i32_array("tokenizer.ggml.token_type"));
    if (types.size() != tokens.size())
      return Status::invalid_input("tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " +
                                   std::to_string(tokens.size()) + " tokens");
  }

  json vocab = json::object();
  std::unordered_map<std::string_view, int32_t> ids;
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (!ids.emplace(tokens[id], static_cast<int32_t>(id)).second) continue;  // a later duplicate is never produced
    vocab[std::string(tokens[id])] = id;
  }
  json added = json::array();
  for (size_t id = 0; id < tokens.size(); ++id) {
    if (types[id] != kTokenControl && types[id] != kTokenUserDefined) continue;
    added.push_back({{"id", id},
                     {"content", std::string(tokens[id])},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", types[id] == kTokenControl}});
  }

  json t = {{"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added}};
  json bpe = {{"type", "BPE"},
              {"dropout", nullptr},
              {"unk_token", nullptr},
              {"fuse_unk", false},
              {"byte_fallback", false},
              {"ignore_merges", false},
              {"vocab", vocab},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr}};
  if (spm) {
    TS_ASSIGN_OR_RETURN(const std::vector<float> scores, m.get_f32_array("tokenizer.ggml.scores"));
    if (scores.size() != tokens.size())
      return Status::invalid_input("tokenizer.ggml.scores has " + std::to_string(scores.size()) + " entries for " +
                                   std::to_string(tokens.size()) + " tokens");
    TS_ASSIGN_OR_RETURN(const bool prefix,
                        optional_key<bool>(m, "tokenizer.ggml.add_space_prefix", true, &GgufMetadata::get_bool));
    TS_ASSIGN_OR_RETURN(const auto unk, read_token_id(m, "tokenizer.ggml.unknown_token_id", tokens.size()));
    bpe["merges"] = spm_merges(tokens, scores, ids);
    bpe["byte_fallback"] = true;
    bpe["fuse_unk"] = true;
    bpe["unk_token"] = std::string(tokens[unk.value_or(0)]);
    const json replace = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
    t["normalizer"] =
        prefix ? json{{"type", "Sequence"},
                      {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}}, replace})}}
               : replace;
    t["pre_tokenizer"] = nullptr;
    json decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                 {{"type", "ByteFallback"}},
                                 {{"type", "Fuse"}}});
    if (prefix) decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    t["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
  } else {
    TS_ASSIGN_OR_RETURN(const std::vector<std::string_view> merges, m.get_string_array("tokenizer.ggml.merges"));
    TS_ASSIGN_OR_RETURN(const std::string_view pre,
                        optional_key<std::string_view>(m, "tokenizer.ggml.pre", "default", &GgufMetadata::get_string));
    TS_ASSIGN_OR_RETURN(const PreKind* kind, find_pre(pre));
    bpe["merges"] = json::array();
    for (std::string_view merge : merges) bpe["merges"].push_back(std::string(merge));
    bpe["ignore_merges"] = kind->ignore_merges;
    t["normalizer"] = nullptr;
    json parts = json::array();
    for (const char* regex : kind->regexes)
      parts.push_back(
          {{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}});
    parts.push_back({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}});
    t["pre_tokenizer"] = {{"type", "Sequence"}, {"pretokenizers", parts}};
    t["decoder"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  }
  TS_ASSIGN_OR_RETURN(const bool add_bos,
                      optional_key<bool>(m, "tokenizer.ggml.add_bos_token", spm, &GgufMetadata::get_bool));
  TS_ASSIGN_OR_RETURN(const auto bos, read_token_id(m, "tokenizer.ggml.bos_token_id", tokens.size()));
  t["post_processor"] = nullptr;
  if (add_bos && bos) t["post_processor"] = bos_template(std::string(tokens[*bos]), static_cast<int32_t>(*bos));
  t["model"] = bpe;
  return t.dump();
}

Result<GgufChat> gguf_chat(const GgufMetadata& m) {
  GgufChat chat;
  if (m.find("tokenizer.chat_template")) {
    TS_ASSIGN_OR_RETURN(const std::string_view text, m.get_string("tokenizer.chat_template"));
    chat.chat_template = text;
  }
  TS_ASSIGN_OR_RETURN(const std::vector<std::string_view> tokens, m.get_string_array("tokenizer.ggml.tokens"));
  const std::pair<const char*, const char*> kSpecial[] = {{"tokenizer.ggml.bos_token_id", "bos_token"},
                                                          {"tokenizer.ggml.eos_token_id", "eos_token"}};
  for (const auto& [key, name] : kSpecial) {
    TS_ASSIGN_OR_RETURN(const auto id, read_token_id(m, key, tokens.size()));
    if (id) chat.special_tokens[name] = std::string(tokens[*id]);
  }
  for (const char* key :
       {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    TS_ASSIGN_OR_RETURN(const auto id, read_token_id(m, key, tokens.size()));
    if (id) chat.stop_ids.push_back(static_cast<int32_t>(*id));
  }
  std::sort(chat.stop_ids.begin(), chat.stop_ids.end());
  chat.stop_ids.erase(std::unique(chat.stop_ids.begin(), chat.stop_ids.end()), chat.stop_ids.end());
  return chat;
}

Result<Tokenizer> Tokenizer::from_gguf(const GgufMetadata& metadata, std::string_view name) {
  auto text = gguf_tokenizer_json(metadata);
  if (!text.ok()) return text.status().with_context(std::string(name));
  return from_json(*text, name);
}

}  // namespace tessera
