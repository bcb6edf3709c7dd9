// TpBackend: tessera serve as rank 0 of a tensor-parallel group (`tessera serve
// --tp node0,node1,... --identity DIR --trust FILE`), as `generate --tp` is: the
// scheduler, the KV block tables, the prefix cache, preemption and sampling stay
// in this process (a LocalBackend over its shard, on a Forward over the group),
// and every forward pass runs on every rank (`tessera rank`). So everything the
// one-process server does holds here, logprobs and the prefix cache included.
//
// Failures: a rank that dies or stays silent past --progress-timeout fails the
// group (collective/group.h latches it failed on every rank), and with it the
// step that was running. Then every request in flight fails at once (503, or an
// SSE error event: a rank's failure is never the client's), the engine is
// dropped, and the next request forms the group anew (the surviving ranks wait
// for that; a restarted rank joins), waiting up to --group-timeout for the ranks.
// A rank that dies while nothing runs is seen by the next step, whose requests
// fail as above.
//
// Thread safety: as LoopBackend (the inference thread).
#pragma once

#include <functional>
#include <memory>
#include <set>

#include "serve/loop_backend.h"

namespace tessera::serve {

class TpBackend final : public LoopBackend {
 public:
  // Forms the group and makes rank 0's engine over it (cli/tp_options.h:
  // make_tp_engine); called again after the group fails.
  using Connect = std::function<Result<std::unique_ptr<LocalBackend>>()>;
  static Result<std::unique_ptr<TpBackend>> connect(Connect connect);

  // The pool's shape is the same on every forming (the same options).
  int64_t max_positions() const override { return max_positions_; }
  int64_t free_blocks() const override;
  int64_t blocks_for(int64_t tokens) const override { return tokens / block_size_ + 1; }
  Status open(uint64_t id, int64_t capacity, const Submission& request) override;
  Status feed(uint64_t id, int32_t token) override;
  void cancel(uint64_t id) override;
  bool has_work() const override { return engine_ && engine_->has_work(); }
  size_t held() const override { return engine_ ? engine_->held() : 0; }
  std::vector<StepOutput> step(const std::function<void()>& meanwhile) override;
  void update_stats(LoopStats& stats) const override;
  StepSize last_step() const override { return engine_ ? engine_->last_step() : StepSize{}; }

 private:
  TpBackend(Connect connect, std::unique_ptr<LocalBackend> engine);

  Connect connect_;
  std::unique_ptr<LocalBackend> engine_;  // null after the group failed, until the next request forms it
  int64_t max_positions_ = 0, total_blocks_ = 0, block_size_ = 1;
  std::set<uint64_t> open_;  // requests open in engine_
  // Counters of engines dropped, so /metrics keeps counting across formings.
  uint64_t prefix_queries_ = 0, prefix_hits_ = 0, preemptions_ = 0, largest_step_ = 0;
};

}  // namespace tessera::serve
