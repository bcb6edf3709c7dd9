// BpeModel and WordCache (see bpe_model.h).
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tokenizer/json_util.h"
#include "tokenizer/unicode_text.h"

namespace tessera::tok {

bool WordCache::lookup(std::string_view word, std::vector<int32_t>& out) const {
  const auto it = index_.find(word);
  if (it == index_.end()) return false;
  out.insert(out.end(), ids_.begin() + it->second.offset, ids_.begin() + it->second.offset + it->second.count);
  return true;
}

void WordCache::insert(std::string_view word, const int32_t* ids, size_t count) {
  if (index_.size() >= max_words_) {
    index_.clear();
    ids_.clear();
  }
  const auto [it, inserted] =
      index_.try_emplace(std::string(word), Entry{static_cast<uint32_t>(ids_.size()), static_cast<uint32_t>(count)});
  if (inserted) ids_.insert(ids_.end(), ids, ids + count);
}

void BpeModel::MergeMap::reserve(size_t n) {
  size_t capacity = 16;
  int bits = 4;
  while (capacity < n * 2) capacity <<= 1, ++bits;
  keys_.assign(capacity, ~uint64_t{0});
  values_.assign(capacity, MergeValue{0, -1});
  shift_ = 64 - bits;
  size_ = 0;
}

void BpeModel::MergeMap::insert(int32_t a, int32_t b, MergeValue value) {
  if ((size_ + 1) * 2 > keys_.size()) {  // grow
    std::vector<uint64_t> old_keys = std::move(keys_);
    std::vector<MergeValue> old_values = std::move(values_);
    reserve(old_keys.size());
    for (size_t i = 0; i < old_keys.size(); ++i)
      if (old_keys[i] != ~uint64_t{0})
        insert(static_cast<int32_t>(old_keys[i] >> 32), static_cast<int32_t>(old_keys[i] & 0xFFFFFFFF), old_values[i]);
  }
  const uint64_t k = key(a, b);
  const size_t mask = keys_.size() - 1;
  for (size_t i = slot(k);; i = (i + 1) & mask) {
    if (keys_[i] == k) {
      values_[i] = value;
      return;
    }
    if (keys_[i] == ~uint64_t{0}) {
      keys_[i] = k;
      values_[i] = value;
      ++size_;
      return;
    }
  }
}

const BpeModel::MergeValue* BpeModel::MergeMap::find(int32_t a, int32_t b) const {
  if (keys_.empty()) return nullptr;
  const uint64_t k = key(a, b);
  const size_t mask = keys_.size() - 1;
  for (size_t i = slot(k);; i = (i + 1) & mask) {
    if (keys_[i] == k) return &values_[i];
    if (keys_[i] == ~uint64_t{0}) return nullptr;
  }
}

Result<std::unique_ptr<BpeModel>> BpeModel::from_json(const nlohmann::json& model) {
  const std::string where = "model BPE";
  std::unique_ptr<BpeModel> bpe(new BpeModel());
  const auto dropout = model.find("dropout");
  if (dropout != model.end() && !dropout->is_null() && !(dropout->is_number() && dropout->get<double>() == 0.0))
    return Status::unsupported("model BPE with dropout is not supported by tessera (its ids are random)");

  const auto vocab = model.find("vocab");
  if (vocab == model.end() || !vocab->is_object())
    return Status::invalid_input(where + ": field 'vocab' must be an object of token: id");
  bpe->vocab_.reserve(vocab->size());
  int32_t max_id = -1;
  for (const auto& [token, id] : vocab->items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX - 1)
      return Status::invalid_input(where + ": vocab entry '" + token + "' must have an id in [0, 2^31-1)");
    if (!is_valid_utf8(token)) return Status::invalid_input(where + ": a vocab entry is not valid UTF-8");
    const auto value = static_cast<int32_t>(id.get<int64_t>());
    if (!bpe->vocab_.emplace(token, value).second)
      return Status::invalid_input(where + ": vocab entry '" + token + "' appears twice");
    max_id = std::max(max_id, value);
  }
  bpe->id_to_token_.assign(static_cast<size_t>(max_id + 1), nullptr);
  for (const auto& [token, id] : bpe->vocab_) {
    if (bpe->id_to_token_[id] != nullptr)
      return Status::invalid_input(where + ": id " + std::to_string(id) + " is given to two vocab entries");
    bpe->id_to_token_[id] = &token;
  }

  auto optional_string = [&](const char* key, std::string& out) -> Status {
    const auto it = model.find(key);
    if (it == model.end() || it->is_null()) return {};
    TS_ASSIGN_OR_RETURN(out, get_string(model, key, where));
    return {};
  };
  std::string unk_token;
  TS_RETURN_IF_ERROR(optional_string("unk_token", unk_token));
  TS_RETURN_IF_ERROR(optional_string("continuing_subword_prefix", bpe->continuing_subword_prefix_));
  TS_RETURN_IF_ERROR(optional_string("end_of_word_suffix", bpe->end_of_word_suffix_));
  TS_ASSIGN_OR_RETURN(bpe->fuse_unk_, get_bool(model, "fuse_unk", where, false));
  TS_ASSIGN_OR_RETURN(bpe->byte_fallback_, get_bool(model, "byte_fallback", where, false));
  TS_ASSIGN_OR_RETURN(bpe->ignore_merges_, get_bool(model, "ignore_merges", where, false));
  if (!unk_token.empty()) {
    const auto unk = bpe->token_to_id(unk_token);
    if (!unk) return Status::invalid_input(where + ": unk_token '" + unk_token + "' is not in the vocab");
    bpe->unk_id_ = *unk;
  }
  if (bpe->byte_fallback_) {
    bpe->byte_ids_.assign(256, -1);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      if (const auto id = bpe->token_to_id(name)) bpe->byte_ids_[b] = *id;
    }
  }
  if (bpe->continuing_subword_prefix_.empty() && bpe->end_of_word_suffix_.empty()) {
    bpe->bmp_char_ids_.assign(0x10000, -1);
    for (const auto& [token, id] : bpe->vocab_) {
      size_t i = 0;
      const char32_t c = next_code_point(token, i);
      if (i == token.size() && c < 0x10000) bpe->bmp_char_ids_[c] = id;
    }
  }

  if (bpe->continuing_subword_prefix_.empty() && bpe->end_of_word_suffix_.empty() && !bpe->ignore_merges_ &&
      bpe->token_to_id("\xE2\x96\x81")) {
    // Safe only when no entry has U+2581 after another character: then no merge crosses such a point.
    bpe->split_at_metaspace_ = true;
    for (const auto& [token, id] : bpe->vocab_) {
      for (size_t at = token.find("\xE2\x96\x81", 1); at != std::string::npos;
           at = token.find("\xE2\x96\x81", at + 1)) {
        if (at < 3 || token.compare(at - 3, 3, "\xE2\x96\x81") != 0) {
          bpe->split_at_metaspace_ = false;
          break;
        }
      }
      if (!bpe->split_at_metaspace_) break;
    }
  }

  const auto merges = model.find("merges");
  if (merges == model.end() || !merges->is_array())
    return Status::invalid_input(where + ": field 'merges' must be an array");
  bpe->merges_.reserve(merges->size());
  const size_t prefix_len = bpe->continuing_subword_prefix_.size();
  uint32_t rank = 0;
  for (const auto& merge : *merges) {
    std::string a, b;
    if (merge.is_string()) {
      const std::string& line = merge.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        return Status::invalid_input(where + ": merge " + std::to_string(rank) + " ('" + line +
                                     "') must be two tokens separated by one space");
      a = line.substr(0, space);
      b = line.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      a = merge[0].get<std::string>();
      b = merge[1].get<std::string>();
    } else {
      return Status::invalid_input(where + ": merge " + std::to_string(rank) +
                                   " must be a string \"a b\" or a pair [\"a\", \"b\"]");
    }
    const auto a_id = bpe->token_to_id(a), b_id = bpe->token_to_id(b);
    if (!a_id || !b_id)
      return Status::invalid_input(where + ": merge " + std::to_string(rank) + " uses '" + (a_id ? b : a) +
                                   "', which is not in the vocab");
    if (b.size() < prefix_len)
      return Status::invalid_input(where + ": merge " + std::to_string(rank) + " is shorter than the prefix");
    const std::string merged = a + b.substr(prefix_len);
    const auto new_id = bpe->token_to_id(merged);
    if (!new_id)
      return Status::invalid_input(where + ": merge " + std::to_string(rank) + " makes '" + merged +
                                   "', which is not in the vocab");
    bpe->merges_.insert(*a_id, *b_id, MergeValue{rank, *new_id});
    ++rank;
  }
  return bpe;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit()) return nullptr;
  return id_to_token_[id];
}

int32_t BpeModel::char_id(std::string_view ch, bool first, bool last, std::string& scratch) const {
  if (!bmp_char_ids_.empty()) {
    size_t i = 0;
    const char32_t c = next_code_point(ch, i);
    if (c < 0x10000) return bmp_char_ids_[c];
    const auto it = vocab_.find(ch);
    return it == vocab_.end() ? -1 : it->second;
  }
  scratch.clear();
  if (!first) scratch += continuing_subword_prefix_;
  scratch += ch;
  if (last) scratch += end_of_word_suffix_;
  const auto it = vocab_.find(scratch);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out, WordCache* cache) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (const auto it = vocab_.find(word); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  if (word.size() >= kMaxCachedWordBytes) {
    if (split_at_metaspace_) {
      constexpr std::string_view kMetaspace = "\xE2\x96\x81";
      size_t start = 0;
      for (size_t at = word.find(kMetaspace, 1); at != std::string_view::npos; at = word.find(kMetaspace, at + 1)) {
        if (word.substr(at - kMetaspace.size(), kMetaspace.size()) == kMetaspace) continue;  // a run of U+2581
        const std::string_view piece = word.substr(start, at - start);
        if (piece.size() >= kMaxCachedWordBytes || cache == nullptr || !cache->lookup(piece, out)) {
          const size_t first = out.size();
          merge_word(piece, out);
          if (cache != nullptr && piece.size() < kMaxCachedWordBytes)
            cache->insert(piece, out.data() + first, out.size() - first);
        }
        start = at;
      }
      word = word.substr(start);
      if (word.size() < kMaxCachedWordBytes) return tokenize(word, out, cache);
    }
    merge_word(word, out);
    return;
  }
  if (cache != nullptr && cache->lookup(word, out)) return;
  const size_t first = out.size();
  merge_word(word, out);
  if (cache != nullptr) cache->insert(word, out.data() + first, out.size() - first);
}

namespace {

struct Symbol {
  int32_t id;
  int32_t prev, next;
  uint32_t len;  // bytes of the word it covers; 0 once merged into its left neighbour
};

struct Candidate {
  uint32_t rank;
  uint32_t pos;
  int32_t new_id;
  // priority_queue pops the largest: make that the lowest rank, then the lowest position.
  bool operator<(const Candidate& other) const { return rank != other.rank ? rank > other.rank : pos > other.pos; }
};

}  // namespace

void BpeModel::merge_word(std::string_view word, std::vector<int32_t>& out) const {
  thread_local std::vector<Symbol> symbols;
  thread_local std::vector<Candidate> heap_storage;
  thread_local std::string scratch;
  symbols.clear();
  auto add = [&](int32_t id, uint32_t len) {
    const auto n = static_cast<int32_t>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, len});
  };

  // Characters to initial symbols (HF BPE::merge_word).
  int32_t pending_unk = -1;
  uint32_t pending_unk_len = 0;
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    i += utf8_length(static_cast<uint8_t>(word[i]));
    if (i > word.size()) i = word.size();
    const std::string_view ch = word.substr(start, i - start);
    const int32_t id = char_id(ch, start == 0, i == word.size(), scratch);
    if (id >= 0) {
      if (pending_unk >= 0) add(pending_unk, pending_unk_len), pending_unk = -1;
      add(id, static_cast<uint32_t>(ch.size()));
      continue;
    }
    if (byte_fallback_) {
      // HF falls back on the bytes of the character as looked up (with prefix/suffix).
      const std::string_view looked_up = bmp_char_ids_.empty() ? std::string_view(scratch) : ch;
      bool all = true;
      for (const char c : looked_up) all = all && byte_ids_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        for (const char c : looked_up) add(byte_ids_[static_cast<uint8_t>(c)], 1);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      const auto len = static_cast<uint32_t>(ch.size());
      if (pending_unk >= 0 && fuse_unk_) {
        pending_unk_len += len;
      } else {
        if (pending_unk >= 0) add(pending_unk, pending_unk_len);
        pending_unk = unk_id_;
        pending_unk_len = len;
      }
    }
    // Without an unk token HF drops the character.
  }
  if (pending_unk >= 0) add(pending_unk, pending_unk_len);

  // Merges, lowest rank first, leftmost first among equal ranks (HF Word::merge_all).
  std::vector<Candidate>& heap = heap_storage;
  heap.clear();
  auto push = [&](const Candidate& c) {
    heap.push_back(c);
    std::push_heap(heap.begin(), heap.end());
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i)
    if (const MergeValue* m = merges_.find(symbols[i].id, symbols[i + 1].id))
      heap.push_back({m->rank, static_cast<uint32_t>(i), m->new_id});
  std::make_heap(heap.begin(), heap.end());
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end());
    const Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = symbols[top.pos];
    if (left.len == 0 || left.next < 0) continue;
    const Symbol right = symbols[left.next];
    const MergeValue* m = merges_.find(left.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    symbols[left.next].len = 0;
    left.id = top.new_id;
    left.len += right.len;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = static_cast<int32_t>(top.pos);
    if (left.prev >= 0)
      if (const MergeValue* p = merges_.find(symbols[left.prev].id, left.id))
        push({p->rank, static_cast<uint32_t>(left.prev), p->new_id});
    if (left.next >= 0)
      if (const MergeValue* n = merges_.find(left.id, symbols[left.next].id)) push({n->rank, top.pos, n->new_id});
  }
  for (const Symbol& s : symbols)
    if (s.len != 0) out.push_back(s.id);
}

}  // namespace tessera::tok
