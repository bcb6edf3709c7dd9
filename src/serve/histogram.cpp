#include "serve/histogram.h"

#include <cstdio>

namespace tessera::serve {

void Histogram::observe(double seconds) {
  if (!(seconds >= 0)) seconds = 0;
  for (size_t i = 0; i < kBounds.size(); ++i)
    if (seconds <= kBounds[i]) {
      ++buckets_[i];
      break;
    }
  ++count_;
  sum_ns_ += static_cast<uint64_t>(seconds * 1e9);
}

void Histogram::write(std::string& out, const std::string& name, const std::string& help) const {
  out += "# HELP tessera:" + name + " " + help + "\n# TYPE tessera:" + name + " histogram\n";
  char line[160];
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i].load();
    std::snprintf(line, sizeof line, "tessera:%s_bucket{le=\"%g\"} %llu\n", name.c_str(), kBounds[i],
                  static_cast<unsigned long long>(cumulative));
    out += line;
  }
  const auto count = static_cast<unsigned long long>(count_.load());
  std::snprintf(line, sizeof line, "tessera:%s_bucket{le=\"+Inf\"} %llu\ntessera:%s_sum %.9f\ntessera:%s_count %llu\n",
                name.c_str(), count, name.c_str(), static_cast<double>(sum_ns_.load()) / 1e9, name.c_str(), count);
  out += line;
}

}  // namespace tessera::serve
