// TCP connections with a deadline on every wait: the transport under TLS control
// channels and the data plane of collectives and pipeline stages.
//
// Every blocking call takes a Deadline and optionally a wake fd (an eventfd or
// pipe that becomes readable when the caller's group has failed): a silent peer
// costs at most the deadline, and a failure elsewhere interrupts the wait at once.
// Sockets are non-blocking underneath and wait in poll(2); Asio's synchronous
// calls cannot be given a timeout, and these waits sit on the latency path of
// every collective, so this layer is a thin RAII wrapper over the socket API.
//
// Thread safety: a Socket may have one reader and one writer thread at a time;
// everything else needs external synchronization.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace tessera::net {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadline_after(std::chrono::milliseconds ms) { return Clock::now() + ms; }

// "host:port", "[v6 address]:port"; host may be a name (resolved at connect/bind).
struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::string to_string() const;
};
Result<Endpoint> parse_endpoint(std::string_view text);

// Raised by waits that were interrupted by the wake fd (ErrorKind::kDisconnected,
// Cause::kInterrupted): the caller looks at its own failure latch for the reason.
inline bool is_interrupted(const Status& status) { return status.cause() == Cause::kInterrupted; }
// A read that found the connection closed in order before its first byte
// (Cause::kClosedCleanly): EOF on a Socket, close_notify on a TlsChannel.
inline bool is_closed_cleanly(const Status& status) { return status.cause() == Cause::kClosedCleanly; }
// A wait that passed its deadline (Cause::kTimedOut).
inline bool is_timed_out(const Status& status) { return status.cause() == Cause::kTimedOut; }

class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd);  // takes ownership; makes it non-blocking, TCP_NODELAY
  ~Socket();
  Socket(Socket&& other) noexcept;
  Socket& operator=(Socket&& other) noexcept;
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  static Result<Socket> connect(const Endpoint& endpoint, Deadline deadline);
  // The same, retrying every 20 ms until the deadline while nothing listens yet
  // (a peer process that is still starting).
  static Result<Socket> connect_retrying(const Endpoint& endpoint, Deadline deadline);

  // Writes all bytes or fails (peer closed, reset, deadline, wake fd).
  Status write_all(std::span<const uint8_t> bytes, Deadline deadline, int wake_fd = -1);
  // Reads exactly bytes.size() bytes or fails; EOF before that is kDisconnected
  // naming how many bytes arrived (Cause::kClosedCleanly when none did).
  Status read_exact(std::span<uint8_t> bytes, Deadline deadline, int wake_fd = -1);
  // The next byte without consuming it (MSG_PEEK): tells a TLS ClientHello from
  // a data-connection hello on a shared listener.
  Result<uint8_t> peek_byte(Deadline deadline, int wake_fd = -1);
  // Waits until the socket is readable (or writable); used by the TLS layer.
  Status wait_readable(Deadline deadline, int wake_fd = -1) const;
  Status wait_writable(Deadline deadline, int wake_fd = -1) const;

  // Wakes the socket's blocked reader and writer with an error (shutdown(2)).
  void shutdown();
  bool valid() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  std::string peer_address() const;  // "a.b.c.d:port", for messages

 private:
  int fd_ = -1;
};

class Listener {
 public:
  Listener() = default;
  ~Listener();
  Listener(Listener&& other) noexcept;
  Listener& operator=(Listener&& other) noexcept;
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // Port 0 picks a free port (see port()).
  static Result<Listener> bind(const Endpoint& endpoint);
  Result<Socket> accept(Deadline deadline, int wake_fd = -1);
  uint16_t port() const { return port_; }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

// A wake fd: readable after signal(), until the WakeFd is destroyed. Used as the
// "this group has failed" interrupt for every wait of a group.
class WakeFd {
 public:
  WakeFd();
  ~WakeFd();
  WakeFd(const WakeFd&) = delete;
  WakeFd& operator=(const WakeFd&) = delete;
  void signal();
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace tessera::net
