// A cluster on one machine: an identity per node (as `tessera keygen` makes) and
// a fingerprint-mode trust file listing them, written into one directory. Used by
// `tessera bench-collective`, the local demo and the multi-process tests; a real
// cluster writes its trust file by hand from each host's keygen output.
//
// Thread safety: pure functions over files.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera::net {

struct LocalNode {
  std::string name;
  std::string address;  // "host:port"; empty: an identity the trust file does not list
};

// Writes dir/<name>/{key.pem,cert.pem} for every node and dir/trust.json.
Status write_local_cluster(const std::filesystem::path& dir, const std::vector<LocalNode>& nodes);

// A port on 127.0.0.1 that was free a moment ago (bind to port 0, then close).
Result<uint16_t> free_loopback_port();

}  // namespace tessera::net
