#include "net/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "core/check.h"
#include "net/openssl_errors.h"

namespace tessera::net {
namespace {

// The server's confirmation that it accepted the client (see tls.h).
constexpr uint8_t kAccepted = 0x01;
// Peers are a leaf and at most a CA or two; nothing legitimate is deeper.
constexpr int kMaxChainDepth = 4;

struct SslCtxFree {
  void operator()(SSL_CTX* ctx) const { SSL_CTX_free(ctx); }
};
struct SslFree {
  void operator()(SSL* ssl) const { SSL_free(ssl); }
};

enum class Role { kClient, kServer };

// ---- A BIO over the socket's fd ----
// OpenSSL's socket BIO writes with write(2), which raises SIGPIPE when the peer
// has gone; a library must not kill its process for that, so this BIO sends with
// MSG_NOSIGNAL. It never waits: the channel waits in Socket::wait_* instead.

struct SocketBioState {
  int fd = -1;
  bool eof = false;    // recv returned 0
  int last_errno = 0;  // of the last failed send/recv
};

int socket_bio_write(BIO* bio, const char* data, size_t length, size_t* written) {
  auto* state = static_cast<SocketBioState*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  for (;;) {
    ssize_t n = ::send(state->fd, data, length, MSG_NOSIGNAL);
    if (n >= 0) {
      *written = static_cast<size_t>(n);
      return 1;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      BIO_set_retry_write(bio);
    } else {
      state->last_errno = errno;
    }
    return 0;
  }
}

int socket_bio_read(BIO* bio, char* data, size_t length, size_t* read) {
  auto* state = static_cast<SocketBioState*>(BIO_get_data(bio));
  BIO_clear_retry_flags(bio);
  for (;;) {
    ssize_t n = ::recv(state->fd, data, length, 0);
    if (n > 0) {
      *read = static_cast<size_t>(n);
      return 1;
    }
    if (n == 0) {
      state->eof = true;
      return 0;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      BIO_set_retry_read(bio);
    } else {
      state->last_errno = errno;
    }
    return 0;
  }
}

long socket_bio_ctrl(BIO* bio, int command, long /*num*/, void* /*ptr*/) {
  switch (command) {
    case BIO_CTRL_FLUSH: return 1;  // nothing is buffered here
    case BIO_CTRL_EOF: return static_cast<SocketBioState*>(BIO_get_data(bio))->eof ? 1 : 0;
    default: return 0;
  }
}

const BIO_METHOD* socket_bio_method() {
  static const BIO_METHOD* method = [] {
    BIO_METHOD* m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "tessera socket");
    TS_CHECK(m != nullptr, "BIO_meth_new failed");
    BIO_meth_set_write_ex(m, socket_bio_write);
    BIO_meth_set_read_ex(m, socket_bio_read);
    BIO_meth_set_ctrl(m, socket_bio_ctrl);
    return m;
  }();
  return method;
}

// ---- Peer verification ----

// What verify_peer needs during the handshake; reached from the SSL's ex data.
struct PeerCheck {
  Role role = Role::kClient;
  const TrustFile* trust = nullptr;  // valid only during the handshake
  std::string expected_peer;         // client only
  std::string peer_address;
  std::string accepted_name;  // the trust-file node verify_peer accepted
  std::string refusal;        // why verify_peer refused the peer
};

int peer_check_index() {
  static const int index = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
  return index;
}

// Decides whether leaf is an acceptable peer; returns the trust-file node name.
Result<std::string> judge_peer(const PeerCheck& check, int preverify_ok, X509_STORE_CTX* store, X509* leaf) {
  const TrustFile& trust = *check.trust;
  const std::string who = "TLS peer " + check.peer_address;
  const std::string fingerprint = certificate_fingerprint(leaf);
  if (!trust.ca_mode()) {
    // The pin is the certificate itself, so the chain errors OpenSSL reports for
    // a self-signed leaf (no issuer, not a CA) say nothing here, and neither do
    // its validity dates: a node is revoked by taking it out of the trust file.
    const TrustedNode* node = trust.find_fingerprint(fingerprint);
    if (node == nullptr) {
      return Status::invalid_input(who + " presented certificate " + fingerprint + " which is not in the trust file");
    }
    if (check.role == Role::kClient && node->name != check.expected_peer) {
      return Status::invalid_input(who + " presented the certificate of node '" + node->name + "' (" + fingerprint +
                                   "), expected node '" + check.expected_peer + "'");
    }
    return node->name;
  }

  if (!preverify_ok) {
    const int error = X509_STORE_CTX_get_error(store);
    return Status::invalid_input(who + " presented certificate " + fingerprint +
                                 " which does not verify against the CA " + trust.ca_file.string() + ": " +
                                 X509_verify_cert_error_string(error) + " (depth " +
                                 std::to_string(X509_STORE_CTX_get_error_depth(store)) + ")");
  }
  const std::string cn = certificate_common_name(leaf);
  const TrustedNode* node = trust.find_name(cn);
  if (node == nullptr) {
    return Status::invalid_input(who + " presented a CA-signed certificate " + fingerprint + " for CN '" + cn +
                                 "' which is not a node of the trust file");
  }
  if (check.role == Role::kClient && cn != check.expected_peer) {
    return Status::invalid_input(who + " presented a certificate for node '" + cn + "', expected node '" +
                                 check.expected_peer + "'");
  }
  if (!node->fingerprint.empty() && node->fingerprint != fingerprint) {
    return Status::invalid_input(who + " presented certificate " + fingerprint + " for node '" + cn +
                                 "', whose pinned fingerprint is " + node->fingerprint);
  }
  return node->name;
}

// SSL_CTX_set_verify callback: runs inside the handshake, once per certificate
// of the peer's chain and once per error; every call judges the leaf.
int verify_peer(int preverify_ok, X509_STORE_CTX* store) {
  auto* ssl = static_cast<SSL*>(X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx()));
  auto* check = ssl == nullptr ? nullptr : static_cast<PeerCheck*>(SSL_get_ex_data(ssl, peer_check_index()));
  X509* leaf = X509_STORE_CTX_get0_cert(store);
  if (check == nullptr || check->trust == nullptr || leaf == nullptr) return 0;
  Result<std::string> verdict = judge_peer(*check, preverify_ok, store, leaf);
  if (!verdict.ok()) {
    if (check->refusal.empty()) check->refusal = verdict.status().message();
    check->accepted_name.clear();
    // A chain error keeps OpenSSL's code (and so its alert); a refusal of ours is
    // a "bad certificate".
    if (preverify_ok || !check->trust->ca_mode()) X509_STORE_CTX_set_error(store, X509_V_ERR_CERT_REJECTED);
    return 0;
  }
  check->accepted_name = std::move(verdict).value();
  return 1;
}

Result<std::unique_ptr<SSL_CTX, SslCtxFree>> make_context(Role role, const Identity& self, const TrustFile& trust) {
  if (!self.key || !self.cert) return Status::invalid_input("TLS: the node identity has no key or certificate");
  ERR_clear_error();
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx(
      SSL_CTX_new(role == Role::kClient ? TLS_client_method() : TLS_server_method()));
  if (!ctx) return Status::internal("SSL_CTX_new: " + openssl_errors());
  SSL_CTX* c = ctx.get();
  if (SSL_CTX_set_min_proto_version(c, TLS1_3_VERSION) != 1 || SSL_CTX_set_max_proto_version(c, TLS1_3_VERSION) != 1 ||
      SSL_CTX_set_num_tickets(c, 0) != 1 ||
      // One suite: AES-256-GCM records, the AEAD the rest of tessera uses.
      SSL_CTX_set_ciphersuites(c, "TLS_AES_256_GCM_SHA384") != 1) {
    return Status::internal("TLS context settings: " + openssl_errors());
  }
  SSL_CTX_set_options(c, SSL_OP_NO_TICKET);
  SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_OFF);
  SSL_CTX_set_mode(c, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate(c, self.cert.get()) != 1 || SSL_CTX_use_PrivateKey(c, self.key.get()) != 1 ||
      SSL_CTX_check_private_key(c) != 1) {
    return Status::invalid_input("TLS: cannot use the identity of node '" + self.name + "': " + openssl_errors());
  }
  if (trust.ca_mode() && SSL_CTX_load_verify_file(c, trust.ca_file.c_str()) != 1) {
    return Status::invalid_input(trust.ca_file.string() + ": cannot load the cluster CA: " + openssl_errors());
  }
  SSL_CTX_set_verify(c, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, verify_peer);
  SSL_CTX_set_verify_depth(c, kMaxChainDepth);
  return ctx;
}

}  // namespace

struct TlsChannel::Impl {
  Socket socket;
  std::string peer_address;
  SocketBioState bio_state;
  std::unique_ptr<SSL_CTX, SslCtxFree> ctx;
  std::unique_ptr<SSL, SslFree> ssl;  // freed before ctx
  PeerCheck check;
  std::string peer_name;  // immutable after the handshake

  std::mutex mutex;                 // serializes every SSL_* call on ssl after the handshake
  bool fatal = false;               // guarded by mutex: OpenSSL saw a fatal error; no SSL_shutdown
  std::atomic<bool> closed{false};  // shutdown() was called

  // Why an SSL call failed, for messages; call right after it, in its thread.
  std::string describe(int ssl_error) {
    switch (ssl_error) {
      case SSL_ERROR_ZERO_RETURN: return "the peer closed the TLS connection";
      case SSL_ERROR_SYSCALL: {
        std::string errors = openssl_errors();
        if (bio_state.last_errno != 0) return std::strerror(bio_state.last_errno);
        return errors.empty() ? "the connection closed" : errors;
      }
      case SSL_ERROR_SSL: return openssl_errors();
      default: return "SSL error " + std::to_string(ssl_error) + " " + openssl_errors();
    }
  }

  Status wait(int ssl_error, Deadline deadline, int wake_fd) {
    if (ssl_error == SSL_ERROR_WANT_READ) return socket.wait_readable(deadline, wake_fd);
    return socket.wait_writable(deadline, wake_fd);
  }

  Status closed_status() const { return Status::disconnected("TLS channel to " + peer_address + " was shut down"); }

  Status handshake(Deadline deadline, int wake_fd) {
    for (;;) {
      ERR_clear_error();
      const int rc = SSL_do_handshake(ssl.get());
      if (rc == 1) return {};
      const int error = SSL_get_error(ssl.get(), rc);
      if (error == SSL_ERROR_WANT_READ || error == SSL_ERROR_WANT_WRITE) {
        Status waited = wait(error, deadline, wake_fd);
        if (!waited.ok()) return waited.with_context("TLS handshake");
        continue;
      }
      if (!check.refusal.empty()) return Status::invalid_input(check.refusal);
      return Status::disconnected("TLS handshake with " + peer_address + " failed: " + describe(error));
    }
  }

  Status write_all(std::span<const uint8_t> bytes, Deadline deadline, int wake_fd) {
    auto step = [&](size_t done, size_t* moved) {
      return SSL_write_ex(ssl.get(), bytes.data() + done, bytes.size() - done, moved);
    };
    return transfer(bytes.size(), deadline, wake_fd, step, [&](int error, size_t done) {
      fatal = true;
      return Status::disconnected("TLS send to " + peer_address + " failed after " + std::to_string(done) + " of " +
                                  std::to_string(bytes.size()) + " bytes: " + describe(error));
    });
  }

  Status read_exact(std::span<uint8_t> bytes, Deadline deadline, int wake_fd) {
    auto step = [&](size_t done, size_t* moved) {
      return SSL_read_ex(ssl.get(), bytes.data() + done, bytes.size() - done, moved);
    };
    return transfer(bytes.size(), deadline, wake_fd, step, [&](int error, size_t done) {
      fatal = fatal || error != SSL_ERROR_ZERO_RETURN;
      const std::string counts = std::to_string(done) + " of " + std::to_string(bytes.size()) + " bytes";
      if (error == SSL_ERROR_ZERO_RETURN) {
        return Status::disconnected("TLS peer " + peer_address + " closed the connection after " + counts,
                                    done == 0 ? Cause::kClosedCleanly : Cause::kNone);
      }
      return Status::disconnected("TLS receive from " + peer_address + " failed after " + counts + ": " +
                                  describe(error));
    });
  }

  // Calls step(done, &moved) (one SSL_write_ex or SSL_read_ex, under the mutex)
  // until `size` bytes have moved, waiting whenever OpenSSL wants the socket.
  // A fatal error goes to failed(error, done), under the mutex, unless the
  // channel was closed meanwhile.
  template <typename Step, typename Failed>
  Status transfer(size_t size, Deadline deadline, int wake_fd, Step step, Failed failed) {
    size_t done = 0;
    while (done < size) {
      if (closed) return closed_status();
      int error = SSL_ERROR_NONE;
      {
        std::lock_guard<std::mutex> lock(mutex);
        ERR_clear_error();
        size_t moved = 0;
        const int rc = step(done, &moved);
        if (rc == 1) {
          done += moved;
          continue;
        }
        error = SSL_get_error(ssl.get(), rc);
        if (error != SSL_ERROR_WANT_READ && error != SSL_ERROR_WANT_WRITE) {
          Status status = failed(error, done);
          return closed ? closed_status() : status;
        }
      }
      TS_RETURN_IF_ERROR(wait(error, deadline, wake_fd));
    }
    return {};
  }

  void shutdown() {
    if (closed.exchange(true)) return;
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (ssl && !fatal && SSL_is_init_finished(ssl.get())) {
        ERR_clear_error();
        SSL_shutdown(ssl.get());  // sends close_notify if the socket takes it now; never waits
        ERR_clear_error();
      }
    }
    socket.shutdown();
  }

  static Result<std::unique_ptr<Impl>> start(Role role, Socket socket, const Identity& self, const TrustFile& trust,
                                             const std::string& expected_peer) {
    if (!socket.valid()) return Status::invalid_input("TLS: the socket is not connected");
    auto impl = std::make_unique<Impl>();
    impl->socket = std::move(socket);
    impl->peer_address = impl->socket.peer_address();
    impl->bio_state.fd = impl->socket.fd();
    TS_ASSIGN_OR_RETURN(impl->ctx, make_context(role, self, trust));
    impl->ssl.reset(SSL_new(impl->ctx.get()));
    BIO* bio = BIO_new(socket_bio_method());
    if (!impl->ssl || bio == nullptr) {
      BIO_free(bio);
      return Status::internal("SSL_new: " + openssl_errors());
    }
    BIO_set_data(bio, &impl->bio_state);
    BIO_set_init(bio, 1);
    SSL_set_bio(impl->ssl.get(), bio, bio);  // the SSL owns the BIO
    impl->check.role = role;
    impl->check.trust = &trust;
    impl->check.expected_peer = expected_peer;
    impl->check.peer_address = impl->peer_address;
    if (SSL_set_ex_data(impl->ssl.get(), peer_check_index(), &impl->check) != 1) {
      return Status::internal("SSL_set_ex_data: " + openssl_errors());
    }
    if (role == Role::kClient) {
      SSL_set_connect_state(impl->ssl.get());
    } else {
      SSL_set_accept_state(impl->ssl.get());
    }
    return impl;
  }

  // After a handshake: the verify callback must have named the peer.
  Status finish() {
    check.trust = nullptr;
    if (check.accepted_name.empty()) {
      return Status::internal("TLS handshake with " + peer_address + " completed without verifying the peer");
    }
    peer_name = check.accepted_name;
    return {};
  }
};

Result<TlsChannel> TlsChannel::client(Socket socket, const Identity& self, const TrustFile& trust,
                                      const std::string& expected_peer, Deadline deadline) {
  if (trust.find_name(expected_peer) == nullptr) {
    return Status::invalid_input("TLS: expected peer '" + expected_peer + "' is not a node of the trust file");
  }
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl,
                      Impl::start(Role::kClient, std::move(socket), self, trust, expected_peer));
  TS_RETURN_IF_ERROR(impl->handshake(deadline, -1));
  TS_RETURN_IF_ERROR(impl->finish());
  uint8_t accepted = 0;
  Status confirmed = impl->read_exact({&accepted, 1}, deadline, -1);
  if (!confirmed.ok()) {
    return Status::disconnected("TLS server " + impl->peer_address + " (node '" + expected_peer +
                                "') did not accept this node: " + confirmed.message());
  }
  if (accepted != kAccepted) {
    return Status::invalid_input("TLS server " + impl->peer_address + " sent " + std::to_string(accepted) +
                                 " instead of its acceptance byte");
  }
  return TlsChannel(std::move(impl));
}

Result<TlsChannel> TlsChannel::server(Socket socket, const Identity& self, const TrustFile& trust, Deadline deadline,
                                      int wake_fd) {
  TS_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, Impl::start(Role::kServer, std::move(socket), self, trust, ""));
  TS_RETURN_IF_ERROR(impl->handshake(deadline, wake_fd));
  TS_RETURN_IF_ERROR(impl->finish());
  return TlsChannel(std::move(impl));
}

Status TlsChannel::confirm(Deadline deadline) {
  const uint8_t accepted = kAccepted;
  return write_all({&accepted, 1}, deadline);
}

TlsChannel::TlsChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TlsChannel::TlsChannel(TlsChannel&& other) noexcept = default;
TlsChannel& TlsChannel::operator=(TlsChannel&& other) noexcept {
  if (this != &other) {
    if (impl_) impl_->shutdown();
    impl_ = std::move(other.impl_);
  }
  return *this;
}

TlsChannel::~TlsChannel() {
  if (impl_) impl_->shutdown();
}

const std::string& TlsChannel::peer_name() const {
  TS_CHECK(impl_ != nullptr, "TlsChannel used after move");
  return impl_->peer_name;
}

const std::string& TlsChannel::peer_address() const {
  TS_CHECK(impl_ != nullptr, "TlsChannel used after move");
  return impl_->peer_address;
}

Status TlsChannel::write_all(std::span<const uint8_t> bytes, Deadline deadline, int wake_fd) {
  TS_CHECK(impl_ != nullptr, "TlsChannel used after move");
  return impl_->write_all(bytes, deadline, wake_fd);
}

Status TlsChannel::read_exact(std::span<uint8_t> bytes, Deadline deadline, int wake_fd) {
  TS_CHECK(impl_ != nullptr, "TlsChannel used after move");
  return impl_->read_exact(bytes, deadline, wake_fd);
}

void TlsChannel::shutdown() {
  if (impl_) impl_->shutdown();
}

Result<std::array<uint8_t, 32>> TlsChannel::export_secret(std::string_view label,
                                                          std::span<const uint8_t> context) const {
  TS_CHECK(impl_ != nullptr, "TlsChannel used after move");
  std::array<uint8_t, 32> secret{};
  std::lock_guard<std::mutex> lock(impl_->mutex);
  ERR_clear_error();
  if (SSL_export_keying_material(impl_->ssl.get(), secret.data(), secret.size(), label.data(), label.size(),
                                 context.data(), context.size(), 1) != 1) {
    return Status::internal("TLS exporter with " + impl_->peer_address + ": " + openssl_errors());
  }
  return secret;
}

}  // namespace tessera::net
