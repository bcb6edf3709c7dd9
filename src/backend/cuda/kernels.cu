#include "backend/cuda/kernels.cuh"

#include "backend/cuda/common.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "core/check.h"

namespace tessera::cuda {

namespace {

// ---- matmul ----------------------------------------------------------------
//
// A block of kWarps warps computes kRows weight rows for kTok tokens at a time.
// Thread i of the block owns the 8-element chunks i, i + 128, ... of k and sums
// them in order with FMAs; each warp adds its lanes up by shuffles, and the
// warps' sums are added in warp order. That order depends only on k, so a row of
// y is bitwise the same for any number of tokens, rows or blocks in the launch
// (batch invariance), and one kernel serves decode (streaming each weight once)
// and prefill. (Measured against a warp-per-row layout on the 8B shape, this one
// streamed 63-88% of the copy bandwidth at one token against 18-85%.)
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 4;

template <DType D, int kTok, bool kVec>
__global__ void __launch_bounds__(kThreads)
    matmul_kernel(const float* __restrict__ x, int64_t tokens, int64_t k, const Storage<D>* __restrict__ w, int64_t n,
                  const Storage<D>* __restrict__ bias, float* __restrict__ y, bool accumulate) {
  let_next_start();
  wait_for_earlier();
  __shared__ float partial[kWarps][kRows][kTok];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRows;
  const int64_t chunks = (k + 7) / 8;
  for (int64_t t0 = 0; t0 < tokens; t0 += kTok) {
    float acc[kRows][kTok] = {};
    for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
      float wv[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) load8<D, kVec>(w + min(row0 + r, n - 1) * k, c, k, wv[r]);
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        if (t0 + t >= tokens) break;
        float xv[8];
        load8<DType::kF32, kVec>(x + (t0 + t) * k, c, k, xv);
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int j = 0; j < 8; ++j) acc[r][t] = fmaf(wv[r][j], xv[j], acc[r][t]);
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int t = 0; t < kTok; ++t) {
        const float s = warp_sum(acc[r][t]);
        if (lane == 0) partial[warp][r][t] = s;
      }
    __syncthreads();
    if (threadIdx.x < kRows * kTok) {
      const int r = threadIdx.x / kTok, t = threadIdx.x % kTok;
      float s = partial[0][r][t];
#pragma unroll
      for (int i = 1; i < kWarps; ++i) s += partial[i][r][t];
      const int64_t row = row0 + r;
      if (row < n && t0 + t < tokens) {
        const float value = bias != nullptr ? s + widen<D>(bias[row]) : s;
        float& out = y[(t0 + t) * n + row];
        out = accumulate ? out + value : value;
      }
    }
    __syncthreads();
  }
}

template <DType D, int kTok>
void launch_matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, int64_t n,
                   const void* bias, float* y, bool accumulate) {
  const auto* ws = static_cast<const Storage<D>*>(w);
  const auto* bs = static_cast<const Storage<D>*>(bias);
  const dim3 grid(static_cast<unsigned>((n + kRows - 1) / kRows));
  if (k % 8 == 0) {
    launch_kernel(matmul_kernel<D, kTok, true>, grid, kThreads, 0, stream, x, tokens, k, ws, n, bs, y, accumulate);
  } else {
    launch_kernel(matmul_kernel<D, kTok, false>, grid, kThreads, 0, stream, x, tokens, k, ws, n, bs, y, accumulate);
  }
}

template <DType D>
void matmul_typed(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, int64_t n,
                  const void* bias, float* y, bool accumulate) {
  // The token tile only changes how often weights are re-read, never a sum's order.
  if (tokens == 1) return launch_matmul<D, 1>(stream, x, tokens, k, w, n, bias, y, accumulate);
  return launch_matmul<D, 8>(stream, x, tokens, k, w, n, bias, y, accumulate);
}

// ---- elementwise and row kernels --------------------------------------------

// One block of kNormThreads a row (block_rms_scale).
template <DType D>
__global__ void rms_norm_kernel(const float* x, int64_t dim, const Storage<D>* __restrict__ weight, float eps,
                                float* y) {
  let_next_start();
  wait_for_earlier();
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * dim;
  float* yr = y + blockIdx.x * dim;
  const float scale = block_rms_scale(xr, dim, eps, shared);
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) yr[i] = widen<D>(weight[i]) * (xr[i] * scale);
}

template <DType D>
__global__ void embed_kernel(const Storage<D>* __restrict__ table, int64_t hidden, const int32_t* __restrict__ ids,
                             float* __restrict__ y) {
  let_next_start();
  wait_for_earlier();
  const Storage<D>* row = table + static_cast<int64_t>(ids[blockIdx.x]) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) y[blockIdx.x * hidden + i] = widen<D>(row[i]);
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  let_next_start();
  wait_for_earlier();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = silu_times(gate[i], up[i]);
}

// CpuDevice::gelu_tanh_mul's formula, in its order.
__global__ void gelu_tanh_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  let_next_start();
  wait_for_earlier();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float x = gate[i];
    out[i] = 0.5f * x * (1.0f + tanhf(0.7978845608028654f * (x + 0.044715f * x * x * x))) * up[i];
  }
}

__global__ void scale_kernel(float* x, int64_t n, float factor) {
  let_next_start();
  wait_for_earlier();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    x[i] *= factor;
}

__global__ void add_kernel(const float* x, int64_t n, float* y) {
  let_next_start();
  wait_for_earlier();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

// One thread per element of the rows moved: y[r] = x[rows[r]].
__global__ void gather_rows_kernel(const float* x, const int32_t* rows, int64_t count, int64_t dim, float* y) {
  let_next_start();
  wait_for_earlier();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count * dim;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] = x[rows[i / dim] * dim + i % dim];
}

// y[rows[r]] += scale[r] * x[r]; rows are distinct, so no two threads write one element.
__global__ void scatter_add_rows_kernel(const float* x, const float* scale, const int32_t* rows, int64_t count,
                                        int64_t dim, float* y) {
  let_next_start();
  wait_for_earlier();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count * dim;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float product = __fmul_rn(scale[i / dim], x[i]);  // rounded, then added (as the CPU)
    y[rows[i / dim] * dim + i % dim] += product;
  }
}

// One block a row. Each thread keeps the first of its largest values (its indices
// rise), then a fixed tree keeps the larger, or on a tie the lower index: the
// first largest of the row, whatever the order threads finish in. NaN is never
// larger, so never chosen.
constexpr int kArgmaxThreads = 1024;
__global__ void __launch_bounds__(kArgmaxThreads) argmax_kernel(const float* x, int64_t n, int32_t* y) {
  let_next_start();
  wait_for_earlier();
  const float* row = x + blockIdx.x * n;
  float best = -INFINITY;
  int64_t at = n;  // none yet
  for (int64_t i = threadIdx.x; i < n; i += kArgmaxThreads) {
    const float v = row[i];
    if (v > best || (at == n && v == best)) best = v, at = i;
  }
  const auto better = [](float v, int64_t i, float bv, int64_t bi) { return v > bv || (v == bv && i < bi); };
  for (int offset = 16; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, best, offset);
    const int64_t i = __shfl_xor_sync(0xffffffffu, at, offset);
    if (better(v, i, best, at)) best = v, at = i;
  }
  __shared__ float values[kArgmaxThreads / 32];
  __shared__ int64_t indices[kArgmaxThreads / 32];
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  if (lane == 0) values[warp] = best, indices[warp] = at;
  __syncthreads();
  if (warp != 0) return;
  best = lane < kArgmaxThreads / 32 ? values[lane] : -INFINITY;
  at = lane < kArgmaxThreads / 32 ? indices[lane] : n;
  for (int offset = 16; offset > 0; offset /= 2) {
    const float v = __shfl_xor_sync(0xffffffffu, best, offset);
    const int64_t i = __shfl_xor_sync(0xffffffffu, at, offset);
    if (better(v, i, best, at)) best = v, at = i;
  }
  if (lane == 0) y[blockIdx.x] = static_cast<int32_t>(at == n ? 0 : at);  // a row of NaN: 0, as std::max_element
}

unsigned elementwise_blocks(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 65535)); }

}  // namespace

bool switched_off(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string_view(value) == "0";
}

bool asked(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && std::string_view(value) == "1";
}

bool overlap_launches() {
  static const bool on = !switched_off("TESSERA_CUDA_OVERLAP");
  return on;
}

void matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t n,
            const void* bias, DType bias_dtype, float* y, bool accumulate) {
  TS_CHECK(bias == nullptr || bias_dtype == w_dtype, "bias dtype ", dtype_name(bias_dtype), " for weights of ",
           dtype_name(w_dtype));
  with_dtype(w_dtype, [&]<DType D>() { matmul_typed<D>(stream, x, tokens, k, w, n, bias, y, accumulate); });
}

void rms_norm(cudaStream_t stream, const float* x, int64_t rows, int64_t dim, const void* weight, DType weight_dtype,
              float eps, float* y) {
  with_dtype(weight_dtype, [&]<DType D>() {
    launch_kernel(rms_norm_kernel<D>, static_cast<unsigned>(rows), kNormThreads, 0, stream, x, dim,
                  static_cast<const Storage<D>*>(weight), eps, y);
  });
}

void embed(cudaStream_t stream, const void* table, DType dtype, int64_t hidden, const int32_t* ids, int64_t count,
           float* y) {
  with_dtype(dtype, [&]<DType D>() {
    launch_kernel(embed_kernel<D>, static_cast<unsigned>(count), 256, 0, stream, static_cast<const Storage<D>*>(table),
                  hidden, ids, y);
  });
}

void silu_mul(cudaStream_t stream, const float* gate, const float* up, int64_t n, float* out) {
  launch_kernel(silu_mul_kernel, elementwise_blocks(n), 256, 0, stream, gate, up, n, out);
}

void gelu_tanh_mul(cudaStream_t stream, const float* gate, const float* up, int64_t n, float* out) {
  launch_kernel(gelu_tanh_mul_kernel, elementwise_blocks(n), 256, 0, stream, gate, up, n, out);
}

void scale(cudaStream_t stream, float* x, int64_t n, float factor) {
  launch_kernel(scale_kernel, elementwise_blocks(n), 256, 0, stream, x, n, factor);
}

void add(cudaStream_t stream, const float* x, int64_t n, float* y) {
  launch_kernel(add_kernel, elementwise_blocks(n), 256, 0, stream, x, n, y);
}

void gather_rows(cudaStream_t stream, const float* x, const int32_t* rows, int64_t count, int64_t dim, float* y) {
  launch_kernel(gather_rows_kernel, elementwise_blocks(count * dim), 256, 0, stream, x, rows, count, dim, y);
}

void scatter_add_rows(cudaStream_t stream, const float* x, const float* scale, const int32_t* rows, int64_t count,
                      int64_t dim, float* y) {
  launch_kernel(scatter_add_rows_kernel, elementwise_blocks(count * dim), 256, 0, stream, x, scale, rows, count, dim,
                y);
}

void argmax(cudaStream_t stream, const float* x, int64_t rows, int64_t n, int32_t* y) {
  if (rows > 0) launch_kernel(argmax_kernel, static_cast<unsigned>(rows), kArgmaxThreads, 0, stream, x, n, y);
}

}  // namespace tessera::cuda
