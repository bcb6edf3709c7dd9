#include "engine/local_engine.h"

namespace tessera {

namespace {

// One position through the range's layers on a scratch sequence, so that the first
// request does not pay what happens once: the weights paged in from the mapped file
// on a CPU; on a GPU the decode path's kernels loaded and its scratch allocated (a
// prompt's tiled kernels still load with the first prompt of 32 tokens or more).
Status warm_up(Forward& forward) {
  KvCache scratch = forward.make_cache(1);
  if (forward.model().has_entry()) return forward.run_ids(std::vector<int32_t>{0}, scratch).status();
  const std::vector<float> hidden(static_cast<size_t>(forward.model().config().hidden_size), 0.0f);
  return forward.run_hidden(hidden, scratch).status();
}

}  // namespace

Result<LocalEngine> LocalEngine::create(const Model& model, const EngineOptions& options) {
  if (options.scheduler.max_step_tokens < 1) return Status::invalid_input("--max-step-tokens must be at least 1");
  LocalEngine engine;
  TS_ASSIGN_OR_RETURN(engine.device, make_device(options.device, options.threads));
  engine.forward = std::make_unique<Forward>(model, *engine.device, options.forward);
  TS_RETURN_IF_ERROR(engine.forward->status());
  // A tensor-parallel group's other ranks are not following yet: its ranks start cold.
  if (options.forward.group.size() == 1) TS_RETURN_IF_ERROR(warm_up(*engine.forward));
  engine.scheduler = std::make_unique<Scheduler>(*engine.forward, options.scheduler);
  return engine;
}

}  // namespace tessera
