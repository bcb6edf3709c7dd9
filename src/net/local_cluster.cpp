#include "net/local_cluster.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "net/identity.h"
#include "net/socket.h"

namespace tessera::net {

Status write_local_cluster(const std::filesystem::path& dir, const std::vector<LocalNode>& nodes) {
  nlohmann::json trust = {{"cluster", dir.filename().string()}, {"nodes", nlohmann::json::array()}};
  for (const LocalNode& node : nodes) {
    TS_RETURN_IF_ERROR(write_identity(dir / node.name, node.name));
    if (node.address.empty()) continue;
    TS_ASSIGN_OR_RETURN(const Identity identity, load_identity(dir / node.name));
    trust["nodes"].push_back({{"name", node.name}, {"address", node.address}, {"fingerprint", identity.fingerprint}});
  }
  const std::filesystem::path path = dir / "trust.json";
  std::ofstream out(path);
  out << trust.dump(2) << "\n";
  if (!out) return Status::invalid_input(path.string() + ": cannot write");
  return {};
}

Result<uint16_t> free_loopback_port() {
  TS_ASSIGN_OR_RETURN(Listener listener, Listener::bind({"127.0.0.1", 0}));
  return listener.port();
}

}  // namespace tessera::net
