// Forward: runs the decoder layers [begin, end) of a Model for one sequence —
// the one piece of model math, used alike by a single process, a pipeline stage
// and (later) a tensor-parallel rank.
//
//   entry (begin == 0):  token ids -> embedding -> layers
//   middle:              hidden states [tokens, hidden] -> layers -> hidden states
//   exit (end == L):     ... -> final norm -> LM head -> f32 logits
//
// Handing the hidden states of [0, k) to [k, L) gives bitwise the same logits as
// running [0, L) at once. Not thread-safe: one Forward per inference thread.
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

 private:
  Status check_room(int64_t tokens, const KvCache& cache) const;
  std::vector<float> run_layers(int64_t tokens, KvCache& cache, Logits logits);
  void run_layer(size_t index, int64_t tokens, KvCache& cache);

  const Model& model_;
  Device& device_;
  std::vector<float> inv_freq_;
  // Scratch, resized per call: x is the residual stream [tokens, hidden].
  std::vector<float> x_, norm_, q_, k_, v_, attn_, proj_, gate_, up_;
};

}  // namespace tessera
