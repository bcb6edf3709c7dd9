// Rotary position embedding frequencies, computed once per model as
// transformers does (f32): default, linear (positions divided by `factor`) and
// llama3 (long wavelengths divided by `factor`, a smooth blend in between).
#pragma once

#include <vector>

#include "io/model_config.h"

namespace tessera {

// inv_freq [head_dim / 2]: the angle of pair i at position p is p * inv_freq[i].
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t head_dim);

}  // namespace tessera
