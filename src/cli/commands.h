// The `tessera` subcommands: each file registers one on the CLI11 app; its
// callback stores the process exit code (0 ok, 2 bad input or failure, with one
// line on stderr naming what was wrong).
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tessera {

void register_generate(CLI::App& app, int& exit_code);
void register_chat(CLI::App& app, int& exit_code);
void register_bench(CLI::App& app, int& exit_code);
void register_random_checkpoint(CLI::App& app, int& exit_code);
void register_tokenize(CLI::App& app, int& exit_code);
void register_bench_collective(CLI::App& app, int& exit_code);
void register_stage(CLI::App& app, int& exit_code);
void register_local_cluster(CLI::App& app, int& exit_code);
void register_bench_pipeline(CLI::App& app, int& exit_code);
void register_probe(CLI::App& app, int& exit_code);
void register_keygen(CLI::App& app, int& exit_code);
void register_serve(CLI::App& app, int& exit_code);
void register_rank(CLI::App& app, int& exit_code);
void register_bench_tp(CLI::App& app, int& exit_code);
void register_quantize(CLI::App& app, int& exit_code);

// "f32", "bf16" or "f16" (the --dtype of commands that make weights).
Result<DType> parse_weight_dtype(const std::string& name);

// The median of the bench commands' timings (the upper one of an even count).
inline double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// Prints "tessera: <message>" on stderr and returns exit code 2.
int report_error(const Status& status);

}  // namespace tessera
