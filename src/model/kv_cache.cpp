#include "model/kv_cache.h"

namespace tessera {

KvCache::KvCache(const ModelConfig& config, int64_t layers, int64_t capacity) : capacity_(capacity) {
  const auto per_layer = static_cast<size_t>(capacity * config.num_key_value_heads * config.head_dim);
  keys_.assign(static_cast<size_t>(layers), std::vector<float>(per_layer));
  values_.assign(static_cast<size_t>(layers), std::vector<float>(per_layer));
}

uint64_t KvCache::bytes() const {
  uint64_t total = 0;
  for (const auto& k : keys_) total += k.size() * sizeof(float);
  return 2 * total;
}

}  // namespace tessera
