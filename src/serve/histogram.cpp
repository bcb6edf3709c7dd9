#include "serve/histogram.h"

#include <cstdio>
#include <string>

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

void Histogram::write(std::string& out, const std::string& name, const std::string& help,
                      const std::string& labels) const {
  out += "# HELP tessera:" + name + " " + help + "\n# TYPE tessera:" + name + " histogram\n";
  // No fixed buffer: a long name once cut the _count line short (1100 read as 11).
  const std::string prefix = "tessera:" + name;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kBounds.size(); ++i) {
    cumulative += buckets_[i].load();
    char le[32];
    std::snprintf(le, sizeof le, "%g", kBounds[i]);
    out += prefix + "_bucket{le=\"" + le + "\"," + labels + "} " + std::to_string(cumulative) + "\n";
  }
  const std::string count = std::to_string(count_.load());
  char sum[64];
  std::snprintf(sum, sizeof sum, "%.9f", static_cast<double>(sum_ns_.load()) / 1e9);
  const std::string own = "{" + labels + "} ";
  out += prefix + "_bucket{le=\"+Inf\"," + labels + "} " + count + "\n" + prefix + "_sum" + own + sum + "\n" + prefix +
         "_count" + own + count + "\n";
}

}  // namespace tessera::serve
