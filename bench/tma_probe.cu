// A probe for the tiled GEMM's next step (docs/gpu.md, "Prefill"): bae9813 moved its
// products to wgmma and ran no faster, and Nsight Compute found its blocks waiting
// on their cp.async tiles with L2 at half its throughput. Would TMA copies (the
// tensor memory accelerator moves a whole tile per instruction, completing on an
// mbarrier), and x shared by the two blocks of a cluster (each loads half of the
// 128-token tile and multicasts it to both: a quarter fewer L2 bytes a product),
// lift it? (Clusters of four too: each block then fetches a quarter of x.)
//
// tma_gemm_kernel: bae9813's computation (two warpgroups, wgmma.m64n128k16 with the
// weights' fragments from registers as mma_half takes them and x in mma slot order,
// the eight sums of k's chunks as chains) with the tiles brought by TMA: a stage
// holds a chunk's 128 weight rows ([row][64] bf16, no swizzling: lanes read rows g
// and g + 1 at units t and t + 4 in turn, so a quarter-warp's reads hit 32 banks)
// and its 128 tokens of x ([unit][token] of 16 bytes, wgmma's core matrices). Thread
// 0 refills a stage once every block of the cluster has released it (an mbarrier
// each stage counts the cluster's blocks).
//
// kDeep: each step waits only for the step before's products (one wgmma group
// queued behind the running one), keeping the step before's weight fragments
// alive in their registers until then.
//
// For the 8B shape's matmuls at 300, 512 and 2,048 tokens the probe checks every
// output bitwise against tessera's tiled matmul (cuda::mma_gemm) and prints TFLOP/s
// of each ('!' where a variant's bits differ).
//   tma_probe
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/mma.cuh"
#include "core/dtype.h"
#include "tma.cuh"

namespace tessera::cuda {
namespace {

constexpr int kTokens = 128, kRows = 128, kThreads = 256;
constexpr int kWeightBytes = kRows * 128, kStageBytes = kWeightBytes + kTokens * 128;

template <int kStages>
constexpr size_t smem_bytes() {
  return size_t{kStages} * kStageBytes + 2 * kStages * sizeof(uint64_t);
}

template <int kCluster, int kStages, bool kDeep>
__global__ void __launch_bounds__(kThreads, 1)
    tma_gemm_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                    int64_t tokens, int64_t n, int64_t k, float* __restrict__ y) {
  extern __shared__ __align__(1024) uint8_t smem[];
  auto* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* empty = full + kStages;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int rank = kCluster > 1 ? cluster_rank() : 0;
  const int row0 = static_cast<int>(blockIdx.y) * kRows, token0 = static_cast<int>(blockIdx.x) * kTokens;
  const int chunks = static_cast<int>(k / kMmaChunk), q = chunks / kMmaSplit, r = chunks % kMmaSplit;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1), mbar_init(&empty[s], kCluster);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  if constexpr (kCluster > 1) cluster_sync();
  __syncthreads();
  const auto issue = [&](int stage, int chunk) {  // thread 0
    uint8_t* at = smem + stage * kStageBytes;
    mbar_expect(&full[stage], kStageBytes);
    tma_load(at, &w_map, chunk * kMmaChunk, row0, &full[stage]);
    for (int u = 0; u < 8; ++u) {
      uint8_t* to = at + kWeightBytes + u * kTokens * 16 + rank * (kTokens / kCluster) * 16;
      if constexpr (kCluster > 1)
        tma_multicast(to, &x_map, chunk * kMmaChunk + u * 8, token0 + rank * (kTokens / kCluster), &full[stage],
                      static_cast<uint16_t>((1 << kCluster) - 1));
      else tma_load(to, &x_map, chunk * kMmaChunk + u * 8, token0, &full[stage]);
    }
  };
  if (threadIdx.x == 0)
    for (int s = 0; s < kStages && s < chunks; ++s) issue(s, chunk_of(s, q, r));

  float acc[64], total[64];
  int released = 0;  // steps whose stages went back to the cluster (thread 0)
  // Once every warp has the products of the steps before `done`: their stages go
  // back to the cluster's blocks, and are refilled once all have released them.
  const auto release = [&](int done) {
    __syncthreads();
    if (threadIdx.x == 0)
      for (; released < done; ++released) {
        const int at = released % kStages;
        for (int c = 0; c < kCluster; ++c) mbar_arrive_at(&empty[at], c);
        if (released + kStages < chunks) {
          mbar_wait<true>(&empty[at], (released / kStages) & 1);
          issue(at, chunk_of(released + kStages, q, r));
        }
      }
    __syncwarp();
  };
  const int row = 16 * warp + g, odd = g & 1;
  uint4 held[4] = {};  // kDeep: the weight fragments of the step in flight
  const auto keep = [](const uint4& v) { asm volatile("" ::"r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)); };
  // Sum by sum: the accumulators are zeroed and read only between sums, after
  // waiting for every product (kDeep: within a sum each step waits for the step
  // before's products only, so the tensor cores always have one step queued).
  for (int sum = 0, step = 0; sum < kMmaSplit; ++sum) {
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
    const int count = q + (sum < r ? 1 : 0);
    for (int index = 0; index < count; ++index, ++step) {
      const int stage = step % kStages;
      mbar_wait(&full[stage], (step / kStages) & 1);
      const auto* w_tile = reinterpret_cast<const uint4*>(smem + stage * kStageBytes);
      const uint8_t* x_tile = smem + stage * kStageBytes + kWeightBytes;
      // Rows g (even) read unit t then t + 4; odd rows t + 4 then t: conflict-free.
      const uint4 a_first = w_tile[row * 8 + t + 4 * odd], a_second = w_tile[row * 8 + t + 4 * (1 - odd)];
      const uint4 b_first = w_tile[(row + 8) * 8 + t + 4 * odd], b_second = w_tile[(row + 8) * 8 + t + 4 * (1 - odd)];
      const uint4 a0 = odd ? a_second : a_first, a1 = odd ? a_first : a_second;
      const uint4 b0 = odd ? b_second : b_first, b1 = odd ? b_first : b_second;
      const auto descriptor =
          [&](int s) {  // k16 step s: units 2s, 2s + 1 (2,048 bytes apart), 8 tokens 128 bytes apart
            const uint64_t address = smem_address(x_tile + 2 * s * kTokens * 16);
            return ((address & 0x3ffff) >> 4) | (uint64_t{(kTokens * 16) >> 4} << 16) | (uint64_t{128 >> 4} << 32);
          };
      asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
      wgmma_128(acc, a0.x, b0.x, a0.y, b0.y, descriptor(0));
      wgmma_128(acc, a0.z, b0.z, a0.w, b0.w, descriptor(1));
      wgmma_128(acc, a1.x, b1.x, a1.y, b1.y, descriptor(2));
      wgmma_128(acc, a1.z, b1.z, a1.w, b1.w, descriptor(3));
      asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
      if constexpr (kDeep) {
        asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory");
        // The step before's wgmma read its weight fragments from registers until
        // now: keeping them alive to here keeps this step's loads out of them.
        keep(held[0]), keep(held[1]), keep(held[2]), keep(held[3]);
        held[0] = a0, held[1] = b0, held[2] = a1, held[3] = b1;
        release(step);
      } else {
        asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
        release(step + 1);
      }
    }
    if constexpr (kDeep) {
      asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
      release(step);
    }
    pin(acc);
#pragma unroll
    for (int i = 0; i < 64; ++i) total[i] = sum == 0 ? acc[i] : total[i] + acc[i];  // a sum without chunks adds 0
  }
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int64_t out_row = row0 + row + (i >= 2 ? 8 : 0), token = token0 + 8 * j + 2 * t + i % 2;
      if (out_row < n && token < tokens) y[token * n + out_row] = total[4 * j + i];
    }
  if constexpr (kCluster > 1) cluster_sync();  // no block leaves while the others may still write to it
}

template <int kCluster, int kStages, bool kDeep = false>
void launch_tma(cudaStream_t stream, const __nv_bfloat16* w, const __nv_bfloat16* x_slots, int64_t tokens, int64_t n,
                int64_t k, float* y) {
  static const bool sized = [] {
    must(cudaFuncSetAttribute(tma_gemm_kernel<kCluster, kStages, kDeep>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(smem_bytes<kStages>())),
         "shared memory");
    return true;
  }();
  (void)sized;
  const CUtensorMap w_map = matrix_map(w, n, k, kMmaChunk, kRows),
                    x_map = matrix_map(x_slots, tokens, k, 8, kTokens / kCluster);
  const auto row_tiles = static_cast<unsigned>(((n + kRows - 1) / kRows + kCluster - 1) / kCluster * kCluster);
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = 1, cluster.val.clusterDim.y = kCluster, cluster.val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = dim3(static_cast<unsigned>((tokens + kTokens - 1) / kTokens), row_tiles);
  config.blockDim = kThreads;
  config.dynamicSmemBytes = smem_bytes<kStages>();
  config.stream = stream;
  config.attrs = &cluster;
  config.numAttrs = 1;
  must(cudaLaunchKernelEx(&config, tma_gemm_kernel<kCluster, kStages, kDeep>, w_map, x_map, tokens, n, k, y), "launch");
}

int probe() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  cudaStream_t stream;
  must(cudaStreamCreate(&stream), "stream");
  const auto seconds = [&](int reps, auto&& call) { return seconds_per_call(stream, reps, call); };
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"q/o 4096x4096", 4096, 4096},
                          {"gate 14336x4096", 14336, 4096},
                          {"down 4096x14336", 4096, 14336},
                          {"odd 3000x576", 3000, 576}};
  std::printf(
      "TFLOP/s: tessera's mma_gemm; TMA alone (4 stages), then waiting only for the step before's products (4 and 6 "
      "stages); clusters of 2 and 4 blocks. '!' marks a result that is not bitwise mma_gemm's.\n"
      "%-18s %6s %9s %9s %9s %9s %9s %9s\n",
      "matmul", "tokens", "mma_gemm", "tma", "deep", "deep s6", "x2", "x4");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    std::vector<uint16_t> wh(static_cast<size_t>(s.n * s.k));
    for (auto& v : wh) v = f32_to_bf16(dist(rng));
    __nv_bfloat16* w = nullptr;
    must(cudaMalloc(&w, wh.size() * 2), "w");
    must(cudaMemcpy(w, wh.data(), wh.size() * 2, cudaMemcpyHostToDevice), "w");
    for (const int64_t tokens : {int64_t{300}, int64_t{512}, int64_t{2048}}) {
      std::vector<float> xh(static_cast<size_t>(tokens * s.k));
      for (auto& v : xh) v = dist(rng);
      float *x = nullptr, *y_ref = nullptr, *y = nullptr;
      __nv_bfloat16* x_slots = nullptr;
      void* scratch = nullptr;
      MmaJob job{.count = 1};
      job.n[0] = s.n;
      must(cudaMalloc(&x, xh.size() * 4), "x");
      must(cudaMalloc(&x_slots, xh.size() * 2), "x slots");
      must(cudaMalloc(&y_ref, sizeof(float) * tokens * s.n), "y");
      must(cudaMalloc(&y, sizeof(float) * tokens * s.n), "y");
      must(cudaMalloc(&scratch, mma_gemm_scratch(tokens, s.k, job)), "scratch");
      must(cudaMemcpy(x, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice), "x");
      job.w[0] = w, job.y[0] = y_ref;
      slots_kernel<<<static_cast<unsigned>((xh.size() + 255) / 256), 256, 0, stream>>>(
          x, static_cast<int64_t>(xh.size()), x_slots);
      const double flops = 2.0 * tokens * s.n * s.k;
      const double t_ref = seconds(5, [&](int) { mma_gemm(stream, x, tokens, s.k, job, scratch); });
      std::vector<float> want(static_cast<size_t>(tokens * s.n)), got(want.size());
      must(cudaMemcpy(want.data(), y_ref, want.size() * 4, cudaMemcpyDeviceToHost), "y");
      const auto run = [&](auto launch) {
        must(cudaMemset(y, 0xff, got.size() * 4), "y");
        const double t = seconds(5, [&](int) { launch(stream, w, x_slots, tokens, s.n, s.k, y); });
        must(cudaMemcpy(got.data(), y, got.size() * 4, cudaMemcpyDeviceToHost), "y");
        return std::pair{t, std::memcmp(got.data(), want.data(), got.size() * 4) == 0};
      };
      std::printf("%-18s %6lld %9.1f", s.name, static_cast<long long>(tokens), flops / t_ref / 1e12);
      for (const auto launch :
           {launch_tma<1, 4>, launch_tma<1, 4, true>, launch_tma<1, 6, true>, launch_tma<2, 4>, launch_tma<4, 4>}) {
        const auto [t, same] = run(launch);
        std::printf(" %8.1f%s", flops / t / 1e12, same ? " " : "!");
      }
      std::printf("\n");
      cudaFree(x), cudaFree(x_slots), cudaFree(y_ref), cudaFree(y), cudaFree(scratch);
    }
    cudaFree(w);
  }
  return 0;
}

}  // namespace
}  // namespace tessera::cuda

int main() { return tessera::cuda::probe(); }
