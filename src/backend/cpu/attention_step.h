// What the units of CpuDevice::attention (backend/cpu/attention.h) share, whichever path
// computes them: their three steps, each over items that any threads may share once the
// step before has ended (the scores: by KV blocks, or the AMX tiles' chunks of 32
// positions; the softmax: by query rows; the outputs: by pieces of the head's
// dimensions), and which positions a token sees.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tessera::cpu {

enum class AttentionStep { kScores, kProbs, kOutputs };

// The first position a token at `position` sees: position - window + 1 (not below 0)
// under a sliding window, else 0. It sees [first_seen, position].
inline int64_t first_seen(int64_t position, int64_t sliding_window) {
  return sliding_window > 0 ? std::max<int64_t>(0, position - sliding_window + 1) : int64_t{0};
}

}  // namespace tessera::cpu
