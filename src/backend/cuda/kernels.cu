#include "backend/cuda/kernels.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "core/check.h"

namespace tessera::cuda {

namespace {

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
__device__ float block_reduce(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = (blockDim.x + 31) / 32;
  v = kMax ? warp_max(v) : warp_sum(v);
  __syncthreads();  // `shared` may still be read from the previous reduction
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  float total = shared[0];
  for (int i = 1; i < warps; ++i) total = kMax ? fmaxf(total, shared[i]) : total + shared[i];
  return total;
}

// KvPages::offset, on the device.
__device__ __forceinline__ int64_t kv_offset(const KvPages& p, int64_t block, int64_t layer, int kv, int64_t head) {
  return (((block * p.layers + layer) * 2 + kv) * p.n_kv_heads + head) * p.block_size * p.head_dim;
}

// ---- matmul ----------------------------------------------------------------
//
// Each warp computes kRows weight rows for kTok tokens at a time. Lane l owns the
// 8-element chunks l, l + 32, ... of k and sums them in order with FMAs, then the
// warp adds its lanes up by shuffles. That order depends only on k, so a row of y
// is bitwise the same for any number of tokens, rows or warps in the launch
// (batch invariance), and one kernel serves decode (streaming each weight once)
// and prefill. No warp waits for another: the block is only a group of warps.
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 2;

template <DType D, int kTok, bool kVec>
__global__ void __launch_bounds__(kThreads)
    matmul_kernel(const float* __restrict__ x, int64_t tokens, int64_t k, const Storage<D>* __restrict__ w, int64_t n,
                  const Storage<D>* __restrict__ bias, float* __restrict__ y) {
  const int lane = threadIdx.x % 32;
  const int64_t row0 = (static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32) * kRows;
  if (row0 >= n) return;
  const int64_t chunks = (k + 7) / 8;
  const Storage<D>* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) rows[r] = w + min(row0 + r, n - 1) * k;
  for (int64_t t0 = 0; t0 < tokens; t0 += kTok) {
    float acc[kRows][kTok] = {};
#pragma unroll 4
    for (int64_t c = lane; c < chunks; c += 32) {
      float wv[kRows][8];
#pragma unroll
      for (int r = 0; r < kRows; ++r) load8<D, kVec>(rows[r], c, k, wv[r]);
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
        const float sum = warp_sum(acc[r][t]);
        const int64_t row = row0 + r;
        if (lane == 0 && row < n && t0 + t < tokens)
          y[(t0 + t) * n + row] = bias != nullptr ? sum + widen<D>(bias[row]) : sum;
      }
  }
}

template <DType D, int kTok>
void launch_matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, int64_t n,
                   const void* bias, float* y) {
  const auto* ws = static_cast<const Storage<D>*>(w);
  const auto* bs = static_cast<const Storage<D>*>(bias);
  const dim3 grid(static_cast<unsigned>((n + kRows * kWarps - 1) / (kRows * kWarps)));
  if (k % 8 == 0) {
    matmul_kernel<D, kTok, true><<<grid, kThreads, 0, stream>>>(x, tokens, k, ws, n, bs, y);
  } else {
    matmul_kernel<D, kTok, false><<<grid, kThreads, 0, stream>>>(x, tokens, k, ws, n, bs, y);
  }
}

template <DType D>
void matmul_typed(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, int64_t n,
                  const void* bias, float* y) {
  // The token tile only changes how often weights are re-read, never a sum's order.
  if (tokens == 1) return launch_matmul<D, 1>(stream, x, tokens, k, w, n, bias, y);
  return launch_matmul<D, 8>(stream, x, tokens, k, w, n, bias, y);
}

// ---- elementwise and row kernels --------------------------------------------

template <DType D>
__global__ void rms_norm_kernel(const float* x, int64_t dim, const Storage<D>* __restrict__ weight, float eps,
                                float* y) {
  __shared__ float shared[32];
  const float* xr = x + blockIdx.x * dim;
  float* yr = y + blockIdx.x * dim;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) s = fmaf(xr[i], xr[i], s);
  const float inv = 1.0f / sqrtf(block_reduce<false>(s, shared) / static_cast<float>(dim) + eps);
  for (int64_t i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = widen<D>(weight[i]) * (xr[i] * inv);
}

template <DType D>
__global__ void embed_kernel(const Storage<D>* __restrict__ table, int64_t hidden, const int32_t* __restrict__ ids,
                             float* __restrict__ y) {
  const Storage<D>* row = table + static_cast<int64_t>(ids[blockIdx.x]) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) y[blockIdx.x * hidden + i] = widen<D>(row[i]);
}

__global__ void rope_kernel(float* x, int64_t heads, int64_t head_dim, int64_t pos0,
                            const float* __restrict__ inv_freq) {
  const int64_t t = blockIdx.x / heads;
  float* v = x + static_cast<int64_t>(blockIdx.x) * head_dim;
  const int64_t half = head_dim / 2;
  const auto position = static_cast<float>(pos0 + t);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float angle = position * inv_freq[i];
    const float c = cosf(angle), s = sinf(angle);
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = b * c + a * s;
  }
}

template <DType D>
__global__ void kv_store_kernel(KvPages pages, int64_t layer, const int32_t* __restrict__ blocks, int64_t pos0,
                                const float* __restrict__ k, const float* __restrict__ v) {
  const int64_t t = blockIdx.x, h = blockIdx.y, hd = pages.head_dim;
  const int64_t pos = pos0 + t;
  const int64_t block = blocks[pos / pages.block_size];
  const int64_t row = (pos % pages.block_size) * hd;
  auto* base = static_cast<Storage<D>*>(pages.base);
  Storage<D>* keys = base + kv_offset(pages, block, layer, 0, h) + row;
  Storage<D>* values = base + kv_offset(pages, block, layer, 1, h) + row;
  const int64_t src = (t * pages.n_kv_heads + h) * hd;
  for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) {
    keys[i] = narrow<D>(k[src + i]);
    values[i] = narrow<D>(v[src + i]);
  }
}

// ---- attention ----------------------------------------------------------------
//
// One block per (token, head). The visible positions are taken in chunks of
// kChunk counted from the first visible one, so the chunks depend only on the
// token's position (not on how the prompt was split or what else runs). A warp
// scores a position; the chunk's max and sum come from fixed-tree block
// reductions, and an online softmax rescales the running output, which thread d
// keeps for dimensions d, d + kChunk, ...
constexpr int kChunk = 128;
constexpr int kMaxDimsPerThread = 4;  // head_dim <= 512

template <DType D>
__global__ void __launch_bounds__(kChunk)
    attention_kernel(AttentionArgs a, KvPages p, const int32_t* __restrict__ blocks) {
  extern __shared__ float shared[];  // q [head_dim], weights [kChunk], reduction [32]
  float* q = shared;
  float* weights = shared + p.head_dim;
  float* reduction = weights + kChunk;
  const int64_t hd = p.head_dim, bs = p.block_size;
  const int64_t t = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads;
  const int64_t kv = h / (a.n_heads / p.n_kv_heads);
  const int64_t pos = a.pos0 + t;
  const int64_t first = a.sliding_window > 0 ? max(int64_t{0}, pos - a.sliding_window + 1) : 0;
  const auto* base = static_cast<const Storage<D>*>(p.base);
  const float* q_in = a.q + (t * a.n_heads + h) * hd;
  for (int64_t d = threadIdx.x; d < hd; d += kChunk) q[d] = q_in[d];
  __syncthreads();

  float running_max = -INFINITY, running_sum = 0.0f;
  float acc[kMaxDimsPerThread] = {};
  for (int64_t j0 = first; j0 <= pos; j0 += kChunk) {
    // Scores: warp w takes positions j0 + w, j0 + w + 4, ...; lane l sums the
    // dimensions l, l + 32, ... in order, then the warp's shuffles add the lanes.
    for (int r = threadIdx.x / 32; r < kChunk; r += kChunk / 32) {
      const int64_t jr = j0 + r;
      float s = -INFINITY;
      if (jr <= pos) {
        const Storage<D>* key = base + kv_offset(p, blocks[jr / bs], a.layer, 0, kv) + (jr % bs) * hd;
        float dot = 0.0f;
        for (int64_t d = threadIdx.x % 32; d < hd; d += 32) dot = fmaf(q[d], widen<D>(key[d]), dot);
        s = warp_sum(dot) * a.scale;
      }
      if (threadIdx.x % 32 == 0) weights[r] = s;
    }
    __syncthreads();
    const int64_t j = j0 + threadIdx.x;
    const float score = weights[threadIdx.x];
    const float new_max = fmaxf(running_max, block_reduce<true>(score, reduction));
    const float weight = j <= pos ? expf(score - new_max) : 0.0f;
    weights[threadIdx.x] = weight;
    const float chunk_sum = block_reduce<false>(weight, reduction);  // its barrier also publishes `weights`
    const float rescale = expf(running_max - new_max);
    running_sum = running_sum * rescale + chunk_sum;
    const int64_t count = min(static_cast<int64_t>(kChunk), pos - j0 + 1);
#pragma unroll
    for (int i = 0; i < kMaxDimsPerThread; ++i) {
      const int64_t d = threadIdx.x + static_cast<int64_t>(i) * kChunk;
      if (d >= hd) break;
      float o = acc[i] * rescale;
#pragma unroll 8
      for (int64_t r = 0; r < count; ++r) {
        const int64_t jr = j0 + r;
        const Storage<D>* value = base + kv_offset(p, blocks[jr / bs], a.layer, 1, kv) + (jr % bs) * hd;
        o = fmaf(weights[r], widen<D>(value[d]), o);
      }
      acc[i] = o;
    }
    running_max = new_max;
    __syncthreads();  // `weights` is rewritten by the next chunk
  }
  float* out = a.out + (t * a.n_heads + h) * hd;
#pragma unroll
  for (int i = 0; i < kMaxDimsPerThread; ++i) {
    const int64_t d = threadIdx.x + static_cast<int64_t>(i) * kChunk;
    if (d < hd) out[d] = acc[i] / running_sum;
  }
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__global__ void add_kernel(const float* x, int64_t n, float* y) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    y[i] += x[i];
}

unsigned elementwise_blocks(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 65535)); }

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

}  // namespace

void matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t n,
            const void* bias, DType bias_dtype, float* y) {
  TS_CHECK(bias == nullptr || bias_dtype == w_dtype, "bias dtype ", dtype_name(bias_dtype), " for weights of ",
           dtype_name(w_dtype));
  with_dtype(w_dtype, [&]<DType D>() { matmul_typed<D>(stream, x, tokens, k, w, n, bias, y); });
}

void rms_norm(cudaStream_t stream, const float* x, int64_t rows, int64_t dim, const void* weight, DType weight_dtype,
              float eps, float* y) {
  with_dtype(weight_dtype, [&]<DType D>() {
    rms_norm_kernel<D>
        <<<static_cast<unsigned>(rows), 256, 0, stream>>>(x, dim, static_cast<const Storage<D>*>(weight), eps, y);
  });
}

void embed(cudaStream_t stream, const void* table, DType dtype, int64_t hidden, const int32_t* ids, int64_t count,
           float* y) {
  with_dtype(dtype, [&]<DType D>() {
    embed_kernel<D>
        <<<static_cast<unsigned>(count), 256, 0, stream>>>(static_cast<const Storage<D>*>(table), hidden, ids, y);
  });
}

void rope(cudaStream_t stream, float* x, int64_t tokens, int64_t heads, int64_t head_dim, int64_t pos0,
          const float* inv_freq) {
  const auto threads = static_cast<unsigned>(std::clamp<int64_t>(head_dim / 2, 32, 256));
  rope_kernel<<<static_cast<unsigned>(tokens * heads), threads, 0, stream>>>(x, heads, head_dim, pos0, inv_freq);
}

void kv_store(cudaStream_t stream, const KvPages& pages, int64_t layer, const int32_t* blocks, int64_t pos0,
              int64_t tokens, const float* k, const float* v) {
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(pages.n_kv_heads));
  const auto threads = static_cast<unsigned>(std::clamp<int64_t>(pages.head_dim, 32, 256));
  with_dtype(pages.dtype,
             [&]<DType D>() { kv_store_kernel<D><<<grid, threads, 0, stream>>>(pages, layer, blocks, pos0, k, v); });
}

void attention(cudaStream_t stream, const AttentionArgs& args, const int32_t* blocks) {
  const KvPages& p = *args.pages;
  TS_CHECK(p.head_dim <= kChunk * kMaxDimsPerThread, "head_dim ", p.head_dim, " above ", kChunk * kMaxDimsPerThread);
  const size_t shared = static_cast<size_t>(p.head_dim + kChunk + 32) * sizeof(float);
  const auto units = static_cast<unsigned>(args.tokens * args.n_heads);
  with_dtype(p.dtype, [&]<DType D>() { attention_kernel<D><<<units, kChunk, shared, stream>>>(args, p, blocks); });
}

void silu_mul(cudaStream_t stream, const float* gate, const float* up, int64_t n, float* out) {
  silu_mul_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(gate, up, n, out);
}

void add(cudaStream_t stream, const float* x, int64_t n, float* y) {
  add_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, n, y);
}

}  // namespace tessera::cuda
