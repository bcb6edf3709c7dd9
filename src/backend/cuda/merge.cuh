// How a token's attention partitions are merged, shared by attend.cu's combine
// kernel (partitions written to scratch by separate blocks) and mma_attention's
// blocks that take every partition of their tokens: in partition order, a running
// max, sum of weights and unnormalized output, each product and sum rounded on its
// own (no contraction into fused multiply-adds), so that both give the same bits.
#pragma once

#include <cuda_runtime.h>

namespace tessera::cuda {

struct RunningMerge {
  float peak = -INFINITY, sum = 0.0f;
};

// Takes in a partition of max `peak` and sum of weights `sum`; returns the factors
// for the running output (x) and the partition's output (y).
__device__ __forceinline__ float2 merge_partition(RunningMerge& run, float peak, float sum) {
  const float top = fmaxf(run.peak, peak);
  const float2 w = make_float2(expf(run.peak - top), expf(peak - top));
  run.sum = __fadd_rn(__fmul_rn(run.sum, w.x), __fmul_rn(sum, w.y));
  run.peak = top;
  return w;
}

__device__ __forceinline__ float merge_output(float running, float part, float2 w) {
  return __fadd_rn(__fmul_rn(running, w.x), __fmul_rn(part, w.y));
}

}  // namespace tessera::cuda
