// What the Hopper probes (tma_probe.cu, ws_probe.cu) share: shared-memory
// addresses, mbarriers, clusters and TMA copies (sm_90a), and the host's tensor
// maps of row-major bf16 matrices.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/cuda/mma.cuh"
#include "probe.cuh"

namespace tessera::cuda {

__device__ __forceinline__ uint32_t smem_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_address(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t* bar, int bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_address(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_address(bar)) : "memory");
}
// Waits for the barrier's phase of this parity; kCluster: acquiring what the
// cluster's other blocks released with their arrivals. A probe that would hang
// (a barrier never completing: a bug) traps after about four seconds instead.
template <bool kCluster = false>
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
  uint32_t done = 0;
  const long long start = clock64();
  while (!done) {
    if constexpr (kCluster)
      asm volatile(
          "{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2;\n"
          "selp.u32 %0, 1, 0, p;\n}\n"
          : "=r"(done)
          : "r"(smem_address(bar)), "r"(parity)
          : "memory");
    else
      asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                   : "=r"(done)
                   : "r"(smem_address(bar)), "r"(parity)
                   : "memory");
    if (!done && clock64() - start > 8'000'000'000LL) __trap();
  }
}
// An arrival on the barrier at the same place in block `rank` of the cluster.
__device__ __forceinline__ void mbar_arrive_at(uint64_t* bar, int rank) {
  asm volatile(
      "{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.release.cluster.shared::cluster.b64 _, [remote];\n}\n" ::"r"(smem_address(bar)),
      "r"(rank)
      : "memory");
}
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ int cluster_rank() {
  uint32_t rank;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));
  return static_cast<int>(rank);
}
// The box at (c0, c1) of `map` into `dst`, completing on `bar`; with a mask, into
// the same place of each block of the cluster that the mask names (and their bars).
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_address(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_address(bar))
      : "memory");
}
__device__ __forceinline__ void tma_multicast(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar,
                                              uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster [%0], [%1, {%2, "
      "%3}], [%4], %5;\n" ::"r"(smem_address(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_address(bar)), "h"(mask)
      : "memory");
}

// Chunk of step i in the eight sums' order (sum 0's chunks 0, 8, ..., then sum 1's):
// sums below r have q + 1 chunks, the rest q.
__device__ __forceinline__ int chunk_of(int i, int q, int r) {
  const int long_steps = r * (q + 1);
  if (i < long_steps) return i / (q + 1) + kMmaSplit * (i % (q + 1));
  i -= long_steps;
  return r + i / q + kMmaSplit * (i % q);
}

inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    must(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found),
         "cuTensorMapEncodeTiled");
    if (found != cudaDriverEntryPointSuccess) std::exit((std::fprintf(stderr, "no cuTensorMapEncodeTiled\n"), 1));
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// A 2D map of a row-major bf16 matrix [rows][cols], boxes of box_cols x box_rows.
inline CUtensorMap matrix_map(const void* base, int64_t rows, int64_t cols, int box_cols, int box_rows,
                              CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_NONE) {
  CUtensorMap map{};
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(cols) * 2};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(box_cols), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult result = encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(base), dims,
                                         strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
                                         CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) std::exit((std::fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", result), 1));
  return map;
}

}  // namespace tessera::cuda
