#include "engine/local_engine.h"

namespace tessera {

Result<LocalEngine> LocalEngine::create(const Model& model, const EngineOptions& options) {
  if (options.scheduler.max_step_tokens < 1) return Status::invalid_input("--max-step-tokens must be at least 1");
  LocalEngine engine;
  TS_ASSIGN_OR_RETURN(engine.device, make_device(options.device, options.threads));
  engine.forward = std::make_unique<Forward>(model, *engine.device, options.forward);
  TS_RETURN_IF_ERROR(engine.forward->status());
  engine.scheduler = std::make_unique<Scheduler>(*engine.forward, options.scheduler);
  return engine;
}

}  // namespace tessera
