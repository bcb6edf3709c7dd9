// The `tessera` subcommands: each file registers one on the CLI11 app; its
// callback stores the process exit code (0 ok, 2 bad input or failure, with one
// line on stderr naming what was wrong).
#pragma once

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace tessera {

void register_generate(CLI::App& app, int& exit_code);
void register_bench(CLI::App& app, int& exit_code);

// Prints "tessera: <message>" on stderr and returns exit code 2.
int report_error(const Status& status);

}  // namespace tessera
