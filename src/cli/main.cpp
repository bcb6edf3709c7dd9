// tessera: one binary, one subcommand per file (generate.cpp, bench.cpp, ...).
#include <cstdio>

#include "cli/commands.h"

namespace tessera {

int report_error(const Status& status) {
  std::fprintf(stderr, "tessera: %s\n", status.to_string().c_str());
  return 2;
}

Result<DType> parse_weight_dtype(const std::string& name) {
  if (name == "f32") return DType::kF32;
  if (name == "bf16") return DType::kBF16;
  if (name == "f16") return DType::kF16;
  return Status::invalid_input("--dtype must be f32, bf16 or f16, not '" + name + "'");
}

}  // namespace tessera

int main(int argc, char** argv) {
  CLI::App app{"tessera: run a transformer LLM on one host or split across hosts"};
  app.require_subcommand(1);
  int exit_code = 0;
  tessera::register_generate(app, exit_code);
  tessera::register_chat(app, exit_code);
  tessera::register_bench(app, exit_code);
  tessera::register_random_checkpoint(app, exit_code);
  tessera::register_tokenize(app, exit_code);
  tessera::register_bench_collective(app, exit_code);
  tessera::register_keygen(app, exit_code);
  tessera::register_stage(app, exit_code);
  tessera::register_local_cluster(app, exit_code);
  tessera::register_bench_pipeline(app, exit_code);
  tessera::register_probe(app, exit_code);
  tessera::register_serve(app, exit_code);
  tessera::register_rank(app, exit_code);
  tessera::register_bench_tp(app, exit_code);
  tessera::register_quantize(app, exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // One line, as every other refusal (CLI11's own adds a second line pointing at --help).
    return tessera::report_error(tessera::Status::invalid_input(e.what()));
  }
  return exit_code;
}
