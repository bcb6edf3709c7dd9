// What the Hopper probes (tma_probe.cu, ws_probe.cu) share beyond the kernels'
// own helpers (backend/cuda/tma.cuh): x rounded in mma slot order, and the eight
// sums' order of k's chunks.
#pragma once

#include <cuda_bf16.h>

#include "backend/cuda/mma.cuh"
#include "backend/cuda/tma.cuh"
#include "probe.cuh"

namespace tessera::cuda {

__global__ void slots_kernel(const float* __restrict__ x, int64_t count, __nv_bfloat16* __restrict__ y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[mma_slot(i)] = __float2bfloat16_rn(x[i]);  // rows are whole halves, so flat positions work
}

// Chunk of step i in the eight sums' order (sum 0's chunks 0, 8, ..., then sum 1's):
// sums below r have q + 1 chunks, the rest q.
__device__ __forceinline__ int chunk_of(int i, int q, int r) {
  const int long_steps = r * (q + 1);
  if (i < long_steps) return i / (q + 1) + kMmaSplit * (i % (q + 1));
  i -= long_steps;
  return r + i / q + kMmaSplit * (i % q);
}

}  // namespace tessera::cuda
