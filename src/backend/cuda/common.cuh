// Device helpers the CUDA kernels share: element storage and conversions, vector
// loads, fixed-order reductions, the KV page layout, and dtype dispatch.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "backend/device.h"
#include "core/check.h"

namespace tessera::cuda {

// Storage of a weight or KV element: f32 as float, bf16 and f16 as their bits.
template <DType D>
using Storage = std::conditional_t<D == DType::kF32, float, uint16_t>;

template <DType D>
__device__ __forceinline__ float widen(Storage<D> v) {
  if constexpr (D == DType::kF32) {
    return v;
  } else if constexpr (D == DType::kBF16) {
    return __uint_as_float(static_cast<uint32_t>(v) << 16);
  } else {
    return __half2float(__ushort_as_half(v));
  }
}

template <DType D>
__device__ __forceinline__ Storage<D> narrow(float v) {
  if constexpr (D == DType::kF32) {
    return v;
  } else if constexpr (D == DType::kBF16) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  } else {
    return __half_as_ushort(__float2half_rn(v));
  }
}

// SiLU(gate) * up, the one formula silu_mul and the matmuls' gate/up epilogues use.
__device__ __forceinline__ float silu_times(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

// Elements [8c, 8c + 8) of a row of `k`, widened to f32 (zero past k). kVec: k is a
// multiple of 8 and rows are 16-byte aligned, so the chunk is one or two 16-byte loads.
template <DType D, bool kVec>
__device__ __forceinline__ void load8(const Storage<D>* __restrict__ row, int64_t c, int64_t k, float (&out)[8]) {
  if constexpr (kVec && D == DType::kF32) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(row + 8 * c));
    const float4 b = __ldg(reinterpret_cast<const float4*>(row + 8 * c) + 1);
    out[0] = a.x, out[1] = a.y, out[2] = a.z, out[3] = a.w;
    out[4] = b.x, out[5] = b.y, out[6] = b.z, out[7] = b.w;
  } else if constexpr (kVec) {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(row + 8 * c));
    const uint32_t words[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      out[2 * i] = widen<D>(static_cast<uint16_t>(words[i] & 0xffffu));
      out[2 * i + 1] = widen<D>(static_cast<uint16_t>(words[i] >> 16));
    }
  } else {
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const int64_t i = 8 * c + j;
      out[j] = i < k ? widen<D>(row[i]) : 0.0f;
    }
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum or max over the block in a fixed tree: each warp by shuffles, then the warps
// in order. `shared` holds 32 floats; every thread gets the result.
template <bool kMax>
__device__ __forceinline__ float block_reduce(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // `shared` may still be read from the previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = shared[0];
  for (int i = 1; i < warps; ++i) total = kMax ? fmaxf(total, shared[i]) : total + shared[i];
  return total;
}

// Programmatic dependent launch (sm_90). A kernel started by launch_kernel() may begin
// while the kernel before it on the stream is still running: its blocks fill
// the SMs that the earlier kernel's last blocks leave idle, and a matmul loads
// its first weights (which no kernel writes) meanwhile. Such a kernel calls
// let_next_start() (the next kernel may be launched) and then, in every thread,
// wait_for_earlier() before it reads or writes anything another kernel writes:
// it returns once every earlier kernel has finished and its writes are visible.
// So each kernel still sees its inputs complete, and the order of every sum is
// untouched: only the gaps between kernels shrink.
__device__ __forceinline__ void let_next_start() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::);
#endif
}
__device__ __forceinline__ void wait_for_earlier() {
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Whether the environment variable `name` is "0": the switches that turn an
// optimisation off, to measure what it gains.
bool switched_off(const char* name);
// Whether it is "1": what runs only when asked for (read at every call).
bool asked(const char* name);

// Whether launch_kernel() lets kernels overlap (TESSERA_CUDA_OVERLAP=0 turns it off).
bool overlap_launches();

// Launches `kernel` on `stream`, allowed to overlap the kernel before it (see
// let_next_start); the kernel must call wait_for_earlier(). With cluster > 1 its
// blocks run in clusters of that many consecutive blocks along x (sm_90: they may
// read each other's shared memory and wait for each other).
template <typename... Params, typename... Args>
void launch_kernel_in_clusters(unsigned cluster, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared,
                               cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attrs[2]{};
  attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[0].val.programmaticStreamSerializationAllowed = overlap_launches() ? 1 : 0;
  attrs[1].id = cudaLaunchAttributeClusterDimension;
  attrs[1].val.clusterDim.x = cluster, attrs[1].val.clusterDim.y = 1, attrs[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = cluster > 1 ? 2 : 1;
  const cudaError_t error = cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
  TS_CHECK(error == cudaSuccess, "[cuda] launching a kernel: ", cudaGetErrorString(error));
}
template <typename... Params, typename... Args>
void launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                   Args&&... args) {
  launch_kernel_in_clusters(1, kernel, grid, block, shared, stream, std::forward<Args>(args)...);
}

// 16 bytes from global to shared memory without passing through registers
// (cp.async, bypassing L1); copies_sent() closes a group of them, and
// copies_wait<n>() waits until at most n groups are still in flight.
__device__ __forceinline__ void copy16(void* smem, const void* gmem) {
  const auto to = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(gmem));
}
__device__ __forceinline__ void copies_sent() { asm volatile("cp.async.commit_group;\n" ::); }
template <int kPending>
__device__ __forceinline__ void copies_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
}

// The 128-byte line holding `p` heads for L2 (nothing waits for it).
__device__ __forceinline__ void prefetch_l2(const void* p) { asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p)); }

// RMSNorm's scale of a row, 1 / sqrt(mean(row^2) + eps), by a block of
// kNormThreads threads in one fixed order: thread i adds the squares of elements
// i, i + kNormThreads, ... with FMAs, then block_reduce adds the threads' sums.
// Rows up to kNormHeld * kNormThreads long are loaded at once (one trip to
// memory, not a chain of loads), in the same order. rms_norm and the matmul
// that normalizes its x rows both call it, so their scales are the same bits.
constexpr int kNormThreads = 256;
constexpr int kNormHeld = 16;

__device__ __forceinline__ float block_rms_scale(const float* row, int64_t dim, float eps, float* shared) {
  float s = 0.0f;
  if (dim <= kNormHeld * kNormThreads) {
    float v[kNormHeld];
#pragma unroll
    for (int j = 0; j < kNormHeld; ++j) {
      const int64_t i = threadIdx.x + j * int64_t{kNormThreads};
      v[j] = i < dim ? row[i] : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < kNormHeld; ++j) s = fmaf(v[j], v[j], s);
  } else {
    for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) s = fmaf(row[i], row[i], s);
  }
  return 1.0f / sqrtf(block_reduce<false>(s, shared) / static_cast<float>(dim) + eps);
}

// Rope's turn of the pair (a, b) at `position`, by the angle position * inv_freq
// with cos and sin scaled by `scaling`, in one rounding order (no contraction left
// to the compiler; these are the fused multiply-adds nvcc chose for the expressions
// a * c - b * s and b * c + a * s): rope_store and the decode q/k/v epilogue
// (MmaJob::rope) both call it, so a query or key turned by either is the same bits.
__device__ __forceinline__ void rotate_pair(float& a, float& b, float position, float inv_freq, float scaling) {
  const float angle = __fmul_rn(position, inv_freq);
  const float c = __fmul_rn(cosf(angle), scaling), s = __fmul_rn(sinf(angle), scaling);
  const float x = a, y = b;
  a = __fmaf_rn(c, x, -__fmul_rn(s, y));
  b = __fmaf_rn(s, x, __fmul_rn(c, y));
}

// KvPages::offset, on the device.
__device__ __forceinline__ int64_t kv_offset(const KvPages& p, int64_t block, int64_t layer, int kv, int64_t head) {
  return (((block * p.layers + layer) * 2 + kv) * p.n_kv_heads + head) * p.block_size * p.head_dim;
}

// Calls fn with the DType as a template argument.
template <typename Fn>
void with_dtype(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kF32: return fn.template operator()<DType::kF32>();
    case DType::kBF16: return fn.template operator()<DType::kBF16>();
    case DType::kF16: return fn.template operator()<DType::kF16>();
    default: TS_CHECK(false, "cuda kernels take f32, bf16 or f16, not ", dtype_name(dtype));
  }
}

}  // namespace tessera::cuda
