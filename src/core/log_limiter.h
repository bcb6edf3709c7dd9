// LogLimiter: at most one line of each kind per interval, so that whoever can
// make a process log (a junk connection, a failed handshake) cannot flood its
// log or its disk. Lines held back are counted, and the next line of that kind
// that passes says how many: "... (and 41 more like it)".
//
// A kind is a fixed string chosen by the caller ("refused: per-host limit"),
// never text from a peer, so the table of kinds stays small.
//
// Thread safety: filter() and log() may be called from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace tessera {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  explicit LogLimiter(std::chrono::milliseconds interval = std::chrono::seconds(1)) : interval_(interval) {}

  // The line to print now (with " (and N more like it)" when N lines of this
  // kind were held back since the last one printed), or nothing.
  std::optional<std::string> filter(std::string_view kind, std::string_view line, Clock::time_point now = Clock::now());
  // filter(), then the line on stderr.
  void log(std::string_view kind, std::string_view line);

 private:
  struct Kind {
    Clock::time_point last;  // when a line of this kind was last printed
    size_t held = 0;         // lines held back since
  };
  const std::chrono::milliseconds interval_;  // never changes after construction

  std::mutex mutex_;
  std::map<std::string, Kind, std::less<>> kinds_;  // guarded by mutex_
};

}  // namespace tessera
