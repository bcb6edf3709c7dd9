// FrameChannel: wire frames (src/wire/frame.h) over an authenticated connection
// between a pipeline coordinator and its stages, or between adjacent stages.
// Each read is bounded by the receiver's FrameLimits before a byte of header or
// payload is read: the 32-byte prefix is decoded and checked first, then exactly
// header_bytes + payload_bytes more are read into the channel's own buffer.
//
// Frames travel inside the TlsChannel (TLS 1.3, AES-256-GCM records: sealed)
// or, after use_plain() (--plain, for trusted links), on a plain TCP connection
// that a sealed hello bound to this TLS session (bind_plain / accept_plain);
// the TLS connection then stays open and idle, and the peer stays authenticated.
//
// Thread safety: one reader thread and any number of writers (write_frame
// serializes them).
#pragma once

#include <array>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "core/status.h"
#include "net/identity.h"
#include "net/socket.h"
#include "net/tls.h"
#include "net/trust.h"
#include "wire/frame.h"

namespace tessera::pipeline {

class FrameChannel {
 public:
  // A frame whose prefix arrived must be complete within body_timeout (a peer
  // that stops mid-frame is cut off, however long the wait for a prefix may be).
  explicit FrameChannel(net::TlsChannel tls, std::chrono::milliseconds body_timeout = std::chrono::seconds(30))
      : tls_(std::make_unique<net::TlsChannel>(std::move(tls))), body_timeout_(body_timeout) {}

  const std::string& peer_name() const { return tls_->peer_name(); }
  net::TlsChannel& tls() { return *tls_; }

  // 32 bytes bound to this TLS session, for the hello of a plain data connection.
  Result<std::array<uint8_t, 32>> binding_secret() const;
  // From now on, frames travel on `data` (called by the reader thread; writers
  // are serialized with the switch).
  void use_plain(net::Socket data);

  Status write_frame(std::span<const uint8_t> frame, net::Deadline deadline);
  // Reads one frame; the returned Frame borrows this channel's buffer until the
  // next read. `deadline` bounds the wait for its prefix; wake_fd interrupts.
  Result<wire::Frame> read_frame(const wire::FrameLimits& limits, net::Deadline deadline, int wake_fd = -1);
  void shutdown();

 private:
  std::unique_ptr<net::TlsChannel> tls_;
  const std::chrono::milliseconds body_timeout_;
  std::mutex write_mutex_;
  net::Socket plain_;            // guarded by write_mutex_ for writers; valid after use_plain()
  std::vector<uint8_t> buffer_;  // reader thread only
};

// Connects to trust-file node `peer` (retrying while it is not listening yet)
// and completes mutual TLS; also returns the endpoint, for bind_plain.
struct ConnectedChannel {
  std::unique_ptr<FrameChannel> channel;
  net::Endpoint endpoint;
};
Result<ConnectedChannel> connect_frame_channel(const net::Identity& self, const net::TrustFile& trust,
                                               const std::string& peer, net::Deadline deadline,
                                               std::chrono::milliseconds body_timeout = std::chrono::seconds(30));

// --plain, the connecting side: asks the peer (over TLS) to expect a data
// connection for binding id `binding`, opens it to `endpoint`, sends the sealed
// hello, and switches `channel` to it.
Status bind_plain(FrameChannel& channel, const net::Endpoint& endpoint, net::Deadline deadline);
// The control message that announces it: {"type": "plain", "binding": id}.
inline constexpr const char* kPlainMessage = "plain";

}  // namespace tessera::pipeline
