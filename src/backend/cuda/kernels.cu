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
                  const Storage<D>* __restrict__ bias, float* __restrict__ y) {
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
      if (row < n && t0 + t < tokens) y[(t0 + t) * n + row] = bias != nullptr ? s + widen<D>(bias[row]) : s;
    }
    __syncthreads();
  }
}

template <DType D, int kTok>
void launch_matmul(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const void* w, int64_t n,
                   const void* bias, float* y) {
  const auto* ws = static_cast<const Storage<D>*>(w);
  const auto* bs = static_cast<const Storage<D>*>(bias);
  const dim3 grid(static_cast<unsigned>((n + kRows - 1) / kRows));
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
// token's position (not on how the prompt was split or what else runs).
// Thread i scores position chunk + i (its key read as 16-byte pieces, summed in
// order); the chunk's max and sum come from fixed-tree block reductions, and an
// online softmax rescales the running output. For the values, the threads form
// kChunk / G lanes of G = head_dim / 8 groups: lane p, group g sums dimensions
// [8g, 8g + 8) over positions p, p + lanes, ... in order, and the lanes' partial
// sums are added in lane order. Every order is fixed by head_dim alone.
constexpr int kChunk = 128;
constexpr int kMaxHeadDim = 512;

template <DType D, bool kVec>
__global__ void __launch_bounds__(kChunk)
    attention_kernel(AttentionArgs a, KvPages p, const int32_t* __restrict__ blocks) {
  // q [head_dim], weights [kChunk], partial [kChunk / groups][groups * 8], out [head_dim], reduction [32]
  extern __shared__ float shared[];
  const int64_t hd = p.head_dim, bs = p.block_size;
  const int64_t groups = (hd + 7) / 8, lanes = kChunk / groups;
  float* q = shared;
  float* weights = q + hd;
  float* partial = weights + kChunk;
  float* out = partial + lanes * groups * 8;
  float* reduction = out + hd;
  const int64_t t = blockIdx.x / a.n_heads, h = blockIdx.x % a.n_heads;
  const int64_t kv = h / (a.n_heads / p.n_kv_heads);
  const int64_t pos = a.pos0 + t;
  const int64_t first = a.sliding_window > 0 ? max(int64_t{0}, pos - a.sliding_window + 1) : 0;
  const auto* base = static_cast<const Storage<D>*>(p.base);
  const float* q_in = a.q + (t * a.n_heads + h) * hd;
  for (int64_t d = threadIdx.x; d < hd; d += kChunk) {
    q[d] = q_in[d];
    out[d] = 0.0f;
  }
  __syncthreads();
  const auto row = [&](int64_t j, int kind) {
    return base + kv_offset(p, blocks[j / bs], a.layer, kind, kv) + (j % bs) * hd;
  };

  float running_max = -INFINITY, running_sum = 0.0f;
  const int64_t lane = threadIdx.x / groups, group = threadIdx.x % groups;
  for (int64_t j0 = first; j0 <= pos; j0 += kChunk) {
    const int64_t j = j0 + threadIdx.x;
    float score = -INFINITY;
    if (j <= pos) {
      const Storage<D>* key = row(j, 0);
      float dot = 0.0f;
#pragma unroll 16
      for (int64_t c = 0; c < groups; ++c) {
        float k8[8];
        load8<D, kVec>(key, c, hd, k8);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          if (8 * c + e < hd) dot = fmaf(q[8 * c + e], k8[e], dot);
      }
      score = dot * a.scale;
    }
    const float new_max = fmaxf(running_max, block_reduce<true>(score, reduction));
    const float weight = j <= pos ? expf(score - new_max) : 0.0f;
    weights[threadIdx.x] = weight;
    const float chunk_sum = block_reduce<false>(weight, reduction);  // its barrier also publishes `weights`
    const float rescale = expf(running_max - new_max);
    running_sum = running_sum * rescale + chunk_sum;
    running_max = new_max;

    const int64_t count = min(static_cast<int64_t>(kChunk), pos - j0 + 1);
    if (lane < lanes) {
      float sum8[8] = {};
#pragma unroll 16
      for (int64_t r = lane; r < count; r += lanes) {
        float v8[8];
        load8<D, kVec>(row(j0 + r, 1), group, hd, v8);
#pragma unroll
        for (int e = 0; e < 8; ++e) sum8[e] = fmaf(weights[r], v8[e], sum8[e]);
      }
#pragma unroll
      for (int e = 0; e < 8; ++e) partial[lane * groups * 8 + group * 8 + e] = sum8[e];
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < hd; d += kChunk) {
      float chunk_out = partial[d];
      for (int64_t l = 1; l < lanes; ++l) chunk_out += partial[l * groups * 8 + d];
      out[d] = out[d] * rescale + chunk_out;
    }
    __syncthreads();  // `weights` and `partial` are rewritten by the next chunk
  }
  float* result = a.out + (t * a.n_heads + h) * hd;
  for (int64_t d = threadIdx.x; d < hd; d += kChunk) result[d] = out[d] / running_sum;
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
  TS_CHECK(p.head_dim <= kMaxHeadDim, "head_dim ", p.head_dim, " above ", kMaxHeadDim);
  const int64_t groups = (p.head_dim + 7) / 8, lanes = kChunk / groups;
  const size_t shared = static_cast<size_t>(2 * p.head_dim + kChunk + lanes * groups * 8 + 32) * sizeof(float);
  const auto units = static_cast<unsigned>(args.tokens * args.n_heads);
  with_dtype(p.dtype, [&]<DType D>() {
    if (p.head_dim % 8 == 0) {
      attention_kernel<D, true><<<units, kChunk, shared, stream>>>(args, p, blocks);
    } else {
      attention_kernel<D, false><<<units, kChunk, shared, stream>>>(args, p, blocks);
    }
  });
}

void silu_mul(cudaStream_t stream, const float* gate, const float* up, int64_t n, float* out) {
  silu_mul_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(gate, up, n, out);
}

void add(cudaStream_t stream, const float* x, int64_t n, float* y) {
  add_kernel<<<elementwise_blocks(n), 256, 0, stream>>>(x, n, y);
}

}  // namespace tessera::cuda
