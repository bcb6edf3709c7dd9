// TlsChannel: mutual TLS 1.3 over a net::Socket, between two nodes of one trust
// file. Every control channel, and every data connection that is not sealed by
// the seal layer alone, runs over one.
//
// Both ends present their Identity and verify the other's certificate inside the
// handshake (trust.h says how a certificate is recognised). An unknown or
// mismatched peer is refused before the channel exists, so no application byte
// from it is ever read. A client learns that the server accepted it before
// client() returns: in TLS 1.3 the client finishes its handshake before the
// server has judged its certificate, so the server confirms with one byte of
// its own (confirm(), kAccepted below) and the client waits for it. A refused
// client therefore fails in client(), not at its first read. The server may
// record the peer between server() and confirm(), so that nothing the client
// does after client() can overtake that record (a group binds a rank's link
// before the rank may open its data connection).
//
// TLS 1.3 only, no session tickets, no resumption: every connection proves both
// identities afresh. export_secret() gives keys bound to this one session (RFC
// 8446 section 7.5), from which the seal layer derives its per-direction keys.
//
// Thread safety: one reader thread (read_exact) and one writer thread (write_all)
// may use a channel at the same time; export_secret(), peer_name() and shutdown()
// may be called from any thread. An internal mutex serializes the SSL_* calls; it
// is never held while waiting in poll, so a reader blocked on a silent peer never
// delays the writer. shutdown() wakes both. Moving, destroying and the static
// constructors need exclusive access.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"
#include "net/identity.h"
#include "net/socket.h"
#include "net/trust.h"

namespace tessera::net {

class TlsChannel {
 public:
  // Connects as a TLS client over a connected socket. Accepts the server only if
  // its certificate belongs to the trust-file node named expected_peer.
  static Result<TlsChannel> client(Socket socket, const Identity& self, const TrustFile& trust,
                                   const std::string& expected_peer, Deadline deadline);
  // Accepts a TLS client over an accepted socket. Requires a certificate of any
  // node of the trust file; peer_name() says which. The client waits until the
  // server calls confirm(); a server that refuses the peer drops the channel.
  static Result<TlsChannel> server(Socket socket, const Identity& self, const TrustFile& trust, Deadline deadline,
                                   int wake_fd = -1);
  // Server side, once, after server(): lets the client's client() return.
  Status confirm(Deadline deadline);

  TlsChannel(TlsChannel&& other) noexcept;
  TlsChannel& operator=(TlsChannel&& other) noexcept;
  TlsChannel(const TlsChannel&) = delete;
  TlsChannel& operator=(const TlsChannel&) = delete;
  ~TlsChannel();

  // The trust-file name of the peer.
  const std::string& peer_name() const;
  // "a.b.c.d:port" of the peer, for messages.
  const std::string& peer_address() const;

  // Writes all bytes or fails (peer gone, deadline, wake fd): kDisconnected.
  Status write_all(std::span<const uint8_t> bytes, Deadline deadline, int wake_fd = -1);
  // Reads exactly bytes.size() bytes or fails: kDisconnected, naming how many
  // bytes arrived when the peer closed early (Cause::kClosedCleanly when it sent
  // close_notify before the first byte).
  Status read_exact(std::span<uint8_t> bytes, Deadline deadline, int wake_fd = -1);
  // Sends close_notify if it can without waiting, then shuts the socket down,
  // which wakes a blocked reader and writer with an error. Idempotent.
  void shutdown();

  // 32 bytes of keying material bound to this session, the label and context
  // (SSL_export_keying_material with a context); equal on both ends.
  Result<std::array<uint8_t, 32>> export_secret(std::string_view label, std::span<const uint8_t> context) const;

 private:
  struct Impl;
  explicit TlsChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::net
