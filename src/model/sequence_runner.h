// SequenceRunner: what runs the whole model for one sequence, as the generation
// loop sees it: token ids in, the last position's logits out. LocalRunner is a
// Forward over all layers with its KV cache; a pipeline's runner
// (dist/coordinator.h) sends the ids through stages on other hosts.
//
// Not thread-safe: one runner per sequence, used from one thread.
#pragma once

#include <span>
#include <vector>

#include "core/status.h"
#include "model/forward.h"
#include "model/kv_cache.h"

namespace tessera {

class SequenceRunner {
 public:
  virtual ~SequenceRunner() = default;
  // Runs ids at positions [length(), + ids.size()); returns f32 logits [vocab]
  // of the last one.
  virtual Result<std::vector<float>> run(std::span<const int32_t> ids) = 0;
  virtual int64_t length() const = 0;    // positions held
  virtual int64_t capacity() const = 0;  // positions it can hold
  // Keeps the first n <= length() positions (a cached prompt prefix).
  virtual Status truncate(int64_t n) = 0;
  // A runner that samples where the logits are (a pipeline's last stage) runs
  // ids and returns the next token instead of logits; `prompt` is the request's
  // prompt (for penalties, sent once). Others return false and kUnsupported.
  virtual bool samples_remotely() const { return false; }
  virtual Result<int32_t> run_to_token(std::span<const int32_t> /*ids*/, std::span<const int32_t> /*prompt*/) {
    return Status::unsupported("this runner returns logits; sample them");
  }
};

class LocalRunner final : public SequenceRunner {
 public:
  LocalRunner(Forward& forward, KvCache& cache) : forward_(forward), cache_(cache) {}
  Result<std::vector<float>> run(std::span<const int32_t> ids) override { return forward_.run_ids(ids, cache_); }
  int64_t length() const override { return cache_.length(); }
  int64_t capacity() const override { return cache_.capacity(); }
  Status truncate(int64_t n) override {
    cache_.set_length(n);
    return {};
  }

 private:
  Forward& forward_;
  KvCache& cache_;
};

}  // namespace tessera
