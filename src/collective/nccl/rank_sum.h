// The rank-order sum of an NCCL group (nccl_group.cpp), on the device: NCCL only
// moves bytes (an all-gather), and this kernel adds them in the TCP group's
// order (collective/tcp/sum.h): rank 0's value first, then rank 1's, ..., in
// f32, rounded once to the dtype. So an NCCL group's sums are bitwise a TCP
// group's, on every rank, whatever the buffer's length (batch invariance).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/dtype.h"

namespace tessera::collective {

// out[i] = sum over r of gathered[r * per_rank + first + i], i < count, for
// `size` ranks' blocks of per_rank elements of dtype (f32, bf16 or f16).
void rank_sum(cudaStream_t stream, const void* gathered, int size, int64_t per_rank, int64_t first, int64_t count,
              DType dtype, void* out);

}  // namespace tessera::collective
