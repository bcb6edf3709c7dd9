// Rotary position embedding frequencies, computed once per model as
// transformers does (f32): default, linear (positions divided by `factor`),
// llama3 (long wavelengths divided by `factor`, a smooth blend in between) and
// longrope (pair i's frequency divided by short_factor[i] or long_factor[i]).
#pragma once

#include <vector>

#include "io/model_config.h"

namespace tessera {

// inv_freq [dim / 2] for the `dim` rotary dimensions of a head: the angle of pair
// i at position p is p * inv_freq[i]. longrope: the short factors, or the long
// ones when `long_factors`.
std::vector<float> rope_inv_freq(const RopeConfig& rope, int64_t dim, bool long_factors = false);
// What cos and sin are multiplied by: longrope's attention_factor, else 1.
float rope_scaling(const RopeConfig& rope);

}  // namespace tessera
