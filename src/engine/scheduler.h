// Scheduler: the engine's one step scheduler. A single process, a pipeline
// stage and the server all run their sequences through it:
//
//   open(id)      a sequence with its KV cache (paged, in the Forward's pool)
//   start(id)     gives it a Sampler for a request: its feeds then yield tokens, not logits
//   feed_*(id)    input for it: token ids (an entry range) or hidden states
//                 (a later range), queued, bounded: kOverloaded when full
//   step()        one forward pass: the decode steps of running sequences first,
//                 then prompt chunks, oldest first, at most max_step_tokens tokens
//                 and max_step_sequences sequences (chunked prefill); returns the
//                 output of every feed that finished in it
//   cancel(id)    drops the sequence and its queued input; its blocks return to
//                 the pool at once
//
// With prefix_caching (a range that starts at layer 0), every full KV block a
// sequence writes is kept in a PrefixCache (engine/prefix_cache.h) under the
// hash chain of its tokens, and feed_prompt() starts a new sequence from the
// longest cached prefix of its prompt (at least its last token still runs, for
// its logits). Cached blocks no sequence uses are evicted, least recently used
// first, when a step needs blocks the pool does not have free.
//
// With named_prefixes (a pipeline stage, which may not see the tokens: a later
// range sees hidden states) the caller names each full block instead: its
// coordinator computes the same hash chain from the tokens and the salt and
// sends it (wire/prefix_message.h). take_cached() starts a fresh sequence from
// the longest run of a chain the cache holds; name_blocks() keeps the first n
// blocks taken and names the sequence's next full blocks, which go into the
// cache once a step has written them (never before, so a block found is whole).
//
// With preemption (a whole model: entry and exit), a sequence that needs blocks
// the pool does not have takes them from the newest sequences (opened later)
// not running in this step, as vLLM's recompute preemption: the victim's blocks
// return to the pool and the ids it held are run again, ahead of its unfinished
// input, when blocks are free (its sampler and outputs are kept, and Forward is
// chunk-invariant, so its tokens are bitwise those of an uninterrupted run). An
// older sequence is never preempted for a newer one, so the oldest sequence with
// work always runs, and nothing fails for want of blocks unless it cannot fit
// in the whole pool (or, in a step that runs nothing, it cannot run at all).
//
// A feed's output is what the caller asked for: for an exit range, the sampled
// token (with a sampler) or the logits of the feed's last token; otherwise the
// hidden states of every token of the feed, whatever chunks it ran in. Because
// Forward is batch-invariant and chunk-invariant, a sequence gets bitwise the
// same output whatever runs beside it and however its prompt is chunked.
//
// Errors belong to one sequence: a feed that cannot run (capacity, vocabulary,
// no KV blocks for it alone) fails that sequence, which is closed (its blocks
// freed); the others go on.
//
// Thread safety: none; the one inference thread that owns the Forward calls it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/prefix_cache.h"
#include "model/forward.h"
#include "sampling/sampler.h"

namespace tessera {

struct SchedulerOptions {
  int64_t max_step_tokens = 512;   // tokens in one forward pass (--max-step-tokens)
  size_t max_step_sequences = 64;  // sequences in one forward pass
  size_t max_sequences = 1024;     // open at once
  size_t max_queued_feeds = 4096;  // inputs waiting, over all sequences
  bool prefix_caching = false;     // keep full KV blocks for later prompts (entry ranges)
  bool preemption = false;         // recompute preemption when the pool is short (entry and exit ranges)
  // A pipeline stage's preemption (not with `preemption`): the victims, chosen
  // as `preemption` chooses them, are closed and returned by step() with
  // StepOutput::preempted, for the coordinator, which holds their tokens, to run
  // them again; in a step that runs nothing, the newest sequence short of blocks
  // gives way itself (on a stage, older sequences hold their blocks while their
  // input is at another stage, and will come back).
  bool close_preempted = false;
  // With prefix_caching, on any range: blocks are named by the caller (name_blocks), not by their ids. Not
  // with preemption (a preempted sequence would need its ids).
  bool named_prefixes = false;
};

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;  // log-softmax of the raw logits (before biases, penalties and temperature)
};
// A sampled token's log-probability and the `top` most likely tokens' (most likely first, ties by id).
struct SampledLogprobs {
  TokenLogprob sampled;
  std::vector<TokenLogprob> top{};
};

// The log-softmax of `logits` [vocab] at `token`, and at the `top` largest
// logits (most likely first, ties by id): what a sequence started with
// top_logprobs gets, for callers that sample logits themselves.
SampledLogprobs log_softmax(std::span<const float> logits, int32_t token, int top);

struct StepOutput {
  uint64_t id = 0;
  Status status{};              // not OK: the sequence failed and is closed
  std::vector<float> values{};  // logits [vocab] of the feed's last token, or hidden states [tokens, hidden]
  int32_t token = -1;           // the sampled token, for a sequence that samples here
  std::optional<SampledLogprobs> logprobs{};  // for a sequence started with top_logprobs >= 0
  bool preempted = false;  // close_preempted: closed to make room (status kOverloaded), to be run again
};

class Scheduler {
 public:
  Scheduler(Forward& forward, SchedulerOptions options = {});

  // A sequence of at most `capacity` positions. kInvalidInput for an id already
  // open, kOverloaded when max_sequences are open.
  Status open(uint64_t id, int64_t capacity);
  // Samples the open sequence's next feeds here (an exit range only), with a new
  // Sampler; `prompt` is the request's prompt, for the penalties. With
  // top_logprobs >= 0 each output carries its logprobs (and that many top ones).
  // `output`: a preempted request's answer so far, run again as part of its
  // input: the penalties count it and the sampler skips its samples
  // (Sampler::skip), so it samples on as the uninterrupted run would.
  // kInvalidInput naming the parameter that is out of range.
  Status start(uint64_t id, const SamplingParams& params, std::vector<int32_t> prompt, int top_logprobs = -1,
               std::vector<int32_t> output = {});
  bool is_open(uint64_t id) const { return sequences_.contains(id); }
  // Queue input for an open sequence. Ids are checked against the vocabulary and
  // hidden states against hidden_size here, so a bad input fails only its own feed.
  Status feed_ids(uint64_t id, std::vector<int32_t> ids);
  Status feed_hidden(uint64_t id, std::vector<float> hidden);
  // A fresh sequence's prompt: takes the longest cached prefix of `ids` under
  // `cache_salt` (with prefix_caching), then queues the rest. Returns the
  // positions taken from the cache.
  Result<int64_t> feed_prompt(uint64_t id, std::vector<int32_t> ids, const std::string& cache_salt = {});
  // named_prefixes: a fresh open sequence takes the longest run of `chain` that
  // the cache holds (pinned until it is cancelled or name_blocks drops it); returns
  // the blocks taken (0 without a prefix cache).
  Result<int64_t> take_cached(uint64_t id, std::span<const PrefixCache::Digest> chain);
  // named_prefixes: with `reuse`, keeps the first `reuse` blocks it holds (no
  // input queued yet), then appends `names`, the digests of its next full blocks.
  // kInvalidInput when reuse is more than it holds, or the names more than its
  // capacity's blocks.
  Status name_blocks(uint64_t id, std::optional<int64_t> reuse, std::vector<PrefixCache::Digest> names);
  void cancel(uint64_t id);
  void cancel_all();

  bool has_work() const { return queued_ > 0; }
  // Inputs waiting (fed, not yet fully run) and the bytes their ids and hidden
  // states hold: what a caller that bounds its own queue counts as still pending.
  size_t queued_feeds() const { return queued_; }
  uint64_t queued_bytes() const { return queued_bytes_; }
  // `meanwhile`, when given, is called once in the step, while the device
  // computes the pass where it can (a GPU computing greedy tokens: the pass is
  // queued, then `meanwhile` runs, then the step waits for the tokens), else
  // before the pass. It may read this scheduler, not change it.
  std::vector<StepOutput> step(const std::function<void()>& meanwhile = {});
  // The error of the last step's forward pass (the device's, or a TP group's
  // that has failed and stays failed), which every sequence in that step got;
  // OK when it ran or nothing ran. How a TP leader tells a dead group from one
  // sequence's bad input.
  const Status& forward_failure() const { return forward_failure_; }

  // Positions a sequence holds (a preempted one: those it will run again); keeps
  // only the first n (a reused prompt prefix), with no input queued.
  int64_t length(uint64_t id) const;
  void truncate(uint64_t id, int64_t n);

  size_t open_sequences() const { return sequences_.size(); }
  uint64_t kv_bytes() const;
  size_t largest_step() const { return largest_step_; }           // most sequences one step has run
  size_t last_step_size() const { return last_step_size_; }       // sequences the last step ran
  int64_t last_step_tokens() const { return last_step_tokens_; }  // tokens the last step ran (0: none ran)
  const Forward& forward() const { return forward_; }

  // Prefix cache, in tokens as vLLM counts them: prompt tokens looked up, and
  // those found. Blocks only the cache holds (free for the taking; a scan).
  uint64_t prefix_queries() const { return prefix_queries_; }
  uint64_t prefix_hits() const { return prefix_hits_; }
  int64_t prefix_evictable_blocks() const { return prefix_cache_ ? prefix_cache_->evictable() : 0; }
  // Sequences preempted so far (their blocks freed, their ids run again later; or closed, with close_preempted).
  uint64_t preemptions() const { return preemptions_; }
  // Open sequences held for KV blocks: preempted and not yet run again, or left
  // out of the last step for want of blocks (a scan). What vLLM counts as waiting.
  size_t held_sequences() const;

 private:
  struct Feed {
    std::vector<int32_t> ids{};
    std::vector<float> hidden{};
    int64_t tokens = 0;
    int64_t done = 0;  // tokens already run
    uint64_t order = 0;
    uint64_t bytes() const { return ids.size() * sizeof(int32_t) + hidden.size() * sizeof(float); }
  };
  struct Sequence {
    KvCache cache;
    std::optional<Sampler> sampler{};
    int top_logprobs = -1;  // -1: no logprobs
    std::vector<int32_t> prompt{}, output{};
    std::deque<Feed> feeds{};
    std::vector<float> hidden_out{};  // the current feed's hidden states so far
    uint64_t age = 0;                 // order of open(): with preemption, newer sequences give way to older ones
    // Entry ranges: the ids in the KV cache. With a prefix cache, the salt and the digests of its full blocks.
    std::vector<int32_t> tokens{};
    std::vector<int32_t> replay{};  // preempted with no input queued: ids to run before its next input
    std::string salt{};
    std::vector<PrefixCache::Digest> chain{};  // named_prefixes: its names, possibly ahead of what it wrote
    size_t cached = 0;                         // its leading blocks that are in the prefix cache
    bool held = false;                         // preempted or short of blocks since it last ran
  };
  struct Chosen {
    uint64_t id;
    int64_t tokens;
  };
  Status queue(uint64_t id, Feed feed);
  std::vector<Chosen> choose(std::vector<StepOutput>& failed);
  // The newest sequence opened after `age` that holds blocks and is not in `chosen`.
  std::optional<uint64_t> newest_victim(uint64_t age, const std::vector<Chosen>& chosen) const;
  // Frees the sequence's blocks; the ids it held run again ahead of its input.
  void preempt(uint64_t id);
  // close_preempted: closes it, and says so.
  StepOutput closed_for_room(uint64_t id);
  void close(uint64_t id);
  // Frees up to `blocks` blocks only the prefix cache holds; returns how many.
  int64_t evict_cached(int64_t blocks);
  // Caches the sequence's full blocks written since the last call.
  void cache_full_blocks(Sequence& sequence);

  Forward& forward_;
  const SchedulerOptions options_;
  const int64_t hidden_size_, vocab_size_;
  std::unique_ptr<PrefixCache> prefix_cache_;  // with prefix_caching; outlived by nothing that holds its blocks
  std::map<uint64_t, Sequence> sequences_;
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
  uint64_t preemptions_ = 0;
  uint64_t next_age_ = 0;
  size_t queued_ = 0;          // feeds waiting, over all sequences
  uint64_t queued_bytes_ = 0;  // their ids' and hidden states' bytes
  uint64_t next_order_ = 0;
  size_t largest_step_ = 0;
  size_t last_step_size_ = 0;
  int64_t last_step_tokens_ = 0;
  Status forward_failure_{};
};

}  // namespace tessera
