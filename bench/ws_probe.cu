// A probe for the tiled GEMM's next step (docs/gpu.md, "Prefill"): a
// warp-specialized kernel in the shape Hopper's fast GEMMs take. One warpgroup
// produces (a thread issues TMA copies of a chunk's weight rows and tokens into
// a ring of stages, each completing on an mbarrier), two consume with wgmma, x
// (the tile's tokens) read from shared memory, 128-byte swizzled as the TMA wrote it.
//
// The weights (A) come from shared memory too ("ss"). Both operands are then in
// natural k order, which is not tessera's (x in mma slot order, docs/gpu.md), so
// these are checked against a double-precision reference on the host, not bit for
// bit; tessera's own kernel on wgmma (wgmma_gemm.cu, the weights from registers in
// slot order) runs as mma_gemm (TESSERA_CUDA_WGMMA=0: its mma.sync kernel).
//
// "8sums": the order batch invariance needs (chunk c of k's 64-wide chunks to sum
// c mod 8, each sum a chain, the sums added in order at the end: two accumulator
// sets a thread); "1chain": one chain over all of k, what a plain GEMM does. Tiles
// of 128 weight rows x 128 tokens. Beside them, tessera's mma_gemm and cuBLAS
// (cublasGemmEx, bf16 in, f32 out) in the same run.
//   ws_probe
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/tma.cuh"
#include "core/dtype.h"
#include "probe.cuh"

namespace tessera::cuda {
namespace {

constexpr int kRows = 128;                 // weight rows a block: two consumer warpgroups of 64
constexpr int kThreads = 384;              // the producer warpgroup, then the two consumers
constexpr int kWeightBytes = kRows * 128;  // a chunk: 64 k-values, 128 bytes a row (one swizzle row)

constexpr int kTokens = 128;                               // tokens a block
constexpr int kStageBytes = kWeightBytes + kTokens * 128;  // a chunk's weight rows, then its tokens
template <int kStages>
constexpr size_t smem_bytes() {
  return 1024 + size_t{kStages} * kStageBytes + 2 * kStages * sizeof(uint64_t);
}

// d += A (64 x 16, described by a) times B (16 x 128, described by b), both from shared memory.
__device__ __forceinline__ void wgmma_ss(float (&d)[64], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" TESSERA_WGMMA_D64 "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : TESSERA_WGMMA_D64_OPERANDS(d)
      : "l"(a), "l"(b));
}

// Chunk of step i in the eight sums' order (sum 0's chunks 0, 8, ..., then sum 1's):
// sums below r have q + 1 chunks, the rest q.
__device__ __forceinline__ int chunk_of(int i, int q, int r) {
  const int long_steps = r * (q + 1);
  if (i < long_steps) return i / (q + 1) + kMmaSplit * (i % (q + 1));
  i -= long_steps;
  return r + i / q + kMmaSplit * (i % q);
}

__global__ void round_kernel(const float* __restrict__ x, int64_t count, __nv_bfloat16* __restrict__ y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) y[i] = __float2bfloat16_rn(x[i]);
}

// y [tokens][n] = x [tokens][k] times w [n][k] transposed, k a multiple of 64.
// kOrdered: the eight sums' order; else one chain in k's order.
template <int kStages, bool kOrdered>
__global__ void __launch_bounds__(kThreads, 1)
    ws_gemm_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map, int64_t tokens,
                   int64_t n, int64_t k, float* __restrict__ y) {
  extern __shared__ uint8_t smem_raw[];
  // Swizzled tiles start on 1,024 bytes.
  uint8_t* smem = smem_raw + ((1024 - smem_address(smem_raw) % 1024) % 1024);
  auto* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* consumed = full + kStages;  // the consumer warps are done with a stage
  const int warpgroup = threadIdx.x / 128;
  const int row0 = static_cast<int>(blockIdx.y) * kRows, token0 = static_cast<int>(blockIdx.x) * kTokens;
  const int chunks = static_cast<int>(k / kMmaChunk), q = chunks / kMmaSplit, r = chunks % kMmaSplit;
  const auto chunk_at = [&](int step) { return kOrdered ? chunk_of(step, q, r) : step; };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1), mbar_init(&consumed[s], 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  if (warpgroup == 0) {  // the producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0)
      for (int step = 0; step < chunks; ++step) {
        const int stage = step % kStages;
        if (step >= kStages) mbar_wait(&consumed[stage], (step / kStages - 1) & 1);  // its last chunk consumed
        uint8_t* at = smem + stage * kStageBytes;
        const int col = chunk_at(step) * kMmaChunk;
        mbar_expect(&full[stage], kStageBytes);
        tma_load(at, &w_map, col, row0, &full[stage]);
        tma_load(at + kWeightBytes, &x_map, col, token0, &full[stage]);
      }
  } else {  // a consumer: weight rows 64 (warpgroup - 1) onwards, all kTokens tokens
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    const int half = warpgroup - 1, lane = threadIdx.x % 32, warp = threadIdx.x / 32 % 4;
    float acc[64], total[64];
    const int g = lane / 4, t = lane % 4;
    const auto release = [&](int step) {
      __syncwarp();
      mbar_arrive_if_first(&consumed[step % kStages], lane);
    };
    const int sums = kOrdered ? kMmaSplit : 1;
    for (int sum = 0, step = 0; sum < sums; ++sum) {
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
      const int count = kOrdered ? q + (sum < r ? 1 : 0) : chunks;
      int unreleased = -1;
      for (int index = 0; index < count; ++index, ++step) {
        const int stage = step % kStages;
        mbar_wait(&full[stage], (step / kStages) & 1);
        const uint8_t* at = smem + stage * kStageBytes;
        asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#pragma unroll
        for (int s = 0; s < 4; ++s)
          wgmma_ss(acc, swizzled_descriptor(at + half * 64 * 128, s), swizzled_descriptor(at + kWeightBytes, s));
        asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");  // the step before's products are in
        if (unreleased >= 0) release(unreleased);
        unreleased = step;
      }
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      pin(acc);  // the products are in: read after the wait, not before
      if (unreleased >= 0) release(unreleased);
#pragma unroll
      for (int i = 0; i < 64; ++i) total[i] = sum == 0 ? acc[i] : total[i] + acc[i];
    }
    // D's fragments: warp w's rows 16w + g and + 8, tokens 8j + 2t and + 1.
#pragma unroll
    for (int j = 0; j < kTokens / 8; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t out_row = row0 + 64 * half + 16 * warp + g + (i >= 2 ? 8 : 0);
        const int64_t token = token0 + 8 * j + 2 * t + i % 2;
        if (out_row < n && token < tokens) y[token * n + out_row] = total[4 * j + i];
      }
  }
}

template <int kStages, bool kOrdered>
void launch_ws(cudaStream_t stream, const __nv_bfloat16* w, const __nv_bfloat16* x, int64_t tokens, int64_t n,
               int64_t k, float* y) {
  static const bool sized = [] {
    must(cudaFuncSetAttribute(ws_gemm_kernel<kStages, kOrdered>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(smem_bytes<kStages>())),
         "shared memory");
    return true;
  }();
  (void)sized;
  const CUtensorMap w_map = matrix_map(w, n, k, kMmaChunk, kRows, CU_TENSOR_MAP_SWIZZLE_128B),
                    x_map = matrix_map(x, tokens, k, kMmaChunk, kTokens, CU_TENSOR_MAP_SWIZZLE_128B);
  const dim3 grid(static_cast<unsigned>((tokens + kTokens - 1) / kTokens),
                  static_cast<unsigned>((n + kRows - 1) / kRows));
  ws_gemm_kernel<kStages, kOrdered><<<grid, kThreads, smem_bytes<kStages>(), stream>>>(w_map, x_map, tokens, n, k, y);
  must(cudaGetLastError(), "launch");
}

using Launch = void (*)(cudaStream_t, const __nv_bfloat16*, const __nv_bfloat16*, int64_t, int64_t, int64_t, float*);
struct Variant {
  const char* name;
  Launch launch;
};
constexpr Variant kVariants[] = {
    {"ss 8sums", launch_ws<5, true>},
    {"ss 1chain", launch_ws<5, false>},
};

// The largest |got - want| over a sample of outputs, in units of the sum of |x w|
// (the size a rounding of the products' sum can have), against double precision.
double worst_error(const std::vector<float>& got, const std::vector<uint16_t>& xh, const std::vector<uint16_t>& wh,
                   int64_t tokens, int64_t n, int64_t k) {
  double worst = 0;
  std::mt19937 rng(7);
  for (int sample = 0; sample < 2000; ++sample) {
    const int64_t token = rng() % tokens, row = rng() % n;
    double want = 0, size = 0;
    for (int64_t i = 0; i < k; ++i) {
      const double p = static_cast<double>(bf16_to_f32(xh[token * k + i])) * bf16_to_f32(wh[row * k + i]);
      want += p, size += std::fabs(p);
    }
    worst = std::max(worst, std::fabs(got[token * n + row] - want) / size);
  }
  return worst;
}

int probe() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  cudaStream_t stream;
  must(cudaStreamCreate(&stream), "stream");
  cublasHandle_t blas;
  if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) return (std::fprintf(stderr, "cublasCreate failed\n"), 1);
  cublasSetStream(blas, stream);
  const auto seconds = [&](int reps, auto&& call) { return seconds_per_call(stream, reps, call); };
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"q/o 4096x4096", 4096, 4096},
                          {"gate 14336x4096", 14336, 4096},
                          {"down 4096x14336", 4096, 14336},
                          {"odd 3000x576", 3000, 576}};
  std::printf("TFLOP/s (error: the worst |y - exact| / sum |x w| over 2,000 outputs, x 1e-7)\n%-16s %6s %14s %14s",
              "matmul", "tokens", "mma_gemm", "cublas");
  for (const Variant& v : kVariants) std::printf(" %14s", v.name);
  std::printf("\n");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    std::vector<uint16_t> wh(static_cast<size_t>(s.n * s.k));
    for (auto& v : wh) v = f32_to_bf16(dist(rng));
    __nv_bfloat16* w = nullptr;
    must(cudaMalloc(&w, wh.size() * 2), "w");
    must(cudaMemcpy(w, wh.data(), wh.size() * 2, cudaMemcpyHostToDevice), "w");
    for (const int64_t tokens : {int64_t{300}, int64_t{512}, int64_t{2048}, int64_t{8192}}) {
      std::vector<float> xf(static_cast<size_t>(tokens * s.k));
      std::vector<uint16_t> xh(xf.size());
      for (size_t i = 0; i < xf.size(); ++i) xh[i] = f32_to_bf16(dist(rng)), xf[i] = bf16_to_f32(xh[i]);
      float *x = nullptr, *y = nullptr;
      __nv_bfloat16* xb = nullptr;  // x in bf16
      void* scratch = nullptr;
      MmaJob job{.count = 1};
      job.n[0] = s.n;
      must(cudaMalloc(&x, xf.size() * 4), "x");
      must(cudaMalloc(&xb, xf.size() * 2), "x bf16");
      must(cudaMalloc(&y, sizeof(float) * tokens * s.n), "y");
      must(cudaMalloc(&scratch, mma_gemm_scratch(tokens, s.k, job)), "scratch");
      must(cudaMemcpy(x, xf.data(), xf.size() * 4, cudaMemcpyHostToDevice), "x");
      round_kernel<<<static_cast<unsigned>((xf.size() + 255) / 256), 256, 0, stream>>>(
          x, static_cast<int64_t>(xf.size()), xb);
      job.w[0] = w, job.y[0] = y;
      const double flops = 2.0 * tokens * s.n * s.k;
      std::vector<float> got(static_cast<size_t>(tokens * s.n));
      const auto report = [&](double t) {
        must(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost), "y");
        std::printf(" %7.1f (%4.1f)", flops / t / 1e12, worst_error(got, xh, wh, tokens, s.n, s.k) * 1e7);
      };
      std::printf("%-16s %6lld", s.name, static_cast<long long>(tokens));
      report(seconds(5, [&](int) { mma_gemm(stream, x, tokens, s.k, job, scratch); }));
      const float one = 1.0f, zero = 0.0f;
      report(seconds(5, [&](int) {
        cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.n), static_cast<int>(tokens),
                     static_cast<int>(s.k), &one, w, CUDA_R_16BF, static_cast<int>(s.k), xb, CUDA_R_16BF,
                     static_cast<int>(s.k), &zero, y, CUDA_R_32F, static_cast<int>(s.n), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT);
      }));
      for (const Variant& v : kVariants) {
        must(cudaMemset(y, 0xff, got.size() * 4), "y");
        report(seconds(5, [&](int) { v.launch(stream, w, xb, tokens, s.n, s.k, y); }));
      }
      std::printf("\n");
      cudaFree(x), cudaFree(xb), cudaFree(y), cudaFree(scratch);
    }
    cudaFree(w);
  }
  cublasDestroy(blas);
  return 0;
}

}  // namespace
}  // namespace tessera::cuda

int main() { return tessera::cuda::probe(); }
