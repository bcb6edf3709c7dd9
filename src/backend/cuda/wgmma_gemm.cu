// The tiled bf16 matmul on wgmma (sm_90a) for 128 tokens a block and more
// (prefill): what mma_gemm.cu's kernel computes, bitwise, with the warpgroup's
// tensor-core instruction. Two warpgroups a block each take 64 of its 128 weight
// rows for all 128 tokens: one wgmma m64n128k16 replaces each warp's 16 mma.sync.
//
// Bitwise: a warp loads its 16 rows' weight fragments into registers exactly as
// mma.cuh's mma_half takes them (A from registers), and x (B) comes from shared
// memory in mma slot order (mma.cuh's mma_slot: the order the kernels that round x
// write it in), so each k16 step multiplies the same positions in the same slots as
// mma.sync does; bench/chain_probe.cu found wgmma m64n8k16 bitwise the mma.sync
// chain on such fragments. Chunks are visited sum by sum as in mma_gemm.cu, the
// finished sums added into `total` in order.
#include <cuda_bf16.h>

#include <cstdlib>
#include <string_view>

#include "backend/cuda/gemm_tile.cuh"
#include "core/check.h"

namespace tessera::cuda {

namespace {

constexpr int kTokens = 128;
constexpr int kStageUnits = (kBlockRows + kTokens) * 8;
template <int kStages>  // chunks staged in shared memory
constexpr size_t kSmem = size_t{kStages} * kStageUnits * sizeof(uint4);

// d (lane (g, t) of warp w of the warpgroup: rows 16w + g (+8 for d[4j + 2, 3]),
// tokens 8j + 2t (+1 for odd d)) += a (the warp's 16 x 16 fragment, as mma.sync's)
// times B (16 x 128 from shared memory, described by b).
__device__ __forceinline__ void wgmma_128(float (&d)[64], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                          uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
        "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
        "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
        "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
        "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
        "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
        "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(b));
}

// The compiler must not move reads or writes of the accumulators across the
// points where wgmma may be using them.
__device__ __forceinline__ void pin(float (&d)[64]) {
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
// cp.async's writes (the generic proxy) made visible to wgmma's reads (the async proxy).
__device__ __forceinline__ void async_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// The staged x tile is [unit u][token] of 16 bytes: unit u of a chunk (in mma slot
// order) is k16 step u / 2's slots 8 (u % 2).., so step s reads units 2s (k 0..7 of
// the step's slots) and 2s + 1 (8..15), 2,048 bytes apart (the leading byte
// offset), each as 16 core matrices of 8 tokens, 128 bytes apart (the stride byte
// offset); no swizzling.
__device__ __forceinline__ uint64_t x_descriptor(const uint4* x_tile, int step) {
  const auto address = static_cast<uint64_t>(__cvta_generic_to_shared(x_tile + 2 * step * kTokens));
  return ((address & 0x3ffff) >> 4) | (uint64_t{(kTokens * 16) >> 4} << 16) | (uint64_t{128 >> 4} << 32);
}

template <bool kGateUp, int kStages>
__global__ void __launch_bounds__(kGemmThreads, 1)
    wgmma_gemm_kernel(const __nv_bfloat16* __restrict__ x, int64_t tokens, int64_t k, MmaJob job) {
  constexpr int kLookahead = kStages - 1;  // chunks in flight: the stage refilled held the chunk the step before
  let_next_start();
  extern __shared__ __align__(128) uint4 smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4;

  int s = 0;
  while (s + 1 < job.count && blockIdx.y >= job.first_tile[s + 1]) ++s;
  const int64_t n = job.n[s];
  const int64_t row0 = (static_cast<int64_t>(blockIdx.y) - job.first_tile[s]) * (kGateUp ? 64 : kBlockRows);
  const int64_t token0 = static_cast<int64_t>(blockIdx.x) * kTokens;

  // What this thread copies each chunk: four units of weight rows (as mma_gemm.cu's
  // kernel) and four of x, a warp's eight tokens by four units at a time (so that
  // each eight lanes store eight different banks' worth).
  const __nv_bfloat16* w_from[4];
  const __nv_bfloat16* x_from[4];
  int x_to[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int unit = threadIdx.x + kGemmThreads * j, r = unit / 8;
    const __nv_bfloat16* w = kGateUp && r >= 64 ? job.w[1] : job.w[s];
    const int64_t row = min(row0 + (kGateUp ? r % 64 : r), n - 1);  // rows past n: computed, never stored
    w_from[j] = w + row * k + (unit % 8) * 8;
  }
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (threadIdx.x % 8 == 0)
      for (int c = 0; c < kLookahead; ++c) prefetch_l2(w_from[j] + static_cast<int64_t>(c) * kMmaChunk);
  wait_for_earlier();
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int unit = threadIdx.x + kGemmThreads * j, group = unit / 32;
    const int token = (group % 16) * 8 + unit % 8, u = (group / 16) * 4 + unit % 32 / 8;
    x_from[j] = x + min(token0 + token, tokens - 1) * k + u * 8;
    x_to[j] = kBlockRows * 8 + u * kTokens + token;
  }
  const auto load = [&](int stage, int chunk) {
    uint4* at = smem + stage * kStageUnits;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int unit = threadIdx.x + kGemmThreads * j;
      copy16(at + unit_at(unit / 8, unit % 8), w_from[j] + static_cast<int64_t>(chunk) * kMmaChunk);
      copy16(at + x_to[j], x_from[j] + static_cast<int64_t>(chunk) * kMmaChunk);
    }
  };

  const int chunks = static_cast<int>(k / kMmaChunk);
  ChunkWalk loading{chunks / kMmaSplit, chunks % kMmaSplit};
  ChunkWalk computing = loading;
#pragma unroll
  for (int stage = 0; stage < kLookahead; ++stage) {
    if (stage < chunks) load(stage, loading.chunk()), loading.next();
    copies_sent();
  }
  float acc[64], total[64];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.0f, total[i] = 0.0f;
  int sums_done = 0;              // sums finished and added into total
  const int row = 16 * warp + g;  // the warp's rows in the block: warpgroup w / 4 takes 64 w / 4..
  for (int step = 0; step < chunks; ++step) {
    copies_wait<kLookahead - 1>();
    async_proxy_fence();
    __syncthreads();  // this chunk is in; every warp is done with the stage refilled next
    if (step + kLookahead < chunks) load((step + kLookahead) % kStages, loading.chunk()), loading.next();
    copies_sent();

    const uint4* a_tile = smem + (step % kStages) * kStageUnits;
    const uint4* x_tile = a_tile + kBlockRows * 8;
    const uint4 a0 = a_tile[unit_at(row, t)], b0 = a_tile[unit_at(row + 8, t)];
    const uint4 a1 = a_tile[unit_at(row, t + 4)], b1 = a_tile[unit_at(row + 8, t + 4)];
    wgmma_fence();
    wgmma_128(acc, a0.x, b0.x, a0.y, b0.y, x_descriptor(x_tile, 0));
    wgmma_128(acc, a0.z, b0.z, a0.w, b0.w, x_descriptor(x_tile, 1));
    wgmma_128(acc, a1.x, b1.x, a1.y, b1.y, x_descriptor(x_tile, 2));
    wgmma_128(acc, a1.z, b1.z, a1.w, b1.w, x_descriptor(x_tile, 3));
    wgmma_commit();
    // Waiting here for this chunk's products (not the step before's, keeping one
    // step in flight): with one in flight, ptxas adds a wait of its own anyway, to
    // reload the weight fragments' registers.
    wgmma_wait<0>();
    const bool ends_sum = computing.ends_sum();
    computing.next();
    if (!ends_sum) continue;
    pin(acc);
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      total[i] = sums_done == 0 ? acc[i] : total[i] + acc[i];
      acc[i] = 0.0f;
    }
    ++sums_done;
  }
  // With fewer than eight chunks the other sums are zero, and still added.
  for (; sums_done < kMmaSplit; ++sums_done)
#pragma unroll
    for (int i = 0; i < 64; ++i) total[i] += 0.0f;

  finish_outputs<kGateUp, kTokens>(job, s, row0, token0, tokens, row >= 64, smem, [&](auto&& f) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int i = 0; i < 4; ++i) f(total[4 * j + i], row + (i >= 2 ? 8 : 0), 8 * j + 2 * t + i % 2);
  });
}

template <bool kGateUp, int kStages>
bool launch(cudaStream_t stream, const __nv_bfloat16* x, int64_t tokens, int64_t k, MmaJob job) {
  static const bool ready = [] {
    cudaFuncAttributes attributes{};  // fails where this build holds no kernel for the device
    return cudaFuncGetAttributes(&attributes, wgmma_gemm_kernel<kGateUp, kStages>) == cudaSuccess &&
           cudaFuncSetAttribute(wgmma_gemm_kernel<kGateUp, kStages>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kSmem<kStages>)) == cudaSuccess;
  }();
  if (!ready) {
    cudaGetLastError();  // the failed lookup's error is not the next launch's
    return false;
  }
  const int rows = kGateUp ? 64 : kBlockRows;
  job.first_tile[0] = 0;
  for (int i = 0; i < job.count; ++i) job.first_tile[i + 1] = job.first_tile[i] + (job.n[i] + rows - 1) / rows;
  const dim3 grid(static_cast<unsigned>((tokens + kTokens - 1) / kTokens),
                  static_cast<unsigned>(job.first_tile[job.count]));
  launch_kernel(wgmma_gemm_kernel<kGateUp, kStages>, grid, kGemmThreads, kSmem<kStages>, stream, x, tokens, k, job);
  return true;
}

}  // namespace

bool wgmma_gemm(cudaStream_t stream, const __nv_bfloat16* x, int64_t tokens, int64_t k, MmaJob job) {
  const char* stages = std::getenv("TESSERA_CUDA_WGMMA_STAGES");
  if (stages != nullptr && std::string_view(stages) == "6")
    return job.gate_up ? launch<true, 6>(stream, x, tokens, k, job) : launch<false, 6>(stream, x, tokens, k, job);
  return job.gate_up ? launch<true, 4>(stream, x, tokens, k, job) : launch<false, 4>(stream, x, tokens, k, job);
}

}  // namespace tessera::cuda
