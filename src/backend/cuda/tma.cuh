// Hopper's asynchronous copies and tensor-core instructions (sm_90a), for the
// kernels of tessera_cuda_sm90a (wgmma_gemm.cu) and the probes in bench/:
// shared-memory addresses, mbarriers, TMA copies of tiles described by tensor
// maps, wgmma with the weights' fragments from registers, and the
// host's tensor maps of row-major bf16 matrices.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/check.h"

namespace tessera::cuda {

// The 64 f32 accumulators of a wgmma m64n128 as asm operands %0..%63 (d[64]).
#define TESSERA_WGMMA_D64                                                            \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "           \
  "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
  "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
  "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define TESSERA_WGMMA_D64_OPERANDS(d)                                                                         \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
      "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),  \
      "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
      "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
      "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
      "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
      "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
      "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// d (lane (g, t) of warp w of the warpgroup: rows 16w + g (+8 for d[4j + 2, 3]),
// tokens 8j + 2t (+1 for odd d)) += a (the warp's 16 x 16 fragment, as mma.sync's)
// times B (16 x 128 from shared memory, described by b).
__device__ __forceinline__ void wgmma_128(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" TESSERA_WGMMA_D64
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : TESSERA_WGMMA_D64_OPERANDS(d)
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
}

// The compiler must not move reads or writes of the accumulators across the
// points where wgmma may be using them (its asm statements name them only as
// operands of the instruction that starts the products).
template <int kCount>
__device__ __forceinline__ void pin(float (&d)[kCount]) {
#pragma unroll
  for (int i = 0; i < kCount; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

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
// An arrival by the lane whose `lane` is 0 (a predicated instruction, no branch:
// the wgmma instructions around it stay in one path).
__device__ __forceinline__ void mbar_arrive_if_first(uint64_t* bar, int lane) {
  asm volatile("{\n.reg .pred p;\nsetp.eq.s32 p, %1, 0;\n@p mbarrier.arrive.shared::cta.b64 _, [%0];\n}\n" ::"r"(
                   smem_address(bar)),
               "r"(lane)
               : "memory");
}
// Waits for the barrier's phase of this parity. A kernel that would hang (a
// barrier never completing: a bug) traps after about a minute of the SM's clock
// instead (far above any wait, even with other processes' kernels time-sliced in).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, int parity) {
  uint32_t done = 0;
  const long long start = clock64();
  while (!done) {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(smem_address(bar)), "r"(parity)
                 : "memory");
    if (!done && clock64() - start > 120'000'000'000LL) __trap();
  }
}
// The box at (c0, c1) of `map` into `dst`, completing on `bar`.
__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, int c0, int c1, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];\n" ::"r"(
          smem_address(dst)),
      "l"(map), "r"(c0), "r"(c1), "r"(smem_address(bar))
      : "memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}

// The descriptor of a K-major operand in shared memory, 128-byte swizzled (rows of
// 128 bytes, eight rows a 1,024-byte atom, as TMA writes a box of 64 bf16 columns
// with CU_TENSOR_MAP_SWIZZLE_128B); k16 step s starts 32 bytes along the row.
__device__ __forceinline__ uint64_t swizzled_descriptor(const void* tile, int s) {
  const uint64_t address = smem_address(tile) + 32 * s;
  return ((address & 0x3ffff) >> 4) | (uint64_t{1} << 16) | (uint64_t{1024 >> 4} << 32) | (uint64_t{1} << 62);
}

inline PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    const cudaError_t error =
        cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found);
    TS_CHECK(error == cudaSuccess && found == cudaDriverEntryPointSuccess,
             "[cuda] no cuTensorMapEncodeTiled: ", cudaGetErrorString(error));
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
  TS_CHECK(result == CUDA_SUCCESS, "[cuda] cuTensorMapEncodeTiled: error ", static_cast<int>(result), " for a ", rows,
           " x ", cols, " matrix");
  return map;
}

}  // namespace tessera::cuda
