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

int64_t LocalRunner::length() const { return scheduler_.is_open(id_) ? scheduler_.length(id_) : 0; }

Status LocalRunner::truncate(int64_t n) {
  started_ = false;
  if (scheduler_.is_open(id_)) scheduler_.truncate(id_, std::min(n, scheduler_.length(id_)));
  return {};
}

Result<StepOutput> LocalRunner::run_feed(std::span<const int32_t> ids) {
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
