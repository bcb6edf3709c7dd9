// Forward: runs the decoder layers [begin, end) of a Model for one sequence, or
// for one step of several sequences at once — the one piece of model math, used
// alike by a single process, a pipeline stage and (later) a tensor-parallel rank.
//
//   entry (begin == 0):  token ids -> embedding -> layers
//   middle:              hidden states [tokens, hidden] -> layers -> hidden states
//   exit (end == L):     ... -> final norm -> LM head -> f32 logits
//
// Memory belongs to the device: the weights are placed on it, and the
// activations, scratch and this range's paged KV pool (kv_cache.h) are device
// buffers. Bytes cross to the host only at the edges: ids or hidden states in,
// logits or hidden states out.
//
// Handing the hidden states of [0, k) to [k, L) gives bitwise the same logits as
// running [0, L) at once; a sequence stepped in a batch gets bitwise what it gets
// alone (every row of a matmul is summed in the same order whatever the number of
// rows); a prompt run in chunks gets bitwise what it gets in one pass (each
// position's attention reads the same keys in the same order). longrope (Phi-3
// 128k) is the exception to the last: as transformers' dynamic update, a step
// whose last position passes original_max_position_embeddings rotates its new
// q and k with the long factors, while keys already cached stay rotated with the
// short ones; transformers' generate instead recomputes the whole sequence once
// at that crossing, so a sequence that crosses it during decode (or between
// prompt chunks) differs from transformers past it. Per sequence, so batching is
// still invariant. Not thread-safe:
// one Forward per inference thread.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "backend/device.h"
#include "collective/group.h"
#include "core/status.h"
#include "model/kv_cache.h"
#include "model/model.h"
#include "model/moe.h"

namespace tessera {

enum class Logits { kLast, kAll };

struct ForwardOptions {
  uint64_t kv_memory = 0;  // the KV pool's budget in bytes; 0: kv_memory_default(device)
  // f32, bf16 or f16; unset: default_kv_dtype(model), the weights' own dtype.
  std::optional<DType> kv_dtype{};
  int64_t kv_block_size = 32;
  // The tensor-parallel group this Forward's shard belongs to. Size 1 for now:
  // weights are whole and no collective runs (issue 20 shards them and sums the
  // o and down projections with group.all_sum).
  Group group = Group::local();
};

// The KV cache dtype of a Forward over `model` unless ForwardOptions says
// otherwise: the dtype its key projections are stored in. A bf16 or f16
// checkpoint keeps its keys and values in its own 16 bits, as transformers does
// (half the bytes a position, twice the positions a --kv-memory budget holds,
// half the bytes attention reads); an f32 checkpoint keeps f32. Every layer
// range of one checkpoint gets the same, so a pipeline stage and one process agree.
DType default_kv_dtype(const Model& model);

class Forward {
 public:
  Forward(const Model& model, Device& device, ForwardOptions options = {});

  // OK unless the weights or the KV pool did not fit on the device; then every
  // run returns this error.
  const Status& status() const { return status_; }
  const Model& model() const { return model_; }
  KvPool& kv_pool() const;
  // A sequence of at most `capacity` positions in this range's KV pool.
  KvCache make_cache(int64_t capacity) const { return KvCache(kv_pool(), capacity); }

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
  // states of every token [tokens, hidden]. Checks everything (including that the
  // KV pool has the blocks every part needs: kOverloaded if not) before any cache
  // changes, so a refused step leaves them as they were.
  Result<std::vector<float>> step_ids(std::span<const int32_t> ids, std::span<const Part> parts);
  Result<std::vector<float>> step_hidden(std::span<const float> hidden, std::span<const Part> parts);

 private:
  Status check_ids(std::span<const int32_t> ids) const;
  Result<int64_t> hidden_rows(std::span<const float> hidden) const;
  // Room in each cache and in the pool, then the blocks every part needs.
  Status prepare_parts(std::span<const Part> parts, int64_t tokens);
  Status prepare_scratch(int64_t tokens);
  // What run_* and step_* share: the checks, then the ids' embeddings or the
  // hidden states into the residual stream, then the layers.
  Result<std::vector<float>> embed_and_run(std::span<const int32_t> ids, std::span<const Part> parts, Logits logits);
  Result<std::vector<float>> take_and_run(std::span<const float> hidden, std::span<const Part> parts, Logits logits);
  // Logits::kLast: the last token of each part.
  Result<std::vector<float>> run_layers(std::span<const Part> parts, int64_t tokens, Logits logits);
  void run_layer(size_t index, std::span<const SeqSlice> slices, int64_t tokens);

  const Model& model_;
  Device& device_;
  Group group_;
  Status status_;
  ModelWeights weights_;       // the model's weights as placed on the device
  std::vector<Buffer> owned_;  // weights Forward made (norm_offset's norms)
  Buffer inv_freq_;            // f32 [rotary_dim / 2]
  Buffer long_inv_freq_;       // longrope's long factors; else empty
  Buffer local_inv_freq_;      // the sliding layers' (ArchSpec::sliding_rope); else empty
  std::unique_ptr<KvPool> kv_pool_;
  // Device scratch, grown as needed: x is the residual stream [tokens, hidden].
  Buffer x_, norm_, q_, k_, v_, attn_, proj_, gate_, up_, logits_;
  MoeMlp moe_;  // the experts' scratch, for a family with them
};

}  // namespace tessera
