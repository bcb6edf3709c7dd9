// KvCache: keys and values of one sequence for the layers of one range, f32,
// laid out [capacity, n_kv_heads, head_dim] per layer. Owned by the inference
// thread that runs the sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "io/model_config.h"

namespace tessera {

class KvCache {
 public:
  KvCache(const ModelConfig& config, int64_t layers, int64_t capacity);

  int64_t capacity() const { return capacity_; }
  // Number of positions written so far; Forward advances it.
  int64_t length() const { return length_; }
  void set_length(int64_t length) { length_ = length; }
  float* keys(int64_t layer) { return keys_[static_cast<size_t>(layer)].data(); }
  float* values(int64_t layer) { return values_[static_cast<size_t>(layer)].data(); }
  uint64_t bytes() const;

 private:
  int64_t capacity_;
  int64_t length_ = 0;
  std::vector<std::vector<float>> keys_;  // [layer][capacity * n_kv_heads * head_dim]
  std::vector<std::vector<float>> values_;
};

}  // namespace tessera
