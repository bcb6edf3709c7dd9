// The cluster trust file: which nodes a process accepts as TLS peers, and how it
// recognises them.
//
//   { "cluster": "demo",
//     "ca": "ca.pem",              // optional; relative to the trust file's directory
//     "nodes": [ {"name": "stage0", "address": "10.0.0.1:7100",
//                 "fingerprint": "sha256:<64 hex>"} ] }
//
// Comments (// and /* */) are allowed.
//
// Fingerprint mode (no "ca"): a peer is a node only if the SHA-256 fingerprint of
// its certificate is that node's "fingerprint" (required on every node).
// CA mode: a peer's certificate must chain to the CA and its CN must be a node's
// name; a node's "fingerprint", when present, pins its certificate as well.
//
// Parsing refuses anything it does not understand (unknown keys, duplicate names or
// fingerprints, malformed addresses) and names the field: a typo must never
// silently weaken trust.
//
// Thread safety: a TrustFile is an immutable value after parsing; share it freely.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace tessera::net {

struct TrustedNode {
  std::string name;         // the node's certificate CN; unique, 1..64 bytes
  std::string address;      // "host:port" (checked with parse_endpoint)
  std::string fingerprint;  // "sha256:" + 64 lowercase hex; empty only in CA mode
};

struct TrustFile {
  std::string cluster;
  std::vector<TrustedNode> nodes;
  std::filesystem::path ca_file;  // empty: fingerprint mode

  bool ca_mode() const { return !ca_file.empty(); }
  // nullptr when no node matches. find_fingerprint never matches "".
  const TrustedNode* find_name(std::string_view name) const;
  const TrustedNode* find_fingerprint(std::string_view fingerprint) const;
};

Result<TrustFile> read_trust_file(const std::filesystem::path& path);
// base_dir: where a relative "ca" path is resolved (the trust file's directory).
Result<TrustFile> parse_trust_file(std::string_view json_text, const std::filesystem::path& base_dir);

// True for "sha256:" + 64 hex digits (either case).
bool is_fingerprint(std::string_view text);

}  // namespace tessera::net
