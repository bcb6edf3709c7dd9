#include "collective/tcp/acceptor.h"

#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <utility>

namespace tessera::collective {
namespace {

constexpr uint8_t kTlsHandshakeRecord = 0x16;  // first byte of a TLS ClientHello
constexpr std::chrono::milliseconds kAcceptRetry{50};

}  // namespace

struct Acceptor::State {
  const net::Identity& identity;
  const net::TrustFile& trust;
  const std::chrono::milliseconds opening_timeout;
  net::WakeFd closing;  // interrupts the accept and every opening

  std::mutex mutex;
  std::condition_variable cv;
  bool closed = false;        // guarded by mutex
  size_t openings = 0;        // guarded by mutex: opening threads still running
  std::deque<Opened> opened;  // guarded by mutex

  State(const net::Identity& identity, const net::TrustFile& trust, std::chrono::milliseconds opening_timeout)
      : identity(identity), trust(trust), opening_timeout(opening_timeout) {}

  Result<Opened> open(net::Socket socket) const {
    const net::Deadline deadline = net::deadline_after(opening_timeout);
    TS_ASSIGN_OR_RETURN(const uint8_t first, socket.peek_byte(deadline, closing.fd()));
    Opened result;
    if (first == kTlsHandshakeRecord) {
      TS_ASSIGN_OR_RETURN(result.control,
                          net::TlsChannel::server(std::move(socket), identity, trust, deadline, closing.fd()));
      return result;
    }
    TS_RETURN_IF_ERROR(socket.read_exact(result.hello, deadline, closing.fd()));
    result.data = std::move(socket);
    return result;
  }

  // Runs on its own thread; the last thing it does is leave `openings`.
  void open_and_post(net::Socket socket) {
    const std::string address = socket.peer_address();
    Result<Opened> result = open(std::move(socket));
    std::lock_guard lock(mutex);
    if (!closed) {
      if (result.ok()) {
        opened.push_back(std::move(result).value());
      } else {
        std::fprintf(stderr, "[collective] refused a connection from %s: %s\n", address.c_str(),
                     result.status().to_string().c_str());
      }
    }
    --openings;
    cv.notify_all();
  }
};

Acceptor::Acceptor(net::Listener& listener, const net::Identity& identity, const net::TrustFile& trust,
                   std::chrono::milliseconds opening_timeout)
    : listener_(listener), state_(std::make_shared<State>(identity, trust, opening_timeout)) {
  accepting_ = std::thread([this] { accept_loop(); });
}

Acceptor::~Acceptor() {
  State& s = *state_;
  s.closing.signal();
  {
    std::lock_guard lock(s.mutex);
    s.closed = true;
    s.cv.notify_all();
  }
  accepting_.join();
  // The openings use identity and trust, which the caller may free after this.
  std::unique_lock lock(s.mutex);
  s.cv.wait(lock, [&s] { return s.openings == 0; });
  s.opened.clear();
}

void Acceptor::accept_loop() {
  State& s = *state_;
  for (;;) {
    {
      std::unique_lock lock(s.mutex);
      s.cv.wait(lock, [&s] { return s.closed || s.openings < kMaxOpenings; });
      if (s.closed) return;
    }
    Result<net::Socket> socket = listener_.accept(net::Clock::now() + std::chrono::hours(24), s.closing.fd());
    if (!socket.ok()) {
      if (net::is_interrupted(socket.status())) return;
      std::fprintf(stderr, "[collective] %s\n", socket.status().to_string().c_str());  // out of fds, say: try again
      std::unique_lock lock(s.mutex);
      s.cv.wait_for(lock, kAcceptRetry, [&s] { return s.closed; });
      continue;
    }
    std::lock_guard lock(s.mutex);
    ++s.openings;
    std::thread([state = state_, socket = std::move(*socket)]() mutable {
      state->open_and_post(std::move(socket));
    }).detach();
  }
}

Result<Acceptor::Opened> Acceptor::next(net::Deadline deadline) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (!s.cv.wait_until(lock, deadline, [&s] { return !s.opened.empty(); })) {
    return Status::disconnected("timed out waiting for a connection to open (" + std::to_string(s.openings) +
                                " still opening)");
  }
  Opened result = std::move(s.opened.front());
  s.opened.pop_front();
  return result;
}

}  // namespace tessera::collective
