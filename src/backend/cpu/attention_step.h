// The three steps of a unit of CpuDevice::attention (backend/cpu/attention.h), each over
// items that any threads may share once the step before has ended: the scores (by KV
// blocks, or the AMX tiles' chunks of 32 positions), the softmax (by query rows), the
// outputs (by pieces of the head's dimensions).
#pragma once

namespace tessera::cpu {

enum class AttentionStep { kScores, kProbs, kOutputs };

}  // namespace tessera::cpu
