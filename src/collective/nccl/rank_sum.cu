#include "collective/nccl/rank_sum.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/check.h"

namespace tessera::collective {
namespace {

template <typename T>
__device__ __forceinline__ float widen(T v) {
  if constexpr (std::is_same_v<T, float>) return v;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat162float(v);
  if constexpr (std::is_same_v<T, __half>) return __half2float(v);
}

template <typename T>
__device__ __forceinline__ T narrow(float v) {
  if constexpr (std::is_same_v<T, float>) return v;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(v);
  if constexpr (std::is_same_v<T, __half>) return __float2half_rn(v);
}

template <typename T>
__global__ void rank_sum_kernel(const T* __restrict__ gathered, int size, int64_t per_rank, int64_t first,
                                int64_t count, T* __restrict__ out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  float acc = widen(gathered[first + i]);
  for (int r = 1; r < size; ++r) acc = __fadd_rn(acc, widen(gathered[r * per_rank + first + i]));
  out[i] = narrow<T>(acc);
}

template <typename T>
void launch(cudaStream_t stream, const void* gathered, int size, int64_t per_rank, int64_t first, int64_t count,
            void* out) {
  const auto blocks = static_cast<unsigned>((count + 255) / 256);
  rank_sum_kernel<T>
      <<<blocks, 256, 0, stream>>>(static_cast<const T*>(gathered), size, per_rank, first, count, static_cast<T*>(out));
}

}  // namespace

void rank_sum(cudaStream_t stream, const void* gathered, int size, int64_t per_rank, int64_t first, int64_t count,
              DType dtype, void* out) {
  if (count == 0) return;
  switch (dtype) {
    case DType::kF32: return launch<float>(stream, gathered, size, per_rank, first, count, out);
    case DType::kBF16: return launch<__nv_bfloat16>(stream, gathered, size, per_rank, first, count, out);
    case DType::kF16: return launch<__half>(stream, gathered, size, per_rank, first, count, out);
    default: TS_CHECK(false, "[nccl] dtype ", dtype_name(dtype), " cannot be summed");
  }
}

}  // namespace tessera::collective
