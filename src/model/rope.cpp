#include "model/rope.h"

#include <cmath>
#include <numbers>

namespace tessera {

std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t dim, bool long_factors) {
  std::vector<float> inv_freq(static_cast<size_t>(dim / 2));
  const auto theta = static_cast<float>(rope.theta);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    if (rope.type == RopeType::kLongRope) {
      const std::vector<double>& factors = long_factors ? rope.long_factor : rope.short_factor;
      inv_freq[i] = 1.0f / (static_cast<float>(factors.at(i)) * std::pow(theta, exponent));
    } else {
      inv_freq[i] = 1.0f / std::pow(theta, exponent);
    }
  }
  if (rope.type == RopeType::kLinear) {
    for (float& f : inv_freq) f = static_cast<float>(f / rope.factor);
  } else if (rope.type == RopeType::kLlama3) {
    const double old_context = static_cast<double>(rope.original_max_position_embeddings);
    const double low_freq_wavelen = old_context / rope.low_freq_factor;
    const double high_freq_wavelen = old_context / rope.high_freq_factor;
    for (float& f : inv_freq) {
      const double wavelen = 2 * std::numbers::pi / f;
      if (wavelen > low_freq_wavelen) {
        f = static_cast<float>(f / rope.factor);
      } else if (wavelen >= high_freq_wavelen) {
        const double smooth =
            (old_context / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
        f = static_cast<float>((1 - smooth) * f / rope.factor + smooth * f);
      }
    }
  }
  return inv_freq;
}

float rope_scaling(const RopeConfig& rope) {
  return rope.type == RopeType::kLongRope ? static_cast<float>(rope.attention_factor) : 1.0f;
}

}  // namespace tessera
