// `tessera stage`: a pipeline stage worker. It serves coordinators of its trust
// file until killed; each coordinator's setup says which layers of which
// checkpoint (a path on this host) it runs. With --tp the stage is itself a
// tensor-parallel group (PP x TP): it leads as rank 0 under --tp-identity, a
// trust-file node of its own (the coordinator dials the stage's address, the
// group's ranks dial rank 0's), and the other ranks run tessera rank --layers.
//   tessera stage --listen 10.0.0.2:7100 --identity keys/stage1 --trust trust.json
//   tessera stage ... --tp stage1-tp,stage1-r1 --tp-identity keys/stage1-tp
#include <cmath>
#include <cstdio>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/tp_options.h"
#include "pipeline/stage_service.h"

namespace tessera {
namespace {

struct StageCommandOptions {
  std::string listen;
  std::string identity;
  std::string trust;
  EngineOptions engine;
  TpOptions tp;           // members empty: no group; identity is --tp-identity, trust the stage's
  double timeout_s = 30;  // a peer silent mid-frame, each write, connecting to the next stage
  // Admission of strangers (StageOptions says what each does).
  double handshake_timeout_s = 5;
  size_t max_unauthenticated_per_host = pipeline::StageOptions{}.max_unauthenticated_per_host;
  size_t max_unauthenticated = pipeline::StageOptions{}.max_unauthenticated;
  size_t max_connections = pipeline::StageOptions{}.max_connections;
};

Status run_stage(const StageCommandOptions& o) {
  pipeline::StageOptions options;
  TS_ASSIGN_OR_RETURN(options.listen, net::parse_endpoint(o.listen));
  TS_ASSIGN_OR_RETURN(options.identity, net::load_identity(o.identity));
  TS_ASSIGN_OR_RETURN(options.trust, net::read_trust_file(o.trust));
  options.engine = o.engine;
  options.timeout = std::chrono::milliseconds(std::llround(o.timeout_s * 1000));
  options.handshake_timeout = std::chrono::milliseconds(std::llround(o.handshake_timeout_s * 1000));
  options.max_unauthenticated_per_host = o.max_unauthenticated_per_host;
  options.max_unauthenticated = o.max_unauthenticated;
  options.max_connections = o.max_connections;
  if (!o.tp.members.empty()) {
    TpOptions tp = o.tp;
    tp.trust = o.trust;
    if (tp.identity.empty()) return Status::invalid_input("stage --tp needs --tp-identity (rank 0's identity)");
    TS_ASSIGN_OR_RETURN(const TpMember member, load_tp_member(tp));
    if (member.identity.name == options.identity.name)
      return Status::invalid_input("--tp-identity is the stage's own node '" + member.identity.name +
                                   "': rank 0 of the group needs a trust-file node of its own (the coordinator "
                                   "dials the stage's address, the ranks dial rank 0's)");
    if (member.rank != 0)
      return Status::invalid_input("the stage leads its group as rank 0; '" + member.identity.name + "' is rank " +
                                   std::to_string(member.rank) + " of --tp");
    options.tp_ranks = static_cast<int>(tp.members.size());
    options.tp_members = tp.members;
    TS_ASSIGN_OR_RETURN(options.tp_ship, tp_ship_encoding(tp));
    options.tp_group = [tp, member, device = o.engine.device] { return connect_tp_group(tp, member, device); };
  }
  pipeline::StageService service(std::move(options));
  TS_RETURN_IF_ERROR(service.bind());
  std::fprintf(stderr, "[stage] listening on %s\n", o.listen.c_str());
  return service.run();
}

}  // namespace

void register_stage(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<StageCommandOptions>();
  CLI::App* cmd = app.add_subcommand("stage", "Run a pipeline stage worker");
  cmd->add_option("--listen", o->listen, "Address to listen on, host:port")->required();
  cmd->add_option("--identity", o->identity, "Directory with this node's key.pem and cert.pem (tessera keygen)")
      ->required();
  cmd->add_option("--trust", o->trust, "Cluster trust file (JSON)")->required();
  add_engine_options(*cmd, o->engine);
  add_tp_options(*cmd, o->tp, "--tp", /*required=*/false, /*with_identity=*/false);
  cmd->add_option("--tp-identity", o->tp.identity,
                  "With --tp: the identity directory of the group's rank 0 (the first --tp name), a trust-file node "
                  "other than the stage's own");
  cmd->add_flag("--tp-plain", o->tp.plain,
                "With --tp: the group's ranks are still authenticated (mutual TLS), but tensors travel unsealed");
  cmd->add_option("--timeout", o->timeout_s,
                  "Seconds a peer may stall in the middle of a frame, for each write, and to connect to the next stage")
      ->check(CLI::Range(0.1, 3600.0))
      ->capture_default_str();
  cmd->add_option("--handshake-timeout", o->handshake_timeout_s,
                  "Seconds a new connection has to complete its mutual-TLS handshake before it is dropped")
      ->check(CLI::Range(0.001, 3600.0))
      ->capture_default_str();
  cmd->add_option("--max-unauthenticated-per-host", o->max_unauthenticated_per_host,
                  "Connections from one host that have not completed their handshake; more are closed at once")
      ->check(CLI::Range(size_t{1}, size_t{65536}))
      ->capture_default_str();
  cmd->add_option("--max-unauthenticated", o->max_unauthenticated,
                  "Connections from all hosts that have not completed their handshake; more are closed at once")
      ->check(CLI::Range(size_t{1}, size_t{65536}))
      ->capture_default_str();
  cmd->add_option("--max-connections", o->max_connections,
                  "Authenticated connections served at once (strangers never count against it)")
      ->check(CLI::Range(size_t{1}, size_t{65536}))
      ->capture_default_str();
  cmd->callback([o, &exit_code] {
    const Status status = run_stage(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
