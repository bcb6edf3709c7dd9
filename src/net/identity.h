// A node's long-term identity: an Ed25519 key and its X.509 certificate, kept as
// DIR/key.pem and DIR/cert.pem. `tessera keygen` writes them; every process that
// speaks TLS to its peers loads them. Peers recognise a node by the SHA-256
// fingerprint of its DER certificate (fingerprint mode) or by a CA signature and
// the certificate's CN (CA mode); see trust.h.
//
// Thread safety: free functions, safe to call from any thread. An Identity is an
// immutable value after loading: copies share the key and certificate, which
// OpenSSL allows to be used by several connections at once.
#pragma once

#include <openssl/types.h>

#include <filesystem>
#include <memory>
#include <string>

#include "core/status.h"

namespace tessera::net {

struct Identity {
  std::string name;  // the certificate's subject CN
  std::shared_ptr<EVP_PKEY> key;
  std::shared_ptr<X509> cert;
  std::string fingerprint;  // "sha256:" + 64 lowercase hex digits of the DER certificate
};

// Makes an Ed25519 key and a self-signed X.509 v3 certificate (CN=name, valid for
// ten years, random serial) and writes dir/key.pem (mode 0600) and dir/cert.pem,
// creating dir if missing. Refuses to overwrite an existing key.pem: a node's
// identity is replaced on purpose (delete the file), never by accident.
Status write_identity(const std::filesystem::path& dir, const std::string& name);

// Loads dir/key.pem and dir/cert.pem (the first certificate in it) and checks that
// the key belongs to the certificate. Errors name the file and what is wrong.
Result<Identity> load_identity(const std::filesystem::path& dir);

// "sha256:" + lowercase hex of SHA-256 over the DER encoding of cert.
std::string certificate_fingerprint(X509* cert);

// The subject CN of cert, or "" when it has none or more than one.
std::string certificate_common_name(X509* cert);

}  // namespace tessera::net
