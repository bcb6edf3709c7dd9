// SequenceRunner: what runs the whole model for one sequence, as the generation
// loop (generation.h) sees it: token ids in, the last position's logits or the
// next token out. Its two kinds are LocalRunner, a sequence of this process's
// Scheduler, and a pipeline's runner (pipeline/coordinator.h), which sends the
// ids through stages on other hosts.
//
// Not thread-safe: one runner per sequence, used from one thread.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "core/status.h"
#include "engine/scheduler.h"
#include "sampling/sampler.h"

namespace tessera {

class SequenceRunner {
 public:
  virtual ~SequenceRunner() = default;
  // Runs ids at positions [length(), + ids.size()); returns f32 logits [vocab]
  // of the last one. On an error the runner holds nothing.
  virtual Result<std::vector<float>> run(std::span<const int32_t> ids) = 0;
  // The ids whose keys and values the runner holds, in order (what a next
  // request with the same prefix reuses).
  std::span<const int32_t> tokens() const { return held_; }
  int64_t length() const { return static_cast<int64_t>(held_.size()); }
  virtual int64_t capacity() const = 0;  // positions it can hold
  // Keeps the first n <= length() positions (a cached prompt prefix) and starts
  // a new request: the next run_to_token starts a fresh sampler.
  virtual Status truncate(int64_t n) = 0;
  // A runner made with sampling parameters samples where the logits are (this
  // process's scheduler, or a pipeline's last stage): it runs ids and returns the
  // next token instead of logits; `prompt` is the request's prompt (for
  // penalties). Others return false and kUnsupported.
  virtual bool samples_itself() const { return false; }
  virtual Result<int32_t> run_to_token(std::span<const int32_t> /*ids*/, std::span<const int32_t> /*prompt*/) {
    return Status::unsupported("this runner returns logits; sample them");
  }

 protected:
  std::vector<int32_t> held_;  // see tokens(); kept by each kind of runner
};

// One sequence of a Scheduler that this thread drives: each run feeds the ids
// and steps the scheduler until they are done.
class LocalRunner final : public SequenceRunner {
 public:
  LocalRunner(Scheduler& scheduler, int64_t capacity, std::optional<SamplingParams> sampling = std::nullopt);
  ~LocalRunner() override;
  LocalRunner(const LocalRunner&) = delete;
  LocalRunner& operator=(const LocalRunner&) = delete;

  Result<std::vector<float>> run(std::span<const int32_t> ids) override;
  int64_t capacity() const override { return capacity_; }
  Status truncate(int64_t n) override;
  bool samples_itself() const override { return sampling_.has_value(); }
  Result<int32_t> run_to_token(std::span<const int32_t> ids, std::span<const int32_t> prompt) override;

 private:
  // Feeds ids and steps the scheduler until they are done; keeps held_ in step.
  Result<StepOutput> run_feed(std::span<const int32_t> ids);
  Result<StepOutput> step_until_done(std::span<const int32_t> ids);

  Scheduler& scheduler_;
  const int64_t capacity_;
  const std::optional<SamplingParams> sampling_;
  const uint64_t id_;
  bool started_ = false;  // the sequence is open with this request's sampler
};

}  // namespace tessera
