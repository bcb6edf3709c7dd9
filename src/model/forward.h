// Forward: runs the decoder layers [begin, end) of a Model for one sequence, or
// for one step of several sequences at once — the one piece of model math, used
// alike by a single process, a pipeline stage and (later) a tensor-parallel rank.
//
//   entry (begin == 0):  token ids -> embedding -> layers
//   middle:              hidden states [tokens, hidden] -> layers -> hidden states
//   exit (end == L):     ... -> final norm -> LM head -> f32 logits
//
// Handing the hidden states of [0, k) to [k, L) gives bitwise the same logits as
// running [0, L) at once, and a sequence stepped in a batch gets bitwise what it
// gets alone (every row of a matmul is summed in the same order whatever the
// number of rows). Not thread-safe: one Forward per inference thread.
#pragma once

#include <span>
#include <vector>

#include "backend/device.h"
#include "core/status.h"
#include "model/kv_cache.h"
#include "model/model.h"

namespace tessera {

enum class Logits { kLast, kAll };

class Forward {
 public:
  Forward(const Model& model, Device& device);

  // A KV cache for this range's layers, able to hold `capacity` positions.
  KvCache make_cache(int64_t capacity) const;

  // Runs `ids` at positions [cache.length(), + ids.size()) and advances the cache.
  // Needs an entry range. Returns logits ([1 or tokens, vocab], per `logits`) for an
  // exit range, else hidden states [tokens, hidden].
  Result<std::vector<float>> run_ids(std::span<const int32_t> ids, KvCache& cache, Logits logits = Logits::kLast);
  // The same for a range that starts after layer 0: hidden states [tokens, hidden] in.
  Result<std::vector<float>> run_hidden(std::span<const float> hidden, KvCache& cache, Logits logits = Logits::kLast);

  // One step of several sequences at once (a decode step of a batch): ids[i], or
  // row i of hidden [n, hidden], is the next token of the sequence whose cache is
  // caches[i] (all distinct). Every weight is read once for all of them. Returns
  // logits [n, vocab] for an exit range, else hidden states [n, hidden]. Checks
  // everything before any cache changes, so a refused step leaves them as they were.
  Result<std::vector<float>> step_ids(std::span<const int32_t> ids, std::span<KvCache* const> caches);
  Result<std::vector<float>> step_hidden(std::span<const float> hidden, std::span<KvCache* const> caches);

 private:
  // The rows of the residual stream that belong to one sequence, in order.
  struct Segment {
    KvCache* cache;
    int64_t tokens;
  };
  Status check_room(int64_t tokens, const KvCache& cache) const;
  Status check_ids(std::span<const int32_t> ids) const;
  Result<int64_t> hidden_rows(std::span<const float> hidden) const;
  Status check_step(std::span<KvCache* const> caches, size_t rows) const;
  // Logits::kLast: the last row of each segment.
  std::vector<float> run_layers(std::span<const Segment> segments, Logits logits);
  void run_layer(size_t index, std::span<const Segment> segments, int64_t tokens);

  const Model& model_;
  Device& device_;
  std::vector<float> inv_freq_;
  // Scratch, resized per call: x is the residual stream [tokens, hidden].
  std::vector<float> x_, norm_, q_, k_, v_, attn_, proj_, gate_, up_;
};

}  // namespace tessera
