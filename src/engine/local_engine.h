// LocalEngine: a model's layers running in this process — the device, the
// Forward over the model's range with its paged KV pool, and the Scheduler
// every sequence goes through. What `generate`, `chat` and a pipeline stage
// build from their options (cli/engine_options.h). create() warms the engine up
// (one position through its layers on a scratch sequence) unless it is a rank of
// a tensor-parallel group.
//
// Thread safety: as Scheduler: one inference thread.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "backend/device.h"
#include "core/status.h"
#include "engine/scheduler.h"
#include "model/forward.h"

namespace tessera {

struct EngineOptions {
  std::string device = "cpu";    // cpu or cuda[:N]
  size_t threads = 0;            // CPU threads (0: all cores)
  ForwardOptions forward{};      // the KV pool's budget, dtype and block size
  SchedulerOptions scheduler{};  // step size and queue bounds
};

struct LocalEngine {
  std::unique_ptr<Device> device;
  std::unique_ptr<Forward> forward;
  std::unique_ptr<Scheduler> scheduler;

  // Errors name what did not fit (weights or the KV pool) or the bad option.
  static Result<LocalEngine> create(const Model& model, const EngineOptions& options);
  // Frees it all, the scheduler's sequences first (they hold the Forward's KV
  // blocks); call before assigning a new engine over a used one.
  void reset() {
    scheduler.reset();
    forward.reset();
    device.reset();
  }
};

}  // namespace tessera
