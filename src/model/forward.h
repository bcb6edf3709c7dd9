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
// still invariant.
//
// Tensor parallelism: over a Group of n > 1 ranks, each rank's Forward runs its
// Model's shard (model/shard.h: Model::load(..., Shard{rank, n})). Rank 0 leads:
// it is the Forward a scheduler drives (run_ids, step_ids; its KvCaches and
// block tables are the only ones), and each step it runs it first sends to the
// other ranks (wire/tp_step.h, a broadcast over the group), which run it by
// follow() on the same blocks of their own KV pools (holding only their heads;
// the leader tells them its pool's size when the Forwards are made). Each layer
// ends its attention and its MLP with one all_sum of the partial outputs; the
// logits are gathered once (all_gather). Sums run in rank order in f32
// (collective/group.h), so a TP run is bitwise the same on every run, sealed or
// plain, and batch-invariant as above; against one process it differs only by
// the order of the o and down projections' sums (within the fixtures'
// tolerances). A failed collective fails the step on every rank (the group
// latches failed) with the group's error; the leader's caches are then as
// before the step. A range after layer 0 (a pipeline stage that is a TP group)
// takes hidden states on the leader, which it broadcasts with the step; every
// rank's range must be the leader's (checked when the Forwards are made).
//
// Not thread-safe: one Forward per inference thread.
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

// What an exit range returns: the logits of each part's last token, of every
// token, or each part's greedy token (Forward::step_greedy).
enum class Logits { kLast, kAll, kGreedy };

struct ForwardOptions {
  uint64_t kv_memory = 0;  // the KV pool's budget in bytes; 0: kv_memory_default(device)
  // f32, bf16 or f16; unset: default_kv_dtype(model).
  std::optional<DType> kv_dtype{};
  int64_t kv_block_size = 32;
  // The tensor-parallel group this Forward's shard belongs to: its rank and size
  // must be the Model's Shard. Size 1: whole weights, no collective runs. The
  // leader's (rank 0's) KV options decide every rank's pool.
  Group group = Group::local();
};

// The KV cache dtype of a Forward over `model` unless ForwardOptions says
// otherwise: the dtype its key projections are stored in. A bf16 or f16
// checkpoint keeps its keys and values in its own 16 bits, as transformers does
// (half the bytes a position, twice the positions a --kv-memory budget holds,
// half the bytes attention reads); an f32 checkpoint keeps f32. Every layer
// range of one checkpoint gets the same, so a pipeline stage and one process agree.
// GGUF blocks name no 16-bit dtype: f16, llama.cpp's default cache, on every
// device (CUDA's attention reads 16-bit pages on tensor cores; on the CPU a long
// context's decode reads half the bytes and a prompt's attention widens each block
// once a tile: docs/benchmarks.md, session 48).
DType default_kv_dtype(const Model& model);

class Forward {
 public:
  Forward(const Model& model, Device& device, ForwardOptions options = {});

  // OK unless the weights or the KV pool did not fit on the device; then every
  // run returns this error.
  const Status& status() const { return status_; }
  const Model& model() const { return model_; }
  const Device& device() const { return device_; }
  // Bytes of the weights that the device holds as copies of its own (its matmuls' layout
  // on the CPU, its memory on a GPU), not as views of the mapped files.
  uint64_t copied_weight_bytes() const { return copied_weight_bytes_; }
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
  // step_ids for parts that each take their greedy token: the index of the
  // largest logit of each part's last token [parts] (the first on a tie, as
  // std::max_element over step_ids' row), chosen by the device (Device::argmax),
  // so that only the ids leave it instead of [parts, vocab] logits. Needs an
  // entry and an exit range.
  Result<std::vector<int32_t>> step_greedy(std::span<const int32_t> ids, std::span<const Part> parts);
  // step_greedy in two halves, so that the caller works while a device that
  // queues its work (Device::computes_in_calls) computes: launch_greedy() checks
  // the step, starts its pass and advances the caches; greedy_tokens() waits for
  // its tokens. No other pass runs between them.
  Status launch_greedy(std::span<const int32_t> ids, std::span<const Part> parts);
  Result<std::vector<int32_t>> greedy_tokens();

  // A rank > 0 of a TP group: runs the leader's steps until it stops (OK: the
  // leader's Forward was destroyed) or a step fails (the group's error, or a
  // step message that breaks this rank's limits: then the leader's step fails
  // when the group's progress timeout passes).
  Status follow();
  // Seconds this Forward has waited in collectives (sums, gathers, the step
  // messages), for benchmarks: the rest of a step is compute.
  double collective_seconds() const { return collective_seconds_; }
  ~Forward();
  Forward(const Forward&) = delete;
  Forward& operator=(const Forward&) = delete;

 private:
  using BlockCopy = std::pair<int32_t, int32_t>;  // (from, to): a copy-on-write of a KV block

  // The setup after the weights: this rank's KV pool, as the leader's.
  Status make_kv_pool(const ForwardOptions& options, Status local);
  Status check_ids(std::span<const int32_t> ids) const;
  // Device::begin_step for a step whose parts each run one token (end_step after it).
  void begin_step(std::span<const SeqSlice> slices);
  Result<int64_t> hidden_rows(std::span<const float> hidden) const;
  // Room in each cache and in the pool, then the blocks every part needs; the
  // copy-on-write copies that made them writable into `copies`.
  Status prepare_parts(std::span<const Part> parts, int64_t tokens, std::vector<BlockCopy>& copies);
  Status prepare_scratch(int64_t tokens);
  // A pass's result: logits or hidden states (f32), or greedy tokens (Logits::kGreedy).
  struct Output {
    std::vector<float> values{};
    std::vector<int32_t> tokens{};
    int64_t on_device = 0;  // Logits::kGreedy chosen on the device: the tokens in greedy_, for greedy_tokens()
  };
  // What run_* and step_* share: the checks, then the ids' embeddings or the
  // hidden states into the residual stream, then the layers.
  Result<Output> embed_and_run(std::span<const int32_t> ids, std::span<const Part> parts, Logits logits);
  Result<Output> take_and_run(std::span<const float> hidden, std::span<const Part> parts, Logits logits);
  // The leader's step to the other ranks (follow()): its token ids, or (a range
  // after layer 0) its hidden states f32 [tokens, hidden].
  Status lead(std::span<const int32_t> ids, std::span<const float> hidden, std::span<const SeqSlice> slices,
              std::span<const BlockCopy> copies, Logits logits);
  // The ids' embeddings, the layers, and for an exit range the logits
  // (Logits::kLast: the last token of each slice).
  Result<Output> embed_and_compute(std::span<const int32_t> ids, std::span<const SeqSlice> slices, Logits logits);
  Result<Output> run_layers(std::span<const SeqSlice> slices, int64_t tokens, Logits logits);
  Status run_layer(size_t index, std::span<const SeqSlice> slices, int64_t tokens);
  // The rows' logits [rows, vocab] from the final-normed rows in norm_, or their greedy tokens.
  Result<Output> logits_of(int64_t rows, Logits logits);
  // The rows' logits [rows, vocab] from logits_ (each rank's part of the vocabulary, gathered).
  Result<std::vector<float>> gather_logits(int64_t rows);
  // x [count] (device) = its sum over the group's ranks.
  Status sum_over_ranks(float* x, int64_t count);
  // Runs a collective, counting its time.
  template <typename Call>
  Status timed(Call&& call);

  const Model& model_;
  Device& device_;
  Group group_;
  const bool tp_;  // a group of several ranks
  Status status_;
  ModelWeights weights_;       // the model's weights as placed on the device
  std::vector<Buffer> owned_;  // weights Forward made (norm_offset's norms)
  uint64_t copied_weight_bytes_ = 0;
  Buffer inv_freq_;        // f32 [rotary_dim / 2]
  Buffer long_inv_freq_;   // longrope's long factors; else empty
  Buffer local_inv_freq_;  // the sliding layers' (ArchSpec::sliding_rope); else empty
  std::unique_ptr<KvPool> kv_pool_;
  // Device scratch, grown as needed: x is the residual stream [tokens, hidden].
  Buffer x_, norm_, q_, k_, v_, attn_, proj_, gate_, up_, logits_, greedy_;
  std::optional<Output> launched_;      // launch_greedy's, until greedy_tokens()
  MoeMlp moe_;                          // the experts' scratch, for a family with them
  std::vector<float> host_, gathered_;  // host staging of the collectives
  double collective_seconds_ = 0;
};

}  // namespace tessera
