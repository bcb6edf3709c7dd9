// Histogram: a Prometheus histogram of seconds with fixed buckets (those of
// vLLM's latency histograms, cut to one set), counted with atomics: the
// inference thread observes, /metrics reads from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

namespace tessera::serve {

class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds{0.001, 0.005, 0.01, 0.025, 0.05, 0.1,  0.25,
                                                  0.5,   1.0,   2.5,  5.0,   10.0, 30.0, 60.0};
  void observe(double seconds);
  uint64_t count() const { return count_.load(); }
  // The _bucket (cumulative, le="+Inf" last), _sum and _count lines of "tessera:<name>",
  // each with `labels` (label="value" pairs that sort after "le", written after it).
  void write(std::string& out, const std::string& name, const std::string& help, const std::string& labels) const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size()> buckets_{};  // per bucket, not cumulative
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace tessera::serve
