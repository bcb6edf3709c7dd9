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

  // One sequence's part of a step: its next `tokens` tokens, run in `cache`.
  struct Part {
    KvCache* cache = nullptr;
    int64_t tokens = 1;
  };
  // One pass over several sequences (continuous batching: decode steps, prompts,
  // or both): the ids, or rows of hidden, are the parts' tokens, part after part,
  // each part's at positions [cache.length(), + tokens) of its own cache (all
  // distinct). Every weight is read once for all of them. Returns, for an exit
  // range, the logits of each part's last token [parts, vocab]; else the hidden
  // states of every token [tokens, hidden]. Checks everything before any cache
  // changes, so a refused step leaves them as they were.
  Result<std::vector<float>> step_ids(std::span<const int32_t> ids, std::span<const Part> parts);
  Result<std::vector<float>> step_hidden(std::span<const float> hidden, std::span<const Part> parts);

 private:
  Status check_room(int64_t tokens, const KvCache& cache) const;
  Status check_ids(std::span<const int32_t> ids) const;
  Result<int64_t> hidden_rows(std::span<const float> hidden) const;
  Status check_parts(std::span<const Part> parts, int64_t tokens) const;
  // What run_* and step_* share: the checks, then the ids' embeddings or the
  // hidden states into the residual stream, then the layers.
  Result<std::vector<float>> embed_and_run(std::span<const int32_t> ids, std::span<const Part> parts, Logits logits);
  Result<std::vector<float>> take_and_run(std::span<const float> hidden, std::span<const Part> parts, Logits logits);
  // Logits::kLast: the last token of each part.
  std::vector<float> run_layers(std::span<const Part> parts, Logits logits);
  void run_layer(size_t index, std::span<const Part> parts, int64_t tokens);

  const Model& model_;
  Device& device_;
  std::vector<float> inv_freq_;
  // Scratch, resized per call: x is the residual stream [tokens, hidden].
  std::vector<float> x_, norm_, q_, k_, v_, attn_, proj_, gate_, up_;
};

}  // namespace tessera
