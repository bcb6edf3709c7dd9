#include "serve/tp_backend.h"

#include <algorithm>
#include <cstdio>

#include "serve/inference_loop.h"

namespace tessera::serve {

namespace {
// What a client hears when the group is down: a rank's failure is the server's,
// never the client's (503 with Retry-After), whatever kind the group latched.
Status group_down(const Status& failure) {
  return Status::disconnected("the tensor-parallel group failed: " + failure.message(), failure.cause());
}
}  // namespace

Result<std::unique_ptr<TpBackend>> TpBackend::connect(Connect connect) {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<LocalBackend> engine, connect());
  return std::unique_ptr<TpBackend>(new TpBackend(std::move(connect), std::move(engine)));
}

TpBackend::TpBackend(Connect connect, std::unique_ptr<LocalBackend> engine)
    : connect_(std::move(connect)), engine_(std::move(engine)) {
  max_positions_ = engine_->max_positions();
  block_size_ = engine_->block_size();
  total_blocks_ = max_positions_ / block_size_;
}

// A group not formed has its whole pool free once it is.
int64_t TpBackend::free_blocks() const { return engine_ ? engine_->free_blocks() : total_blocks_; }

Status TpBackend::open(uint64_t id, int64_t capacity, const Submission& request) {
  if (!engine_) {
    std::fprintf(stderr, "[serve] forming the tensor-parallel group anew\n");
    Result<std::unique_ptr<LocalBackend>> engine = connect_();
    if (!engine.ok()) return group_down(engine.status());
    engine_ = std::move(*engine);
    std::fprintf(stderr, "[serve] the tensor-parallel group is formed\n");
  }
  TS_RETURN_IF_ERROR(engine_->open(id, capacity, request));
  open_.insert(id);
  return {};
}

Status TpBackend::feed(uint64_t id, int32_t token) {
  if (!engine_ || !open_.contains(id)) return Status::internal("request " + std::to_string(id) + " is not open");
  return engine_->feed(id, token);
}

void TpBackend::cancel(uint64_t id) {
  if (open_.erase(id) != 0 && engine_) engine_->cancel(id);
}

std::vector<StepOutput> TpBackend::step(const std::function<void()>& meanwhile) {
  std::vector<StepOutput> outputs = engine_->step(meanwhile);
  const Status failure = engine_->forward_failure();
  if (failure.ok()) {
    for (StepOutput& out : outputs)
      if (!out.status.ok()) open_.erase(out.id);  // the scheduler closed it
    return outputs;
  }
  // The group failed (it stays failed): every request in flight fails now, and
  // the engine goes, so that the ranks form the group anew for the next request.
  const Status down = group_down(failure);
  std::fprintf(stderr, "[serve] %s; requests in flight fail\n", down.message().c_str());
  for (StepOutput& out : outputs)
    if (!out.status.ok()) {
      out.status = down;
      open_.erase(out.id);
    }
  for (const uint64_t id : open_) outputs.push_back({.id = id, .status = down});
  open_.clear();
  LoopStats last;
  engine_->update_stats(last);
  prefix_queries_ += last.prefix_cache_queries;
  prefix_hits_ += last.prefix_cache_hits;
  preemptions_ += last.preemptions;
  largest_step_ = std::max<uint64_t>(largest_step_, last.largest_step);
  engine_.reset();
  return outputs;
}

void TpBackend::update_stats(LoopStats& stats) const {
  if (engine_) {
    engine_->update_stats(stats);
  } else {
    stats.kv_blocks_total = total_blocks_;
    stats.kv_blocks_free = total_blocks_;
    stats.prefix_cache_queries = 0;
    stats.prefix_cache_hits = 0;
    stats.preemptions = 0;
    stats.largest_step = 0;
  }
  stats.prefix_cache_queries += prefix_queries_;
  stats.prefix_cache_hits += prefix_hits_;
  stats.preemptions += preemptions_;
  stats.largest_step = std::max<uint64_t>(stats.largest_step, largest_step_);
}

}  // namespace tessera::serve
