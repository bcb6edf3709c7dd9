#include "net/socket.h"

#include "core/check.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <thread>

namespace tessera::net {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

void make_non_blocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags >= 0) fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

int remaining_ms(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return left > 1'000'000 ? 1'000'000 : static_cast<int>(left) + 1;
}

// Waits for `events` on fd, or the wake fd, or the deadline.
Status wait_for(int fd, short events, Deadline deadline, int wake_fd, std::string_view what) {
  for (;;) {
    pollfd fds[2] = {{fd, events, 0}, {wake_fd, POLLIN, 0}};
    int timeout = remaining_ms(deadline);
    int n = ::poll(fds, wake_fd >= 0 ? 2 : 1, timeout);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::internal("poll: " + errno_text(errno));
    }
    if (wake_fd >= 0 && (fds[1].revents & POLLIN)) return Status::disconnected("interrupted", Cause::kInterrupted);
    if (n > 0) return {};  // ready, or an error the following syscall reports
    if (Clock::now() >= deadline)
      return Status::disconnected("timed out waiting to " + std::string(what), Cause::kTimedOut);
  }
}

struct AddrInfoDeleter {
  void operator()(addrinfo* info) const { freeaddrinfo(info); }
};

Result<std::unique_ptr<addrinfo, AddrInfoDeleter>> resolve(const Endpoint& endpoint, bool passive) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = passive ? AI_PASSIVE : 0;
  addrinfo* out = nullptr;
  std::string port = std::to_string(endpoint.port);
  int rc = getaddrinfo(endpoint.host.empty() ? nullptr : endpoint.host.c_str(), port.c_str(), &hints, &out);
  if (rc != 0) return Status::invalid_input("cannot resolve " + endpoint.to_string() + ": " + gai_strerror(rc));
  return std::unique_ptr<addrinfo, AddrInfoDeleter>(out);
}

std::string sockaddr_text(const sockaddr_storage& addr) {
  char host[INET6_ADDRSTRLEN] = "?";
  uint16_t port = 0;
  if (addr.ss_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(&addr);
    inet_ntop(AF_INET, &in->sin_addr, host, sizeof host);
    port = ntohs(in->sin_port);
  }
  if (addr.ss_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(&addr);
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
  }
  return Endpoint{host, port}.to_string();
}

}  // namespace

std::string Endpoint::to_string() const {
  std::string out;
  bool v6 = host.find(':') != std::string::npos;
  if (v6) out += '[';
  out += host;
  if (v6) out += ']';
  out += ':';
  out += std::to_string(port);
  return out;
}

Result<Endpoint> parse_endpoint(std::string_view text) {
  size_t colon = text.rfind(':');
  if (colon == std::string_view::npos)
    return Status::invalid_input("address '" + std::string(text) + "': expected host:port");
  std::string_view host = text.substr(0, colon);
  std::string_view port_text = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  unsigned port = 0;
  auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port > 65535 || port_text.empty()) {
    return Status::invalid_input("address '" + std::string(text) + "': port must be 0..65535");
  }
  if (host.empty()) return Status::invalid_input("address '" + std::string(text) + "': empty host");
  return Endpoint{std::string(host), static_cast<uint16_t>(port)};
}

Socket::Socket(int fd) : fd_(fd) {
  make_non_blocking(fd_);
  int one = 1;
  setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Socket::~Socket() {
  if (fd_ >= 0) ::close(fd_);
}

Socket::Socket(Socket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }

Socket& Socket::operator=(Socket&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

Result<Socket> Socket::connect(const Endpoint& endpoint, Deadline deadline) {
  TS_ASSIGN_OR_RETURN(auto info, resolve(endpoint, false));
  Status last = Status::disconnected("no address for " + endpoint.to_string());
  for (addrinfo* ai = info.get(); ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    Socket socket(fd);
    if (::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return socket;
    if (errno != EINPROGRESS) {
      last = Status::disconnected("connect to " + endpoint.to_string() + ": " + errno_text(errno));
      continue;
    }
    Status ready = wait_for(fd, POLLOUT, deadline, -1, "connect to " + endpoint.to_string());
    if (!ready.ok()) return ready;
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err == 0) return socket;
    last = Status::disconnected("connect to " + endpoint.to_string() + ": " + errno_text(err));
  }
  return last;
}

Result<Socket> Socket::connect_retrying(const Endpoint& endpoint, Deadline deadline) {
  constexpr auto kRetryInterval = std::chrono::milliseconds(20);
  for (;;) {
    Result<Socket> socket = connect(endpoint, deadline);
    if (socket.ok() || Clock::now() + kRetryInterval >= deadline) return socket;
    std::this_thread::sleep_for(kRetryInterval);
  }
}

Status Socket::write_all(std::span<const uint8_t> bytes, Deadline deadline, int wake_fd) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      TS_RETURN_IF_ERROR(wait_for(fd_, POLLOUT, deadline, wake_fd, "send to " + peer_address()));
      continue;
    }
    return Status::disconnected("send to " + peer_address() + ": " + errno_text(errno));
  }
  return {};
}

Status Socket::read_exact(std::span<uint8_t> bytes, Deadline deadline, int wake_fd) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::recv(fd_, bytes.data() + done, bytes.size() - done, 0);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) {
      return Status::disconnected("peer " + peer_address() + " closed the connection after " + std::to_string(done) +
                                      " of " + std::to_string(bytes.size()) + " bytes",
                                  done == 0 ? Cause::kClosedCleanly : Cause::kNone);
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      TS_RETURN_IF_ERROR(wait_for(fd_, POLLIN, deadline, wake_fd, "receive from " + peer_address()));
      continue;
    }
    return Status::disconnected("receive from " + peer_address() + ": " + errno_text(errno));
  }
  return {};
}

Result<uint8_t> Socket::peek_byte(Deadline deadline, int wake_fd) {
  for (;;) {
    uint8_t byte = 0;
    ssize_t n = ::recv(fd_, &byte, 1, MSG_PEEK);
    if (n == 1) return byte;
    if (n == 0) return Status::disconnected("peer " + peer_address() + " closed the connection before sending a byte");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) {
      return Status::disconnected("receive from " + peer_address() + ": " + errno_text(errno));
    }
    TS_RETURN_IF_ERROR(wait_for(fd_, POLLIN, deadline, wake_fd, "receive from " + peer_address()));
  }
}

Status Socket::wait_readable(Deadline deadline, int wake_fd) const {
  return wait_for(fd_, POLLIN, deadline, wake_fd, "receive from " + peer_address());
}

Status Socket::wait_writable(Deadline deadline, int wake_fd) const {
  return wait_for(fd_, POLLOUT, deadline, wake_fd, "send to " + peer_address());
}

void Socket::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

std::string Socket::peer_address() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (fd_ < 0 || getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "(unconnected)";
  return sockaddr_text(addr);
}

Listener::~Listener() {
  if (fd_ >= 0) ::close(fd_);
}

Listener::Listener(Listener&& other) noexcept : fd_(other.fd_), port_(other.port_) { other.fd_ = -1; }

Listener& Listener::operator=(Listener&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    port_ = other.port_;
    other.fd_ = -1;
  }
  return *this;
}

Result<Listener> Listener::bind(const Endpoint& endpoint) {
  TS_ASSIGN_OR_RETURN(auto info, resolve(endpoint, true));
  Status last = Status::invalid_input("no address to listen on for " + endpoint.to_string());
  for (addrinfo* ai = info.get(); ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      last = Status::invalid_input("listen on " + endpoint.to_string() + ": " + errno_text(errno));
      ::close(fd);
      continue;
    }
    make_non_blocking(fd);
    Listener listener;
    listener.fd_ = fd;
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    listener.port_ = addr.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&addr)->sin6_port)
                                                : ntohs(reinterpret_cast<sockaddr_in*>(&addr)->sin_port);
    return listener;
  }
  return last;
}

Result<Socket> Listener::accept(Deadline deadline, int wake_fd) {
  for (;;) {
    int fd = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd >= 0) return Socket(fd);
    if (errno == EINTR || errno == ECONNABORTED) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Status::internal("accept: " + errno_text(errno));
    TS_RETURN_IF_ERROR(
        wait_for(fd_, POLLIN, deadline, wake_fd, "accept a connection on port " + std::to_string(port_)));
  }
}

WakeFd::WakeFd() : fd_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) { TS_CHECK(fd_ >= 0, "eventfd failed: ", errno); }

WakeFd::~WakeFd() { ::close(fd_); }

void WakeFd::signal() {
  uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(fd_, &one, sizeof one);
}

}  // namespace tessera::net
