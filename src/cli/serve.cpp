// `tessera serve`: the OpenAI API on one host (src/serve/server.h), or in front
// of a pipeline of `tessera stage` processes as their coordinator.
//   tessera serve --model DIR [--device cpu|cuda[:N]] [--host 127.0.0.1] [--port 8000] [--api-key KEY]
//   tessera serve --model DIR --pipeline stages.json --identity DIR --trust FILE [--plain] ...
//   tessera serve --model DIR --tp node0,node1,... --identity DIR --trust FILE [--plain] ...
// With --tp the server is rank 0 of a tensor-parallel group (the others run
// tessera rank), as generate --tp is.
// Listens at once (/health answers 503 while the model loads), then serves until
// SIGTERM or SIGINT, lets requests in flight finish (--shutdown-timeout) and
// exits 0. A model that fails to load ends it with exit code 2 and the reason.
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/tp_options.h"
#include "serve/pipeline_backend.h"
#include "serve/server.h"
#include "serve/tp_backend.h"

namespace tessera {

namespace {

struct ServeOptions {
  serve::ServerOptions server;
  double shutdown_timeout_s = 30;
  serve::PipelineServing pipeline;  // with --pipeline
  std::string ship_weights;
  double timeout_s = 30;
  double heartbeat_timeout_s = 3;
  TpOptions tp;  // --tp: rank 0 of a TP group (identity, trust and plain are --pipeline's flags)
};

// Rank 0 of the group: the scheduler here over this process's shard; formed
// again by the next request after the group fails (serve/tp_backend.h).
Status set_tp_backend(ServeOptions& o) {
  if (!o.pipeline.plan.empty()) return tp_beside_a_pipeline();
  TpOptions tp = o.tp;
  tp.identity = o.pipeline.identity;
  tp.trust = o.pipeline.trust;
  tp.plain = o.pipeline.options.plain;
  // Refused before listening: not a member, or not rank 0 (make_tp_engine checks it too, once loaded).
  TS_ASSIGN_OR_RETURN(const TpMember member, load_tp_member(tp));
  if (member.rank != 0)
    return Status::invalid_input("--tp runs rank 0, the leader; '" + member.identity.name + "' is rank " +
                                 std::to_string(member.rank) + ": run tessera rank there");
  o.server.loop.backend = [tp, engine = serve::serving_engine_options(o.server.loop)](
                              const TextModel& model, int64_t) -> Result<std::unique_ptr<serve::LoopBackend>> {
    TS_ASSIGN_OR_RETURN(
        std::unique_ptr<serve::TpBackend> backend,
        serve::TpBackend::connect([&model, tp, engine]() -> Result<std::unique_ptr<serve::LocalBackend>> {
          TS_ASSIGN_OR_RETURN(TpEngine leader, make_tp_engine(model.model, tp, engine));
          std::fprintf(stderr, "[serve] %s\n", leader.name.c_str());
          return std::make_unique<serve::LocalBackend>(std::move(leader.engine), std::move(leader.shard));
        }));
    return std::unique_ptr<serve::LoopBackend>(std::move(backend));
  };
  return {};
}

Status serve_main(ServeOptions& o) {
  serve::ServerOptions& s = o.server;
  if (s.routes.model_name.empty())
    s.routes.model_name = std::filesystem::path(s.loop.model_dir).lexically_normal().filename().string();
  if (s.routes.model_name.empty())
    s.routes.model_name = std::filesystem::path(s.loop.model_dir).parent_path().filename();
  s.shutdown_timeout = std::chrono::milliseconds(std::llround(o.shutdown_timeout_s * 1000));
  if (!o.tp.members.empty()) {
    TS_RETURN_IF_ERROR(set_tp_backend(o));
  } else if (!o.pipeline.plan.empty()) {
    pipeline::PipelineOptions& p = o.pipeline.options;
    p.timeout = std::chrono::milliseconds(std::llround(o.timeout_s * 1000));
    p.heartbeat_timeout = std::chrono::milliseconds(std::llround(o.heartbeat_timeout_s * 1000));
    if (!o.ship_weights.empty()) {
      TS_ASSIGN_OR_RETURN(p.ship, pipeline::parse_ship_encoding(o.ship_weights));
    }
    if (o.pipeline.identity.empty() || o.pipeline.trust.empty())
      return Status::invalid_input("--pipeline needs --identity and --trust");
    o.pipeline.prefix_caching = s.loop.prefix_caching;
    s.loop.backend = [serving = o.pipeline, model_dir = s.loop.model_dir](
                         const TextModel& model, int64_t context) -> Result<std::unique_ptr<serve::LoopBackend>> {
      TS_ASSIGN_OR_RETURN(std::unique_ptr<serve::PipelineBackend> backend,
                          serve::PipelineBackend::connect(serving, model.model.config(), model_dir, context));
      return std::unique_ptr<serve::LoopBackend>(std::move(backend));
    };
  }
  serve::Server server(s);
  TS_RETURN_IF_ERROR(server.listen());
  std::fprintf(stderr, "[serve] listening on http://%s:%u, loading %s as '%s'\n", s.host.c_str(), server.port(),
               s.loop.model_dir.c_str(), s.routes.model_name.c_str());
  server.start();
  return server.run_until_signal();
}

}  // namespace

void register_serve(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ServeOptions>();
  serve::ServerOptions& s = o->server;
  CLI::App* cmd = app.add_subcommand("serve", "Serve the OpenAI API (completions, chat) over HTTP");
  cmd->add_option("--model", s.loop.model_dir, "Checkpoint directory (config.json, safetensors, tokenizer.json)")
      ->required();
  add_engine_options(*cmd, s.loop.engine);
  cmd->add_option("--host", s.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", s.port, "Port to listen on")->capture_default_str();
  cmd->add_option("--api-key", s.routes.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1/*, /tokenize and /detokenize")
      ->envname("TESSERA_API_KEY");
  cmd->add_option("--served-model-name", s.routes.model_name, "The model's name in the API (default: the directory's)");
  cmd->add_option("--max-waiting", s.loop.max_waiting,
                  "Requests queued before the scheduler takes them; past it a request gets 429")
      ->check(CLI::Range(size_t{1}, size_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--body-limit", s.body_limit, "Largest request body, e.g. 1MiB (413 past it)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd->add_flag("--no-prefix-caching{false}", s.loop.prefix_caching,
                "Run every prompt whole instead of reusing the KV blocks of earlier prompts");
  cmd->add_option("--io-threads", s.io_threads, "HTTP I/O threads")->check(CLI::Range(1, 64))->capture_default_str();
  cmd->add_option("--pipeline", o->pipeline.plan,
                  "Coordinate the pipeline stages this JSON file names instead of running the layers here");
  cmd->add_option("--identity", o->pipeline.identity, "With --pipeline or --tp: this node's identity directory");
  cmd->add_option("--trust", o->pipeline.trust, "With --pipeline or --tp: the cluster trust file");
  add_tp_options(*cmd, o->tp, "--tp", /*required=*/false, /*with_identity=*/false);
  cmd->add_option(
      "--ship-weights", o->ship_weights,
      "With --pipeline: send each stage its layers from --model (none, lz4, int8, int8+lz4, int4, int4+lz4)");
  cmd->add_flag("--plain", o->pipeline.options.plain,
                "With --pipeline or --tp, for trusted links: peers are authenticated (mutual TLS), frames travel "
                "unsealed");
  cmd->add_option("--timeout", o->timeout_s, "With --pipeline: seconds to connect to a stage and for each write to one")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--heartbeat-timeout", o->heartbeat_timeout_s,
                  "With --pipeline: seconds a stage may stay silent before its requests fail as frozen")
      ->check(CLI::Range(0.05, 180.0))
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                  "On SIGTERM, seconds requests in flight may take to finish")
      ->check(CLI::Range(0.0, 3600.0))
      ->capture_default_str();
  cmd->callback([o, &exit_code] {
    const Status status = serve_main(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
