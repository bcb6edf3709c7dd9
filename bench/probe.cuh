// What the CUDA probes (chain_probe.cu, ws_probe.cu) share: a failed call ends
// the probe, saying what failed, and a call's time on a stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>

namespace tessera::cuda {

inline void must(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

// Seconds a call(i) takes on `stream`: three calls to warm up, then the mean of `reps`.
template <typename Call>
double seconds_per_call(cudaStream_t stream, int reps, Call&& call) {
  cudaEvent_t begin, end;
  must(cudaEventCreate(&begin), "event");
  must(cudaEventCreate(&end), "event");
  for (int i = 0; i < 3; ++i) call(i);
  cudaEventRecord(begin, stream);
  for (int i = 0; i < reps; ++i) call(i);
  cudaEventRecord(end, stream);
  must(cudaEventSynchronize(end), "timing");
  float ms = 0;
  cudaEventElapsedTime(&ms, begin, end);
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  return ms * 1e-3 / reps;
}

}  // namespace tessera::cuda
