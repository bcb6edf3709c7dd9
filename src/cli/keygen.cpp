// `tessera keygen`: makes a node's long-term identity (an Ed25519 key and a
// self-signed certificate, see net/identity.h) and prints its fingerprint and
// the trust-file entry that lets the other nodes accept it.
//   tessera keygen --out /etc/tessera/stage0 --name stage0
#include <unistd.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "net/identity.h"

namespace tessera {

namespace {

struct KeygenOptions {
  std::string out_dir;
  std::string name;  // empty: the host name
};

Result<std::string> host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') {
    return Status::invalid_input("cannot read the host name; pass --name");
  }
  return std::string(buf);
}

Status keygen(const KeygenOptions& o) {
  std::string name = o.name;
  if (name.empty()) {
    TS_ASSIGN_OR_RETURN(name, host_name());
  }
  TS_RETURN_IF_ERROR(net::write_identity(o.out_dir, name));
  TS_ASSIGN_OR_RETURN(const net::Identity identity, net::load_identity(o.out_dir));
  const nlohmann::json entry = {
      {"name", identity.name}, {"address", identity.name + ":7100"}, {"fingerprint", identity.fingerprint}};
  std::printf("wrote %s/key.pem (keep it secret) and %s/cert.pem\n", o.out_dir.c_str(), o.out_dir.c_str());
  std::printf("fingerprint: %s\n", identity.fingerprint.c_str());
  std::printf("trust-file node entry (set the address this node listens on):\n  %s\n", entry.dump().c_str());
  return {};
}

}  // namespace

void register_keygen(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<KeygenOptions>();
  CLI::App* cmd =
      app.add_subcommand("keygen", "Make a node's TLS identity (key.pem, cert.pem) and print its fingerprint");
  cmd->add_option("--out", o->out_dir, "Directory to write key.pem and cert.pem into (key.pem must not exist)")
      ->required();
  cmd->add_option("--name", o->name, "Node name, the certificate CN (default: the host name)");
  cmd->callback([o, &exit_code] {
    const Status status = keygen(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
