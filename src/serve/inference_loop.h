// InferenceLoop: the server's one inference thread. It loads the model, owns
// the LocalEngine (device, Forward, Scheduler) and steps every live request
// together: each iteration admits waiting requests (open + start + feed the
// prompt), runs one Scheduler::step() (the decode steps of running requests
// plus chunks of new prompts: continuous batching with chunked prefill), and
// hands each sampled token to its request's sink.
// A finished or cancelled request leaves the scheduler at once, so its KV
// blocks return to the pool before the next step.
//
// KV space, as vLLM: a request waits in the queue (bounded by max_waiting; past
// it submit() refuses, a 429) until the pool has free blocks for its prompt,
// oldest first. When running requests cannot grow, the scheduler preempts the
// newest (its blocks return to the pool; its prompt and tokens so far run again
// later, with its sampler kept), so its answer is bitwise an uninterrupted
// run's. A request never runs past what the whole pool holds (finish "length";
// check_kv_room: the server refuses one that cannot fit it before submit()).
// Requests the backend holds for blocks count as waiting, not running.
//
// Each request's sampler lives in the scheduler's sequence, seeded by the
// request alone: nothing per batch is shared, so a request's tokens do not
// depend on what runs beside it (Scheduler's batch invariance).
//
// The stop rules are generate()'s (engine/generation.h), step by step: the
// model's stop ids end a request before the id (finish "stop"), a stop string
// ends it with the text before it ("stop"), max_tokens or the sequence's
// capacity ends it ("length").
//
// Text is made off this thread: events carry token ids, and the receiver turns
// them into text with answer_text() (the HTTP session, on its own strand), so
// detokenizing is not on the step's critical path. Only a request with stop
// strings is detokenized here too, with the same answer_text(), to see where
// its text stops: the receiver's stream stops at the same token.
//
// With LoopOptions::backend the requests run elsewhere instead (a pipeline of
// stages: pipeline_backend.h), through the same admission, stop rules and events.
//
// Events: each iteration gathers the events of its step (tokens, finishes,
// failures) and hands them over at once: to the delivery function when one is
// set (the server posts the whole batch to its I/O threads, one hand-over a
// step instead of one a token on the inference thread), otherwise by calling
// each sink there. Batches go in order, and a request's events keep theirs.
//
// Between steps the thread does only what the next step needs: the stop rules
// and the feed of each token, admission and cancellations. It hands the last
// step's events over and counts what /metrics shows in the next step, while the
// device computes it (LoopBackend::step's `meanwhile`; on the CPU, whose
// threads compute in the calls, before the pass). vLLM's async scheduling does
// the same host work beside the next step; it also launches that step before
// this one's tokens are on the host (its input ids stay on the device), which
// this engine's Device::embed, reading ids from the host, cannot. Idle, the
// thread hands the events over at once.
//
// Thread safety: submit(), cancel flags, ready(), model(), stats() and stop()
// may be called from any thread; deliver_events_with() before start(). Sinks
// are called on the inference thread, or where the delivery function runs
// them, and must not block (HTTP sessions post to their own strand).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/local_engine.h"
#include "engine/text_model.h"
#include "engine/text_stream.h"
#include "sampling/sampling_params.h"
#include "serve/histogram.h"
#include "serve/loop_backend.h"

namespace tessera::serve {

// What a request hears from the inference thread: each token of its answer as
// it is sampled (one event a step), then one final event (done) with the
// finish reason or the error.
struct GenerationEvent {
  // The step's token of the answer, for answer_text(); none when a model stop
  // id ended the answer (it is not part of it). The done event may carry the
  // last step's token (a stop string's last token, or the one at max_tokens).
  std::optional<int32_t> token{};
  bool done = false;
  Status error{};               // done with an error: the request failed (no finish reason)
  bool cancelled = false;       // done with an error because the request's cancel flag was set
  std::string finish_reason{};  // done and OK: "stop" or "length"
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  // With logprobs asked: those of `token`.
  std::vector<SampledLogprobs> logprobs{};
};

// An answer's text as it becomes safe to show (engine/text_stream.h): its
// tokens decoded without special tokens, never split inside a UTF-8 character,
// cut before the first of `stop` and holding back what may begin one. The
// model's tokenizer is thread-safe, so any thread may run one.
TextStream answer_text(const TextModel& model, std::vector<std::string> stop);

using Sink = std::function<void(GenerationEvent)>;
// One iteration's events, in order, each with its request's sink.
using EventBatch = std::vector<std::pair<std::shared_ptr<const Sink>, GenerationEvent>>;

struct Submission {
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  SamplingParams sampling;
  std::vector<std::string> stop;
  std::string cache_salt;   // the prefix cache's salt: only requests with the same one share blocks
  int logprobs = -1;        // -1: none; else each token's logprob and this many top ones
  bool ignore_eos = false;  // the model's stop ids do not end it (a stop string, max_tokens or capacity does)
  std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  Sink sink;
  std::chrono::steady_clock::time_point arrived{};  // set by submit()
};

struct LoopOptions {
  std::string model_dir;
  EngineOptions engine;
  size_t max_waiting = 256;    // submissions queued before admission; past it submit() refuses
  bool prefix_caching = true;  // reuse the KV blocks of earlier prompts (engine/prefix_cache.h)
  // Where the layers run when not in this process: makes the backend once the
  // model is loaded (tessera serve --pipeline: PipelineBackend::connect; the
  // engine options are then the stages' own, and prefix_caching goes to it
  // through PipelineServing). Empty: here.
  std::function<Result<std::unique_ptr<LoopBackend>>(const TextModel& model, int64_t context)> backend{};
};

// A request needs a KV position for its prompt and each token of its answer but
// the last (which is not run): one whose prompt, or prompt and max_tokens when
// the client set it, passes `pool_positions` (what the whole KV pool holds for
// one request) can never run, and waiting would not help: kInvalidInput naming
// the counts. OK otherwise.
Status check_kv_room(int64_t prompt_tokens, std::optional<int64_t> max_tokens, int64_t pool_positions);

// The engine options a server runs its requests with: options.engine, with the
// prefix cache as asked and recompute preemption (a TP leader's engine too).
EngineOptions serving_engine_options(const LoopOptions& options);

// Counters for /metrics; read from any thread.
struct LoopStats {
  std::atomic<int64_t> waiting{0}, running{0};
  std::atomic<int64_t> kv_blocks_total{0}, kv_blocks_free{0};
  std::atomic<uint64_t> prompt_tokens{0}, generation_tokens{0};
  std::atomic<uint64_t> prefix_cache_queries{0}, prefix_cache_hits{0};  // prompt tokens looked up, found
  std::atomic<uint64_t> finished_stop{0}, finished_length{0}, failed{0}, cancelled{0};
  // The inference thread's steps: how many, the sequences and tokens they ran
  // (summed: their means are the batch actually reached), the nanoseconds inside
  // the backend's step (forward pass and sampling) and the nanoseconds of whole
  // iterations (the step and the host work around it: admission, cancellations,
  // stop rules, detokenizing, events). Their difference is what serving adds.
  std::atomic<uint64_t> steps{0};
  std::atomic<uint64_t> step_sequences{0}, step_tokens{0};
  std::atomic<uint64_t> step_ns{0}, iteration_ns{0};
  // step_ns leaves out the host work done while the device computes (the last
  // step's events, the counts). Of step_ns, launch_ns: from a step's start until
  // the device computes on its own (choosing the step and queueing its pass; on
  // the CPU, the choosing alone). between_steps_ns: from a step's outputs to the
  // next step's start while steps run back to back, the host work the device
  // waits for (stop rules, feeds, admission).
  std::atomic<uint64_t> launch_ns{0}, between_steps_ns{0};
  std::atomic<uint64_t> preemptions{0};   // running requests preempted for KV space (recomputed later)
  std::atomic<uint64_t> largest_step{0};  // most sequences one forward pass has run (continuous batching)
  // Seconds: arrival to admission; arrival to the first token; between tokens; arrival to a finish.
  Histogram queue_time, time_to_first_token, inter_token_latency, e2e_latency;
};

class InferenceLoop {
 public:
  explicit InferenceLoop(LoopOptions options);
  ~InferenceLoop();  // stop()s
  InferenceLoop(const InferenceLoop&) = delete;
  InferenceLoop& operator=(const InferenceLoop&) = delete;

  // Where each iteration's events go (before start()): the function gets the
  // batch on the inference thread and must not block; it runs the sinks in
  // batch order, batch after batch (the server: on one strand of its I/O threads).
  void deliver_events_with(std::function<void(EventBatch)> deliver) { deliver_ = std::move(deliver); }
  // Starts the thread, which loads the model; ready() once it can take requests.
  void start();
  bool ready() const { return ready_.load(); }
  // Set when loading failed (then the thread has ended).
  Status load_status() const;
  // The model, once ready(); immutable (tokenizer and chat template are thread-safe).
  const TextModel& model() const { return *model_; }
  int64_t context() const;
  // The most positions one request may hold (the KV pool's; on a pipeline the
  // smallest stage's, once their heartbeats told it), once ready().
  int64_t max_positions() const { return max_positions_.load(); }

  // Queues the sequences of one request (its n choices), all or none: kOverloaded
  // when they would pass max_waiting, while loading, or while stopping. Each sink
  // hears of its sequence from then on.
  Status submit(std::vector<Submission> submissions);
  // Requests waiting (queued, or held by the backend for KV blocks) or running:
  // what a graceful shutdown waits for.
  int64_t in_flight() const { return stats_.waiting.load() + stats_.running.load(); }
  const LoopStats& stats() const { return stats_; }
  // Ends the thread; requests still live fail with kOverloaded ("shutting down").
  void stop();

 private:
  struct Live;
  void run();
  Status load();
  // Takes waiting submissions, oldest first, while a slot and KV blocks for their prompts are free.
  std::vector<Submission> take_waiting();
  void admit(std::vector<Submission>& admitted);
  // `now`: when the step's outputs came back.
  void on_token(uint64_t id, Live& live, StepOutput& out, std::chrono::steady_clock::time_point now);
  // `last`: the event of the step's token (its tokens and logprobs), made the done one.
  void finish(uint64_t id, const std::string& reason, GenerationEvent last);
  // `cancelled`: the request's cancel flag (the client left), not a failure.
  void fail(uint64_t id, Status error, bool cancelled = false);
  // Queues an event for the end of the iteration; flush() hands the batch over.
  void emit(const std::shared_ptr<const Sink>& sink, GenerationEvent event);
  void flush();
  // The work that waits for no step: count_requests(), refresh_stats(), flush().
  void settle();
  // After a step: running and waiting as vLLM counts them (the requests the
  // backend holds for KV blocks are waiting).
  void count_requests();
  // The backend's figures for /metrics, and max_positions().
  void refresh_stats();

  const LoopOptions options_;
  std::function<void(EventBatch)> deliver_;  // set before start(); empty: sinks run on the inference thread
  LoopStats stats_;
  std::atomic<bool> ready_{false};
  std::atomic<int64_t> max_positions_{0};
  std::atomic<int64_t> held_{0};  // live requests the backend holds for KV blocks (counted as waiting)
  std::thread thread_;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Submission> waiting_;  // guarded by mutex_
  bool stopping_ = false;           // guarded by mutex_
  Status load_status_{};            // guarded by mutex_

  // Owned by the inference thread (model_ is read-only for others once ready_).
  std::unique_ptr<TextModel> model_;
  std::unique_ptr<LoopBackend> backend_;
  std::map<uint64_t, std::unique_ptr<Live>> live_;
  uint64_t next_id_ = 1;
  EventBatch events_;  // this iteration's, not yet handed over
};

}  // namespace tessera::serve
