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
#include <map>
#include <optional>
#include <vector>

#include "core/status.h"
#include "model/forward.h"
#include "sampling/sampler.h"

namespace tessera {

struct SchedulerOptions {
  int64_t max_step_tokens = 512;   // tokens in one forward pass (--max-step-tokens)
  size_t max_step_sequences = 64;  // sequences in one forward pass
  size_t max_sequences = 1024;     // open at once
  size_t max_queued_feeds = 4096;  // inputs waiting, over all sequences
};

struct StepOutput {
  uint64_t id = 0;
  Status status{};              // not OK: the sequence failed and is closed
  std::vector<float> values{};  // logits [vocab] of the feed's last token, or hidden states [tokens, hidden]
  int32_t token = -1;           // the sampled token, for a sequence that samples here
};

class Scheduler {
 public:
  Scheduler(Forward& forward, SchedulerOptions options = {});

  // A sequence of at most `capacity` positions. kInvalidInput for an id already
  // open, kOverloaded when max_sequences are open.
  Status open(uint64_t id, int64_t capacity);
  // Samples the open sequence's next feeds here (an exit range only), with a new
  // Sampler; `prompt` is the request's prompt, for the penalties. kInvalidInput
  // naming the parameter that is out of range.
  Status start(uint64_t id, const SamplingParams& params, std::vector<int32_t> prompt);
  bool is_open(uint64_t id) const { return sequences_.contains(id); }
  // Queue input for an open sequence. Ids are checked against the vocabulary and
  // hidden states against hidden_size here, so a bad input fails only its own feed.
  Status feed_ids(uint64_t id, std::vector<int32_t> ids);
  Status feed_hidden(uint64_t id, std::vector<float> hidden);
  void cancel(uint64_t id);
  void cancel_all();

  bool has_work() const { return queued_ > 0; }
  // Inputs waiting (fed, not yet fully run) and the bytes their ids and hidden
  // states hold: what a caller that bounds its own queue counts as still pending.
  size_t queued_feeds() const { return queued_; }
  uint64_t queued_bytes() const { return queued_bytes_; }
  std::vector<StepOutput> step();

  // Positions a sequence holds; keeps only the first n (a reused prompt prefix),
  // with no input queued.
  int64_t length(uint64_t id) const;
  void truncate(uint64_t id, int64_t n);

  size_t open_sequences() const { return sequences_.size(); }
  uint64_t kv_bytes() const;
  size_t largest_step() const { return largest_step_; }      // most sequences one step has run
  size_t last_step_size() const { return last_step_size_; }  // sequences the last step ran
  const Forward& forward() const { return forward_; }

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
    std::vector<int32_t> prompt{}, output{};
    std::deque<Feed> feeds{};
    std::vector<float> hidden_out{};  // the current feed's hidden states so far
  };
  struct Chosen {
    uint64_t id;
    int64_t tokens;
  };
  Status queue(uint64_t id, Feed feed);
  std::vector<Chosen> choose(std::vector<StepOutput>& failed);
  void close(uint64_t id);

  Forward& forward_;
  const SchedulerOptions options_;
  const int64_t hidden_size_, vocab_size_;
  std::map<uint64_t, Sequence> sequences_;
  size_t queued_ = 0;          // feeds waiting, over all sequences
  uint64_t queued_bytes_ = 0;  // their ids' and hidden states' bytes
  uint64_t next_order_ = 0;
  size_t largest_step_ = 0;
  size_t last_step_size_ = 0;
};

}  // namespace tessera
