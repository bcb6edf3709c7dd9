// `tessera local-cluster`: identities and a trust file for nodes on this machine
// (each on a free 127.0.0.1 port), for the demo and for trying a pipeline
// before spreading it over hosts (docs/distributed.md).
//   tessera local-cluster --out build/demo-cluster --nodes coordinator,stage0,stage1
// Prints "name address" per node; the trust file is OUT/trust.json and node N's
// identity is OUT/N.
#include <cstdio>

#include "cli/commands.h"
#include "net/local_cluster.h"

namespace tessera {
namespace {

Status write_cluster(const std::string& out, const std::vector<std::string>& names) {
  if (std::filesystem::exists(std::filesystem::path(out) / "trust.json")) {
    return Status::invalid_input(out + "/trust.json exists; remove " + out + " to make a new cluster");
  }
  std::vector<net::LocalNode> nodes;
  for (const std::string& name : names) {
    TS_ASSIGN_OR_RETURN(const uint16_t port, net::free_loopback_port());
    nodes.push_back({name, "127.0.0.1:" + std::to_string(port)});
  }
  TS_RETURN_IF_ERROR(net::write_local_cluster(out, nodes));
  for (const net::LocalNode& node : nodes) std::printf("%s %s\n", node.name.c_str(), node.address.c_str());
  return {};
}

}  // namespace

void register_local_cluster(CLI::App& app, int& exit_code) {
  auto out = std::make_shared<std::string>();
  auto names = std::make_shared<std::vector<std::string>>();
  CLI::App* cmd = app.add_subcommand("local-cluster", "Identities and a trust file for nodes on this machine");
  cmd->add_option("--out", *out, "Directory to write (must not hold a trust.json)")->required();
  cmd->add_option("--nodes", *names, "Node names, comma-separated")->delimiter(',')->required();
  cmd->callback([out, names, &exit_code] {
    const Status status = write_cluster(*out, *names);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
