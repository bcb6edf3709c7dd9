// `tessera probe`: asks a pipeline stage, over mutual TLS, for its status: the
// memory available on its host and the requests it holds KV caches for.
//   tessera probe --stage stage1 --identity keys/coordinator --trust trust.json
// Prints one JSON object.
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "pipeline/coordinator.h"

namespace tessera {
namespace {

struct ProbeOptions {
  std::string stage;
  std::string identity;
  std::string trust;
};

Status probe(const ProbeOptions& o) {
  TS_ASSIGN_OR_RETURN(const net::Identity identity, net::load_identity(o.identity));
  TS_ASSIGN_OR_RETURN(const net::TrustFile trust, net::read_trust_file(o.trust));
  TS_ASSIGN_OR_RETURN(const pipeline::StageStatus status,
                      pipeline::probe_stage(identity, trust, o.stage, std::chrono::milliseconds(10000)));
  const nlohmann::json out = {{"stage", o.stage},
                              {"free_bytes", status.free_bytes},
                              {"requests", status.requests},
                              {"kv_bytes", status.kv_bytes},
                              {"largest_step", status.largest_step}};
  std::printf("%s\n", out.dump().c_str());
  return {};
}

}  // namespace

void register_probe(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<ProbeOptions>();
  CLI::App* cmd = app.add_subcommand("probe", "Ask a pipeline stage for its free memory and live requests");
  cmd->add_option("--stage", o->stage, "The stage's trust-file name")->required();
  cmd->add_option("--identity", o->identity, "This node's identity directory")->required();
  cmd->add_option("--trust", o->trust, "The cluster trust file")->required();
  cmd->callback([o, &exit_code] {
    const Status status = probe(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
