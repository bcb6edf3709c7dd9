#include "engine/sequence_runner.h"

#include <algorithm>
#include <atomic>
#include <utility>
#include <vector>

namespace tessera {

namespace {

uint64_t new_sequence_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

}  // namespace

LocalRunner::LocalRunner(Scheduler& scheduler, int64_t capacity, std::optional<SamplingParams> sampling)
    : scheduler_(scheduler), capacity_(capacity), sampling_(std::move(sampling)), id_(new_sequence_id()) {}

LocalRunner::~LocalRunner() { scheduler_.cancel(id_); }

Status LocalRunner::truncate(int64_t n) {
  started_ = false;
  n = std::min(n, length());
  if (scheduler_.is_open(id_)) scheduler_.truncate(id_, n);
  held_.resize(static_cast<size_t>(n));
  return {};
}

Result<StepOutput> LocalRunner::run_feed(std::span<const int32_t> ids) {
  Result<StepOutput> out = step_until_done(ids);
  if (out.ok()) {
    held_.insert(held_.end(), ids.begin(), ids.end());
  } else {  // whatever the sequence held is gone or unknown: start afresh
    scheduler_.cancel(id_);
    held_.clear();
    started_ = false;
  }
  return out;
}

Result<StepOutput> LocalRunner::step_until_done(std::span<const int32_t> ids) {
  if (!scheduler_.is_open(id_)) TS_RETURN_IF_ERROR(scheduler_.open(id_, capacity_));
  TS_RETURN_IF_ERROR(scheduler_.feed_ids(id_, std::vector<int32_t>(ids.begin(), ids.end())));
  while (scheduler_.has_work()) {
    for (StepOutput& out : scheduler_.step()) {
      if (out.id != id_) continue;
      if (!out.status.ok()) return out.status;
      return std::move(out);
    }
  }
  return Status::internal("the scheduler finished without this sequence's output");
}

Result<std::vector<float>> LocalRunner::run(std::span<const int32_t> ids) {
  TS_ASSIGN_OR_RETURN(StepOutput out, run_feed(ids));
  return std::move(out.values);
}

Result<int32_t> LocalRunner::run_to_token(std::span<const int32_t> ids, std::span<const int32_t> prompt) {
  if (!sampling_) return SequenceRunner::run_to_token(ids, prompt);
  if (!started_) {
    if (!scheduler_.is_open(id_)) TS_RETURN_IF_ERROR(scheduler_.open(id_, capacity_));
    TS_RETURN_IF_ERROR(scheduler_.start(id_, *sampling_, std::vector<int32_t>(prompt.begin(), prompt.end())));
    started_ = true;
  }
  TS_ASSIGN_OR_RETURN(StepOutput out, run_feed(ids));
  return out.token;
}

}  // namespace tessera
