// The flags of a process that runs layers itself (`generate`, `chat`, `stage`):
// the device, its threads, the paged KV pool and the step scheduler.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

#include "core/dtype.h"
#include "engine/local_engine.h"

namespace tessera {

// More CPU threads than this is a mistake, not a machine (--threads 100000 once aborted).
inline constexpr size_t kMaxThreads = 1024;

// --kv-dtype into `dtype` (unset: auto). bench takes it too.
inline void add_kv_dtype_option(CLI::App& cmd, std::optional<DType>& dtype) {
  cmd.add_option_function<std::string>(
      "--kv-dtype",
      [&dtype](const std::string& name) {
        if (name == "auto") {
          dtype.reset();
        } else if (name == "f32") {
          dtype = DType::kF32;
        } else if (name == "bf16") {
          dtype = DType::kBF16;
        } else if (name == "f16") {
          dtype = DType::kF16;
        } else {
          throw CLI::ValidationError("--kv-dtype", "'" + name + "' is not auto, f32, bf16 or f16");
        }
      },
      "KV cache dtype: auto (default: a 16-bit or f32 checkpoint's own dtype, f16 for GGUF blocks), f32, bf16 "
      "or f16; 16 bits hold twice the positions in --kv-memory, f32 keeps the keys and values exactly as computed");
}

inline void add_engine_options(CLI::App& cmd, EngineOptions& o) {
  cmd.add_option("--device", o.device, "cpu or cuda[:N]");
  cmd.add_option("--threads", o.threads, "CPU threads (default: all cores)")->check(CLI::Range(size_t{0}, kMaxThreads));
  cmd.add_option("--kv-memory", o.forward.kv_memory,
                 "Memory for the paged KV cache, e.g. 2GiB (default: a quarter of the available memory)")
      ->transform(CLI::AsSizeValue(false));
  add_kv_dtype_option(cmd, o.forward.kv_dtype);
  cmd.add_option("--max-step-tokens", o.scheduler.max_step_tokens,
                 "Most tokens in one forward pass; longer prompts run in chunks (chunked prefill)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  cmd.add_option("--max-requests", o.scheduler.max_sequences,
                 "Most requests open at once (each holds its KV blocks); past it a request is refused as "
                 "overloaded (default: 1024)")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20));
}

}  // namespace tessera
