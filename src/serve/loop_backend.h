// LoopBackend: where the inference loop's requests run. LocalBackend steps this
// process's Scheduler (the model's layers here, with the paged KV pool, the
// prefix cache and preemption); PipelineBackend (pipeline_backend.h) is the
// coordinator of a pipeline of `tessera stage` processes, each of which batches
// the requests in flight through its own Scheduler.
//
// The loop (inference_loop.h) opens a request with its sampler and prompt, and
// feeds each sampled token back; step() runs what is pending and returns each
// request's next token (sampled where the logits are) or its error.
//
// Thread safety: none; the one inference thread calls it.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/local_engine.h"
#include "engine/scheduler.h"
#include "model/model.h"

namespace tessera::serve {

struct LoopStats;   // inference_loop.h
struct Submission;  // inference_loop.h

class LoopBackend {
 public:
  virtual ~LoopBackend() = default;
  // Most positions one request may hold (its prompt and answer).
  virtual int64_t max_positions() const = 0;
  // KV blocks free for new prompts, and the blocks a prompt of `tokens` takes
  // (the loop admits requests while they fit; a backend without a local pool
  // admits all: 0 blocks).
  virtual int64_t free_blocks() const = 0;
  virtual int64_t blocks_for(int64_t tokens) const = 0;
  // Starts request `id` (its sampler, then its prompt); on an error nothing of it is kept.
  virtual Status open(uint64_t id, int64_t capacity, const Submission& request) = 0;
  // The token the last step sampled for it, to run next.
  virtual Status feed(uint64_t id, int32_t token) = 0;
  // Drops it; its KV cache is freed (on a pipeline: on every stage).
  virtual void cancel(uint64_t id) = 0;
  virtual bool has_work() const = 0;
  // Open requests it holds without running them (preempted, or waiting for KV
  // blocks): /metrics counts them as waiting, as vLLM does.
  virtual size_t held() const = 0;
  // Runs what is pending: each request that got its next token, or failed (and
  // is closed). Calls `meanwhile` once: while the device computes the step
  // where it can (Scheduler::step), else before it. `meanwhile` may read the
  // backend (held(), update_stats()), not change it.
  virtual std::vector<StepOutput> step(const std::function<void()>& meanwhile) = 0;
  // KV usage, prefix cache, batching and preemption counters for /metrics.
  virtual void update_stats(LoopStats& stats) const = 0;
  // What the last step() ran in this process's forward pass: sequences and tokens
  // (none for a backend whose forward passes run elsewhere).
  struct StepSize {
    size_t sequences = 0;
    int64_t tokens = 0;
  };
  virtual StepSize last_step() const { return {}; }
};

// The model's layers in this process (or, as a TP group's leader, its shard:
// `shard` is what the engine runs, kept until the engine is gone).
class LocalBackend final : public LoopBackend {
 public:
  explicit LocalBackend(LocalEngine engine, std::unique_ptr<Model> shard = nullptr)
      : shard_(std::move(shard)), engine_(std::move(engine)) {}
  ~LocalBackend() override { engine_.reset(); }

  int64_t max_positions() const override;
  int64_t free_blocks() const override;
  int64_t blocks_for(int64_t tokens) const override;
  Status open(uint64_t id, int64_t capacity, const Submission& request) override;
  Status feed(uint64_t id, int32_t token) override { return engine_.scheduler->feed_ids(id, {token}); }
  void cancel(uint64_t id) override { engine_.scheduler->cancel(id); }
  bool has_work() const override { return engine_.scheduler->has_work(); }
  size_t held() const override { return engine_.scheduler->held_sequences(); }
  std::vector<StepOutput> step(const std::function<void()>& meanwhile) override {
    return engine_.scheduler->step(meanwhile);
  }
  void update_stats(LoopStats& stats) const override;
  StepSize last_step() const override {
    return {engine_.scheduler->last_step_size(), engine_.scheduler->last_step_tokens()};
  }
  // The last step's forward failure (Scheduler::forward_failure).
  const Status& forward_failure() const { return engine_.scheduler->forward_failure(); }
  int64_t block_size() const { return engine_.forward->kv_pool().block_size(); }

 private:
  std::unique_ptr<Model> shard_;  // null: the engine runs a model its caller keeps
  LocalEngine engine_;
};

}  // namespace tessera::serve
