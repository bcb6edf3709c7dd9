#include "core/log_limiter.h"

#include <cstdio>

namespace tessera {

std::optional<std::string> LogLimiter::filter(std::string_view kind, std::string_view line, Clock::time_point now) {
  std::lock_guard lock(mutex_);
  auto it = kinds_.find(kind);
  if (it == kinds_.end()) {
    kinds_.emplace(std::string(kind), Kind{now, 0});
    return std::string(line);
  }
  Kind& k = it->second;
  if (now - k.last < interval_) {
    ++k.held;
    return std::nullopt;
  }
  std::string out(line);
  if (k.held > 0) out += " (and " + std::to_string(k.held) + " more like it)";
  k.last = now;
  k.held = 0;
  return out;
}

void LogLimiter::log(std::string_view kind, std::string_view line) {
  if (std::optional<std::string> out = filter(kind, line)) std::fprintf(stderr, "%s\n", out->c_str());
}

}  // namespace tessera
