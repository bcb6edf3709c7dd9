// Elementwise sums for collectives: f32 accumulators over f32, bf16 or f16 inputs,
// in the order the caller adds them (the fixed rank order that makes every
// rank's result, sealed or plain, bitwise identical). Pure; safe from any thread.
#pragma once

#include <cstdint>
#include <span>

#include "core/dtype.h"

namespace tessera::collective {

// acc[i] = x[i] (first) or acc[i] += x[i], x holding acc.size() elements of dtype.
void accumulate(std::span<float> acc, std::span<const uint8_t> x, DType dtype, bool first);
// out = acc rounded to dtype (round to nearest even), out holding acc.size() elements.
void store(std::span<const float> acc, std::span<uint8_t> out, DType dtype);

}  // namespace tessera::collective
