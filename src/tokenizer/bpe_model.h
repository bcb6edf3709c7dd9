// BpeModel: the "model" of tokenizer.json when its type is "BPE", covering both
// byte-level vocabularies (GPT-2, Llama 3, Qwen, DeepSeek V3, o200k) and
// SentencePiece-style ones with byte_fallback (Mistral, Gemma). Merges may be
// stored as "a b" strings or ["a", "b"] pairs; ignore_merges, unk_token, fuse_unk,
// continuing_subword_prefix and end_of_word_suffix are honoured; dropout other
// than 0 is refused (it makes ids random).
//
// A word is split into characters (or byte tokens <0xHH> with byte_fallback),
// then the adjacent pair with the lowest merge rank is merged (leftmost first)
// until none is left, exactly as HF's Word::merge_all does, using a merge-rank
// hash map and a binary heap over the symbol linked list.
//
// Immutable after from_json; tokenize() is safe from any thread. WordCache is
// not: its owner serializes access (Tokenizer holds a mutex).
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"

namespace tessera::tok {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// Remembers the ids of words already encoded. Bounded: cleared when full.
class WordCache {
 public:
  explicit WordCache(size_t max_words = 1 << 17) : max_words_(max_words) {}
  // Appends the cached ids of `word` to `out`; false when absent.
  bool lookup(std::string_view word, std::vector<int32_t>& out) const;
  void insert(std::string_view word, const int32_t* ids, size_t count);
  size_t size() const { return index_.size(); }

 private:
  struct Entry {
    uint32_t offset, count;
  };
  const size_t max_words_;
  std::unordered_map<std::string, Entry, StringHash, std::equal_to<>> index_;
  std::vector<int32_t> ids_;
};

class BpeModel {
 public:
  static Result<std::unique_ptr<BpeModel>> from_json(const nlohmann::json& model);

  // Appends the ids of one pre-tokenized word. `cache` may be null. Words of
  // kMaxCachedWordBytes or more are not cached, but when no vocabulary entry has
  // U+2581 right after another character (Mistral's), such a word (a whole
  // SentencePiece-style text) is encoded in pieces cut before each U+2581 that
  // follows another character: no merge can cross those cuts, so the ids are the
  // same and the pieces can be cached.
  void tokenize(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const;
  static constexpr size_t kMaxCachedWordBytes = 256;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The vocabulary entry for `id`, or null when the vocabulary has no such id.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocabulary.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }
  size_t vocab_size() const { return vocab_.size(); }

 private:
  struct MergeValue {
    uint32_t rank;
    int32_t new_id;
  };
  // Open-addressing hash map from a pair of ids to its merge (rank, new id).
  class MergeMap {
   public:
    void reserve(size_t n);
    void insert(int32_t a, int32_t b, MergeValue value);  // a later insert of the same pair wins
    const MergeValue* find(int32_t a, int32_t b) const;
    size_t size() const { return size_; }

   private:
    static uint64_t key(int32_t a, int32_t b) {
      return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    size_t slot(uint64_t k) const { return static_cast<size_t>((k * 0x9E3779B97F4A7C15ull) >> shift_); }
    std::vector<uint64_t> keys_;
    std::vector<MergeValue> values_;
    int shift_ = 64;
    size_t size_ = 0;
  };

  BpeModel() = default;
  void merge_word(std::string_view word, std::vector<int32_t>& out) const;
  int32_t char_id(std::string_view ch, bool first, bool last, std::string& scratch) const;

  StringIdMap vocab_;
  std::vector<const std::string*> id_to_token_;  // points into vocab_ keys
  MergeMap merges_;
  std::vector<int32_t> bmp_char_ids_;  // id of each single BMP character, -1 if none (no prefix/suffix only)
  std::vector<int32_t> byte_ids_;      // ids of <0x00>..<0xFF> when byte_fallback
  std::string continuing_subword_prefix_, end_of_word_suffix_;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  bool split_at_metaspace_ = false;  // see tokenize()
};

}  // namespace tessera::tok
