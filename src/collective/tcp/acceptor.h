// Acceptor: the connections that arrive at a group's listener while the group
// sets up, each opened on its own thread, so that a silent or slow connection
// holds only itself, never the ranks that come after it.
//
// Opening a connection is reading its first byte, then either the TLS handshake
// of a control channel (not yet confirmed: the group binds the rank's link first,
// tls.h) or the fixed-size hello of a data connection (seal/hello.h). It may
// take at most `opening_timeout`. At most kMaxOpenings run at once; further
// connections wait in the listen backlog until one ends.
//
// The group's setup thread calls next() and judges each opened connection: only
// it touches the group's links, in the order the connections finished opening.
// Destroying the Acceptor interrupts the openings still running and drops what
// was not taken.
#pragma once

#include <array>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "core/status.h"
#include "net/identity.h"
#include "net/socket.h"
#include "net/tls.h"
#include "net/trust.h"
#include "seal/hello.h"

namespace tessera::collective {

class Acceptor {
 public:
  static constexpr size_t kMaxOpenings = 32;

  // A connection that finished opening: a control channel or a data connection.
  struct Opened {
    std::optional<net::TlsChannel> control;  // a TLS client: confirm() it, or drop it to refuse
    net::Socket data;                        // otherwise a data connection, whose hello follows
    std::array<uint8_t, seal::kHelloBytes> hello{};
  };

  // `listener`, `identity` and `trust` must outlive the Acceptor.
  Acceptor(net::Listener& listener, const net::Identity& identity, const net::TrustFile& trust,
           std::chrono::milliseconds opening_timeout);
  ~Acceptor();
  Acceptor(const Acceptor&) = delete;
  Acceptor& operator=(const Acceptor&) = delete;

  // The next connection that opened, accepting new ones meanwhile. Connections
  // that failed to open are reported on stderr and skipped. Fails at `deadline`.
  Result<Opened> next(net::Deadline deadline);

 private:
  struct State;
  void accept_loop();

  net::Listener& listener_;
  std::shared_ptr<State> state_;  // shared with the opening threads, which may outlive a wait
  std::thread accepting_;
};

}  // namespace tessera::collective
