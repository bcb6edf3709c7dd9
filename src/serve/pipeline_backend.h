// PipelineBackend: tessera serve as the coordinator of a pipeline of stages
// (`tessera serve --pipeline stages.json --identity DIR --trust FILE`). The
// server keeps every running request in flight at once: each step sends the
// prompts of new requests and the last sampled token of running ones to stage 0
// without waiting (Pipeline::send), then takes whatever tokens the last stage
// has sampled. So every stage has the work of many requests waiting for it, and
// its Scheduler runs them together (continuous batching at every stage; the
// last stage samples each request with its own seeded sampler, so a request's
// tokens are those of one process).
//
// Failures, each its own answer (serve/api_error.h), on the next step (or an SSE
// error event). The server checked what it sent, so a stage's failure is never
// the client's; its kind travels typed (wire/control_frame.h's error message,
// pipeline::stage_failure): a stage without room (its KV pool or --max-requests
// full) fails that request with 503 overloaded; a stage whose connection drops,
// or that reports its next stage gone, fails every request in flight at once
// (503), one that stops heartbeating too (504: Cause::kTimedOut); anything else
// a stage reports (it refused what the server sent, or holds other weights), a
// frame from it that the server refuses, or a setup that fails for any other
// reason is 500: the deployment is broken and retrying does not help. The next
// request sets the pipeline up again, so the server serves again once the stage
// is back.
//
// Logprobs: a request that asks for them is not started on the last stage,
// which then returns its logits [vocab] (f32) each step instead of a token; the
// server samples them with the request's own Sampler, as the Scheduler does,
// and takes their log-softmax, so its tokens and logprobs are one process's (at
// the cost of vocab x 4 bytes from the last stage a token).
//
// The prefix cache: the server names every full KV block of a request by its
// hash chain (engine/prefix_cache.h: tokens and cache_salt), which only it can
// compute (the later stages see hidden states). A new request's prompt blocks go
// to every stage as a `prefix` query first (wire/prefix_message.h): each takes
// the longest run of them it still holds, and the request reuses the fewest any
// took, so every stage skips the same positions; its first `blocks` message,
// ahead of the rest of the prompt down the chain of stages, tells each to keep
// that many and names the blocks it will write, as does each later feed that
// fills a block. Each stage evicts its own cached blocks under its own pressure,
// least recently used first, which is safe: what a stage took for a request is
// held until the request ends. /metrics' KV usage is the fullest stage's (from
// their heartbeats).
//
// Preemption: a stage whose KV pool is full closes the newest request it holds
// and says `preempted` (wire revision 3). The server cancels that request on
// every stage and holds it, with the requests opened after it, until another
// request leaves (or nothing runs), then runs it again under a new id on the
// stages: its prompt and the tokens it has so far as one prompt (from the
// stages' prefix caches where they still hold its blocks), its last-stage
// sampler restored by start's "output" (the penalties count it, and the
// generator skips a draw a token), so its answer is the uninterrupted one. A
// request sampled here keeps its sampler here. With a stage of an older
// revision, a full pool still fails the request (503 overloaded).
//
// Thread safety: as LoopBackend (the inference thread).
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "io/model_config.h"
#include "pipeline/coordinator.h"
#include "sampling/sampler.h"
#include "serve/loop_backend.h"

namespace tessera::serve {

struct PipelineServing {
  std::string plan;                     // stages.json (pipeline/coordinator.h)
  std::string identity;                 // this node's identity directory (tessera keygen)
  std::string trust;                    // the cluster's trust file
  pipeline::PipelineOptions options{};  // timeouts, --plain, --ship-weights; context and model_dir set on connect
  bool prefix_caching = true;           // --no-prefix-caching: false
};

// A pipeline's failure as a request's: the server checked what it sends (ids in
// the vocabulary, prompts within the context), so it is never the client's
// fault. kOverloaded (a stage without room: 503), kDisconnected (a stage gone:
// 503, silent: 504) and kInternal (500) stay, as pipeline::stage_failure types
// a stage's report; any other kind (the coordinator's own, in setting up: its
// checkpoint, say) becomes kInternal, naming it.
Status pipeline_failure(Status status);

class PipelineBackend final : public LoopBackend {
 public:
  // Connects to and sets up every stage; `context` positions per request.
  static Result<std::unique_ptr<PipelineBackend>> connect(const PipelineServing& serving, const ModelConfig& config,
                                                          const std::string& model_dir, int64_t context);

  // The smallest stage's KV pool once the stages' heartbeats have told it (a
  // request that outgrows it would fail there), else the context.
  int64_t max_positions() const override;
  int64_t free_blocks() const override { return std::numeric_limits<int64_t>::max(); }
  int64_t blocks_for(int64_t /*tokens*/) const override { return 0; }
  Status open(uint64_t id, int64_t capacity, const Submission& request) override;
  Status feed(uint64_t id, int32_t token) override;
  void cancel(uint64_t id) override;
  bool has_work() const override { return !outgoing_.empty() || !in_flight_.empty() || !held_.empty(); }
  size_t held() const override { return held_.size(); }
  std::vector<StepOutput> step(const std::function<void()>& meanwhile) override;
  void update_stats(LoopStats& stats) const override;

 private:
  // What the server keeps of a request, to run it again after a preemption.
  struct Request {
    uint64_t wire = 0;  // its id on the stages: a new one each time it runs again
    std::vector<int32_t> prompt{};
    std::optional<SamplingParams> sampling{};  // sampled on the last stage (not here)
    std::string salt{};
    std::vector<int32_t> output{};  // the tokens fed back so far
    bool held = false;              // preempted, or opened behind one: not on the stages
  };
  // Sends the request to the stages (again): its prompt and output so far.
  void launch(uint64_t id);
  // A stage closed it for room: off every stage, held until there is room.
  void preempt(uint64_t id, std::vector<StepOutput>& outputs);
  // Launches the oldest held request when a request has left since the last, or nothing runs.
  void release_held();
  struct Outgoing {
    uint64_t id = 0;
    bool first = false;                     // a new request's first: it may set a failed pipeline up again
    std::optional<SamplingParams> start{};  // a new request: its sampler goes to the last stage first
    std::vector<int32_t> prompt{};          // with start: for the penalties
    std::vector<int32_t> output{};          // with start: what it sampled before a preemption
    std::vector<int32_t> ids{};
    std::vector<wire::BlockDigest> query{};  // not empty: ask the stages for these cached blocks first
    std::optional<int64_t> reuse{};          // the blocks the stages keep of those (the request's first blocks)
    std::vector<wire::BlockDigest> names{};  // the blocks its ids fill
  };
  // A request's hash chain, with the prefix cache (the stages' block size).
  struct Chain {
    int64_t block_size = 0;
    std::string salt;
    std::vector<int32_t> tokens;            // prompt and fed tokens
    std::vector<wire::BlockDigest> blocks;  // of its full blocks
  };
  // The request's ids, and the names of the blocks they fill.
  Outgoing with_names(uint64_t id, std::vector<int32_t> ids);
  void send(Outgoing& o, std::vector<StepOutput>& outputs);
  // A request with logprobs: sampled here, from the logits the last stage returns.
  struct SampledHere {
    Sampler sampler;
    int top = 0;  // top logprobs per token
    std::vector<int32_t> prompt{}, output{};
  };
  void collect(std::vector<StepOutput>& outputs);
  // A find_prefix answer: the request's prompt goes on, less the blocks reused.
  void reuse(uint64_t id, int64_t blocks);
  StepOutput sample_here(uint64_t id, SampledHere& request, std::vector<float> logits) const;
  PipelineBackend(std::unique_ptr<pipeline::Pipeline> pipeline, int64_t context, int64_t vocab, bool prefix_caching)
      : pipeline_(std::move(pipeline)), context_(context), vocab_(vocab), prefix_caching_(prefix_caching) {}

  std::unique_ptr<pipeline::Pipeline> pipeline_;
  const int64_t context_, vocab_;
  const bool prefix_caching_;
  std::map<uint64_t, Request> requests_;
  std::map<uint64_t, uint64_t> loop_id_;  // a wire id's request
  std::deque<uint64_t> held_;             // preempted ones, oldest first, then those opened behind them
  int64_t left_ = 0;                      // requests that left the stages since a held one was last launched
  uint64_t preemptions_ = 0;
  std::map<uint64_t, SampledHere> sampled_here_;
  std::map<uint64_t, Chain> chains_;
  std::map<uint64_t, Outgoing> asking_;  // prompts waiting for their find_prefix answer
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0;
  std::vector<Outgoing> outgoing_;  // queued by open() and feed(), sent by the next step()
  std::set<uint64_t> in_flight_;    // sent, no result yet
};

}  // namespace tessera::serve
