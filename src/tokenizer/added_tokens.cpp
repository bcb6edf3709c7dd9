// AddedTokens (see added_tokens.h); find_matches follows HF's AddedVocabulary.
#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/unicode_text.h"

namespace tessera::tok {

AddedTokens::Trie::Trie() : nodes_(1) {}

uint32_t AddedTokens::Trie::child(uint32_t node, uint8_t byte) const {
  if (node == 0) return root_[byte];
  const auto& children = nodes_[node].children;
  const auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(byte, uint32_t{0}));
  return it != children.end() && it->first == byte ? it->second : 0;
}

void AddedTokens::Trie::insert(std::string_view key, int32_t value) {
  uint32_t node = 0;
  for (const char ch : key) {
    const auto byte = static_cast<uint8_t>(ch);
    uint32_t next = child(node, byte);
    if (next == 0) {
      next = static_cast<uint32_t>(nodes_.size());
      nodes_.emplace_back();
      if (node == 0) {
        root_[byte] = next;
      } else {
        auto& children = nodes_[node].children;
        children.insert(std::lower_bound(children.begin(), children.end(), std::make_pair(byte, uint32_t{0})),
                        {byte, next});
      }
    }
    node = next;
  }
  if (nodes_[node].value < 0) nodes_[node].value = value;  // the first of equal contents wins
}

std::pair<size_t, int32_t> AddedTokens::Trie::longest_at(std::string_view text, size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<uint8_t>(text[i]));
    if (node == 0) break;
    if (nodes_[node].value >= 0) best = {i + 1 - pos, nodes_[node].value};
  }
  return best;
}

Result<AddedTokens> AddedTokens::from_json(const nlohmann::json& list, const Normalizer* normalizer,
                                           const std::function<std::optional<int32_t>(std::string_view)>& model_lookup,
                                           size_t model_vocab_size) {
  AddedTokens added;
  if (list.is_null()) return added;
  if (!list.is_array()) return Status::invalid_input("added_tokens must be an array");
  std::unordered_map<std::string, size_t> by_content;
  int64_t max_id = -1;
  for (size_t n = 0; n < list.size(); ++n) {
    const nlohmann::json& entry = list[n];
    const std::string where = "added_tokens[" + std::to_string(n) + "]";
    AddedToken token;
    TS_ASSIGN_OR_RETURN(token.content, get_string(entry, "content", where));
    TS_ASSIGN_OR_RETURN(const int64_t file_id, get_int(entry, "id", where));
    if (file_id < 0 || file_id > INT32_MAX - 1)
      return Status::invalid_input(where + ": id " + std::to_string(file_id) + " is out of range");
    TS_ASSIGN_OR_RETURN(token.single_word, get_bool(entry, "single_word", where, false));
    TS_ASSIGN_OR_RETURN(token.lstrip, get_bool(entry, "lstrip", where, false));
    TS_ASSIGN_OR_RETURN(token.rstrip, get_bool(entry, "rstrip", where, false));
    TS_ASSIGN_OR_RETURN(token.special, get_bool(entry, "special", where, false));
    TS_ASSIGN_OR_RETURN(token.normalized, get_bool(entry, "normalized", where, !token.special));
    if (token.content.empty()) continue;  // HF ignores empty added tokens
    if (const auto it = by_content.find(token.content); it != by_content.end()) {
      token.id = added.tokens_[it->second].id;
      added.tokens_[it->second] = std::move(token);
      continue;
    }
    if (const auto in_vocab = model_lookup(token.content)) {
      token.id = *in_vocab;
    } else {
      const auto vocab_size = static_cast<int64_t>(model_vocab_size);
      const int64_t id = max_id < 0 ? vocab_size : (max_id >= vocab_size || vocab_size == 0 ? max_id + 1 : vocab_size);
      if (id > INT32_MAX - 1) return Status::invalid_input(where + ": too many added tokens");
      token.id = static_cast<int32_t>(id);
    }
    max_id = std::max<int64_t>(max_id, token.id);
    by_content[token.content] = added.tokens_.size();
    added.by_id_[token.id] = added.tokens_.size();
    added.tokens_.push_back(std::move(token));
  }
  // HF matches special tokens before the others when contents tie; insert them first.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < added.tokens_.size(); ++i) {
      const AddedToken& token = added.tokens_[i];
      if (token.special != (pass == 0)) continue;
      if (!token.normalized) {
        added.raw_.insert(token.content, static_cast<int32_t>(i));
        continue;
      }
      std::string pattern = token.content;
      if (normalizer != nullptr) TS_RETURN_IF_ERROR(normalizer->normalize(pattern));
      if (!pattern.empty()) added.normalized_.insert(pattern, static_cast<int32_t>(i));
    }
  }
  return added;
}

const AddedToken* AddedTokens::find(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

void AddedTokens::split(std::string_view text, bool normalized_tokens, bool parse_special,
                        std::vector<Segment>& out) const {
  out.clear();
  if (text.empty()) return;
  const Trie& trie = normalized_tokens ? normalized_ : raw_;
  size_t start_offset = 0;
  if (!trie.empty()) {
    size_t pos = 0;
    while (pos < text.size()) {
      if (!trie.may_start(static_cast<uint8_t>(text[pos]))) {
        ++pos;
        continue;
      }
      const auto [length, index] = trie.longest_at(text, pos);
      if (length == 0) {
        ++pos;
        continue;
      }
      size_t start = pos, stop = pos + length;
      pos = stop;  // non-overlapping matches, as Aho-Corasick's find_iter gives them
      const AddedToken& token = tokens_[index];
      if (token.special && !parse_special) continue;
      if (token.single_word) {
        size_t before = start, after = stop;
        const bool start_space = start == 0 || !is_word_char(previous_code_point(text, before));
        const bool stop_space = stop == text.size() || !is_word_char(next_code_point(text, after));
        if (!start_space || !stop_space) continue;
      }
      if (token.lstrip) {
        size_t new_start = start;
        while (new_start > 0) {
          size_t prev = new_start;
          if (!is_white_space(previous_code_point(text, prev))) break;
          new_start = prev;
        }
        start = std::max(new_start, start_offset);
      }
      if (token.rstrip) {
        while (stop < text.size()) {
          size_t next = stop;
          if (!is_white_space(next_code_point(text, next))) break;
          stop = next;
        }
      }
      if (start_offset < start) out.push_back({start_offset, start, -1});
      out.push_back({start, stop, token.id});
      start_offset = stop;
    }
  }
  if (start_offset != text.size()) out.push_back({start_offset, text.size(), -1});
}

}  // namespace tessera::tok
