// AddedTokens: tokenizer.json's "added_tokens" (special and not) and how Hugging
// Face finds them in text before the normalizer and the model run.
//
// Tokens with normalized=false are matched in the raw text; the text between them
// is normalized, then tokens with normalized=true are matched in that normalized
// text (against their content run through the same normalizer). Matching is
// leftmost-longest over all contents at once (HF uses Aho-Corasick with
// MatchKind::LeftmostLongest; here a byte trie), then the flags apply:
// single_word drops a match touching a word character (regex \w) on either side,
// lstrip/rstrip widen it over adjacent white space. With parse_special false,
// matches of special tokens are skipped, so their text is encoded as plain text
// (HF's encode_special_tokens / split_special_tokens=True).
//
// Immutable after build; split() is safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace tessera::tok {

class Normalizer;

struct AddedToken {
  std::string content;
  int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

class AddedTokens {
 public:
  // A stretch of text [start, end): an added token's id, or -1 for ordinary text.
  struct Segment {
    size_t start, end;
    int32_t id;
  };

  // Reads the "added_tokens" array. `normalizer` (may be null) normalizes the
  // contents of normalized tokens. Ids are assigned as HF assigns them when it
  // loads the file (its "id" fields are only checked to be integers): a content
  // that is in the model's vocabulary takes that id; any other takes the next id
  // after the model's vocabulary size (`model_vocab_size` entries) and the added
  // ids so far. A repeated content keeps its first id and takes the later flags.
  static Result<AddedTokens> from_json(const nlohmann::json& list, const Normalizer* normalizer,
                                       const std::function<std::optional<int32_t>(std::string_view)>& model_lookup,
                                       size_t model_vocab_size);

  // Splits `text` into segments covering it, at matches of the raw
  // (normalized=false) or of the normalized tokens. Empty text gives no segment.
  void split(std::string_view text, bool normalized_tokens, bool parse_special, std::vector<Segment>& out) const;

  const AddedToken* find(int32_t id) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  bool empty() const { return tokens_.empty(); }

 private:
  // A byte trie of token contents with leftmost-longest search.
  class Trie {
   public:
    Trie();
    void insert(std::string_view key, int32_t value);
    // Longest key starting at text[pos], as (length, value); length 0 when none.
    std::pair<size_t, int32_t> longest_at(std::string_view text, size_t pos) const;
    bool may_start(uint8_t byte) const { return root_[byte] != 0; }
    bool empty() const { return nodes_.size() == 1; }

   private:
    struct Node {
      std::vector<std::pair<uint8_t, uint32_t>> children;  // sorted by byte
      int32_t value = -1;
    };
    uint32_t child(uint32_t node, uint8_t byte) const;
    std::vector<Node> nodes_;
    std::array<uint32_t, 256> root_{};  // children of the root, 0 = none
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int32_t, size_t> by_id_;
  Trie raw_, normalized_;  // values are indexes into tokens_
};

}  // namespace tessera::tok
