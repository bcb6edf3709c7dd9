// flood_helper: a stranger that keeps many TCP connections open to stages
// without ever completing a handshake (issue 14, point 2). Half the connections
// stay idle; the other half drip the start of a TLS ClientHello, one byte every
// --drip-ms. Each connection a stage closes is reopened --reopen-ms later, for
// --seconds or until SIGTERM. Once a second it prints one line of counts:
//   open 1000 opened 5321 closed 4321 failed 0
// (closed: by the stage; failed: connects that did not complete).
//
//   flood_helper --connections 1000 --seconds 120 [--source 127.0.0.2] 10.231.0.2:7000 ...
//
// One thread, non-blocking sockets in poll(2).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

volatile sig_atomic_t stop_requested = 0;
void on_term(int) { stop_requested = 1; }

// The first bytes of a TLS 1.x ClientHello record (a 512-byte record that never comes).
constexpr uint8_t kClientHello[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03};

struct Target {
  sockaddr_in addr{};
};

struct Connection {
  int fd = -1;
  size_t target = 0;
  bool drip = false;
  bool connecting = false;
  size_t sent = 0;
  Clock::time_point next_drip{};
  Clock::time_point reopen_at{};
};

bool parse_address(const std::string& text, sockaddr_in& out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) return false;
  out.sin_family = AF_INET;
  out.sin_port = htons(static_cast<uint16_t>(std::atoi(text.c_str() + colon + 1)));
  return inet_pton(AF_INET, text.substr(0, colon).c_str(), &out.sin_addr) == 1;
}

}  // namespace

int main(int argc, char** argv) {
  size_t connections = 1000;
  int seconds = 120, drip_ms = 300, reopen_ms = 200;
  std::string source;
  std::vector<Target> targets;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--connections") {
      connections = std::strtoul(next().c_str(), nullptr, 10);
    } else if (arg == "--seconds") {
      seconds = std::atoi(next().c_str());
    } else if (arg == "--drip-ms") {
      drip_ms = std::atoi(next().c_str());
    } else if (arg == "--reopen-ms") {
      reopen_ms = std::atoi(next().c_str());
    } else if (arg == "--source") {
      source = next();
    } else {
      Target target;
      if (!parse_address(arg, target.addr)) {
        std::fprintf(stderr, "flood_helper: bad address '%s'\n", arg.c_str());
        return 2;
      }
      targets.push_back(target);
    }
  }
  if (targets.empty() || connections == 0) {
    std::fprintf(stderr, "usage: flood_helper [--connections N] [--seconds S] [--source IP] host:port...\n");
    return 2;
  }
  sockaddr_in source_addr{};
  if (!source.empty() && !parse_address(source + ":0", source_addr)) {
    std::fprintf(stderr, "flood_helper: bad --source '%s'\n", source.c_str());
    return 2;
  }
  rlimit files{};
  getrlimit(RLIMIT_NOFILE, &files);
  files.rlim_cur = files.rlim_max;
  setrlimit(RLIMIT_NOFILE, &files);
  signal(SIGTERM, on_term);
  signal(SIGPIPE, SIG_IGN);

  std::vector<Connection> pool(connections);
  for (size_t i = 0; i < pool.size(); ++i) {
    pool[i].target = i % targets.size();
    pool[i].drip = i % 2 == 1;
  }
  uint64_t opened = 0, closed = 0, failed = 0;
  const auto close_one = [&](Connection& c, Clock::time_point now) {
    ::close(c.fd);
    c.fd = -1;
    c.reopen_at = now + milliseconds(reopen_ms);
  };
  const Clock::time_point end = Clock::now() + std::chrono::seconds(seconds);
  Clock::time_point next_report = Clock::now();
  std::vector<pollfd> fds;
  std::vector<size_t> index;
  while (!stop_requested && Clock::now() < end) {
    Clock::time_point now = Clock::now();
    fds.clear();
    index.clear();
    size_t open_now = 0;
    for (size_t i = 0; i < pool.size(); ++i) {
      Connection& c = pool[i];
      if (c.fd < 0 && now >= c.reopen_at) {
        c.fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (c.fd < 0) {
          ++failed;
          c.reopen_at = now + milliseconds(reopen_ms);
          continue;
        }
        if (!source.empty()) {
          int one = 1;
          setsockopt(c.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
          bind(c.fd, reinterpret_cast<const sockaddr*>(&source_addr), sizeof source_addr);
        }
        const sockaddr_in& to = targets[c.target].addr;
        if (::connect(c.fd, reinterpret_cast<const sockaddr*>(&to), sizeof to) != 0 && errno != EINPROGRESS) {
          ++failed;
          close_one(c, now);
          continue;
        }
        ++opened;
        c.connecting = true;
        c.sent = 0;
        c.next_drip = now + milliseconds(drip_ms);
      }
      if (c.fd < 0) continue;
      ++open_now;
      if (!c.connecting && c.drip && now >= c.next_drip) {
        const uint8_t byte = kClientHello[c.sent % sizeof kClientHello];
        if (::send(c.fd, &byte, 1, MSG_NOSIGNAL) != 1 && errno != EAGAIN) {
          ++closed;
          close_one(c, now);
          continue;
        }
        ++c.sent;
        c.next_drip = now + milliseconds(drip_ms);
      }
      fds.push_back({c.fd, static_cast<short>(c.connecting ? POLLOUT : POLLIN), 0});
      index.push_back(i);
    }
    if (now >= next_report) {
      std::printf("open %zu opened %llu closed %llu failed %llu\n", open_now, static_cast<unsigned long long>(opened),
                  static_cast<unsigned long long>(closed), static_cast<unsigned long long>(failed));
      std::fflush(stdout);
      next_report = now + std::chrono::seconds(1);
    }
    ::poll(fds.data(), fds.size(), 20);
    now = Clock::now();
    for (size_t k = 0; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      Connection& c = pool[index[k]];
      if (c.connecting) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          ++failed;
          close_one(c, now);
        } else {
          c.connecting = false;
        }
        continue;
      }
      uint8_t buffer[256];
      const ssize_t n = ::recv(c.fd, buffer, sizeof buffer, 0);
      if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {  // the stage closed it: reopen
        ++closed;
        close_one(c, now);
      }
    }
  }
  size_t open_at_end = 0;
  for (const Connection& c : pool) open_at_end += c.fd >= 0;
  std::printf("open %zu opened %llu closed %llu failed %llu\n", open_at_end, static_cast<unsigned long long>(opened),
              static_cast<unsigned long long>(closed), static_cast<unsigned long long>(failed));
  return 0;
}
