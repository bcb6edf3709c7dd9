// The tiled bf16 matmul on wgmma (sm_90a) for 128 tokens a block and more
// (prefill): what mma_gemm.cu's kernel computes, bitwise, in the shape Hopper's
// fast GEMMs take. Warp-specialized: one warpgroup produces (one thread issues
// TMA copies of each 64-wide chunk's 128 weight rows and 128 tokens into a ring of
// stages, each completing on an mbarrier), two consume (each takes 64 of the
// block's weight rows for all 128 tokens, one wgmma m64n128k16 a k16 step) and
// hand each stage back on a second mbarrier once its products are in. A consumer
// loads a step's weight fragments in two halves, each while the other half's
// products run (session 27: +11-16 % over waiting for all four at once).
//
// Bitwise: a warp loads its 16 rows' weight fragments from the staged tile into
// registers exactly as mma.cuh's mma_half takes them (A from registers), and x (B)
// is read by wgmma from shared memory in mma slot order (mma.cuh's mma_slot: the
// order the kernels that round x write it in), so each k16 step multiplies the same
// positions in the same slots as mma.sync does; bench/chain_probe.cu found wgmma
// bitwise the mma.sync chain on such fragments, bench/ws_probe.cu this kernel's
// shape bitwise mma_gemm. Chunks are visited sum by sum as in mma_gemm.cu, the
// finished sums added into `total` in order.
#include <cuda_bf16.h>

#include <mutex>
#include <unordered_map>

#include "backend/cuda/gemm_tile.cuh"
#include "backend/cuda/tma.cuh"
#include "core/check.h"

namespace tessera::cuda {

namespace {

constexpr int kTokens = 128;
constexpr int kThreads = 384;  // the producer warpgroup, then the two consumers
constexpr int kStages = 5;
constexpr int kWeightBytes = kBlockRows * 128, kStageBytes = kWeightBytes + kTokens * 128;
constexpr size_t kSmem = 1024 + size_t{kStages} * kStageBytes + 2 * kStages * sizeof(uint64_t);
static_assert(kBlockRows * kTokens * sizeof(float) / 2 <= size_t{kStages} * kStageBytes, "gate/up's exchange");

// The job's weights as TMA tensor maps (boxes of 64 rows x one chunk, 128-byte swizzled).
struct WeightMaps {
  CUtensorMap w[MmaJob::kMaxWeights];
};

template <bool kGateUp>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(const __grid_constant__ WeightMaps maps, const __grid_constant__ CUtensorMap x_map,
                      int64_t tokens, int64_t k, MmaJob job) {
  let_next_start();
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + (1024 - smem_address(smem_raw) % 1024) % 1024;  // swizzled tiles start on 1,024 bytes
  auto* full = reinterpret_cast<uint64_t*>(smem + kStages * kStageBytes);
  uint64_t* consumed = full + kStages;  // every consumer warp is done with the stage

  int s = 0;
  while (s + 1 < job.count && blockIdx.y >= job.first_tile[s + 1]) ++s;
  const int row0 = static_cast<int>((blockIdx.y - job.first_tile[s]) * (kGateUp ? 64 : kBlockRows));
  const int token0 = static_cast<int>(blockIdx.x) * kTokens;
  const int chunks = static_cast<int>(k / kMmaChunk);
  if (threadIdx.x == 0) {
    for (int stage = 0; stage < kStages; ++stage) mbar_init(&full[stage], 1), mbar_init(&consumed[stage], 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int warpgroup = threadIdx.x / 128, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if (warpgroup == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    if (threadIdx.x == 0) {
      // Rows 0..63 and 64..127 of a stage: weight s's rows row0.., row0 + 64.. (gate/up: gate's and up's row0..).
      const CUtensorMap* lower = &maps.w[kGateUp ? 0 : s];
      const CUtensorMap* upper = &maps.w[kGateUp ? 1 : s];
      const auto weights = [&](int stage, int col) {
        uint8_t* at = smem + stage * kStageBytes;
        mbar_expect(&full[stage], kStageBytes);
        tma_load(at, lower, col, row0, &full[stage]);
        tma_load(at + kWeightBytes / 2, upper, col, kGateUp ? row0 : row0 + 64, &full[stage]);
      };
      const auto tokens_of = [&](int stage, int col) {
        tma_load(smem + stage * kStageBytes + kWeightBytes, &x_map, col, token0, &full[stage]);
      };
      // The first stages' weights, which no kernel writes, while the kernel before may still run; then its
      // output, x.
      const int first = min(chunks, kStages);
      ChunkWalk walk{chunks / kMmaSplit, chunks % kMmaSplit};
      for (int step = 0; step < first; ++step, walk.next()) weights(step, walk.chunk() * kMmaChunk);
      wait_for_earlier();
      ChunkWalk again{chunks / kMmaSplit, chunks % kMmaSplit};
      for (int step = 0; step < first; ++step, again.next()) tokens_of(step, again.chunk() * kMmaChunk);
      for (int step = first; step < chunks; ++step, walk.next()) {
        const int stage = step % kStages;
        mbar_wait(&consumed[stage], (step / kStages - 1) & 1);
        const int col = walk.chunk() * kMmaChunk;
        weights(stage, col);
        tokens_of(stage, col);
      }
    }
    // gate/up's exchange has block barriers, which every thread passes; the producer has no outputs.
    finish_outputs<kGateUp, kTokens>(job, s, row0, token0, tokens, false, smem, [](auto&&) {});
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
    wait_for_earlier();  // the outputs may be the kernel before's inputs
    // A thread's rows: row and row + 8, row g of its warp's 16 being tile row (g >> 1) + 4 (g & 1), so that a
    // quarter-warp's loads of one unit hit all 32 banks (rows 4 apart lie in opposite halves of the swizzle).
    const int row = 16 * (threadIdx.x / 32 - 4) + (g >> 1) + 4 * (g & 1);
    float acc[64], total[64];
    // A step's fragments in two halves: `lower` (unit t of both rows) for its first two k16 products, `upper`
    // (unit t + 4) for the last two, each committed as its own group. A half is loaded once its group before is
    // in, while the other half's group still runs: a group is always on the tensor cores.
    uint4 a_lower, b_lower, a_upper, b_upper;
    const auto stage_of = [&](int step) { return smem + (step % kStages) * kStageBytes; };
    const auto unit = [&](const uint8_t* at, int r, int u) {
      return *reinterpret_cast<const uint4*>(at + r * 128 + ((u ^ (r & 7)) << 4));
    };
    const auto load_lower = [&](int step) {
      mbar_wait(&full[step % kStages], (step / kStages) & 1);
      a_lower = unit(stage_of(step), row, t), b_lower = unit(stage_of(step), row + 8, t);
    };
    const auto load_upper = [&](int step) {
      a_upper = unit(stage_of(step), row, t + 4), b_upper = unit(stage_of(step), row + 8, t + 4);
    };
    // A half's two k16 products, its k16 steps s and s + 1 (a, b: rows row and row + 8), as one group.
    const auto half_products = [&](int step, const uint4& a, const uint4& b, int s) {
      const uint8_t* x_tile = stage_of(step) + kWeightBytes;
      wgmma_fence();
      wgmma_128(acc, a.x, b.x, a.y, b.y, swizzled_descriptor(x_tile, s));
      wgmma_128(acc, a.z, b.z, a.w, b.w, swizzled_descriptor(x_tile, s + 1));
      wgmma_commit();
    };
    const auto first_half = [&](int step) { half_products(step, a_lower, b_lower, 0); };
    const auto second_half = [&](int step) { half_products(step, a_upper, b_upper, 2); };
    const auto release = [&](int step) {
      __syncwarp();
      mbar_arrive_if_first(&consumed[step % kStages], lane);  // the stage goes back to the producer
    };
    const int q = chunks / kMmaSplit, r = chunks % kMmaSplit;
    for (int sum = 0, step = 0; sum < kMmaSplit; ++sum) {
#pragma unroll
      for (int i = 0; i < 64; ++i) acc[i] = 0.0f;
      const int count = q + (sum < r ? 1 : 0);
      if (count > 0) {
        load_lower(step);
        load_upper(step);
        first_half(step);
        second_half(step);
        for (int index = 1; index < count; ++index, ++step) {
          wgmma_wait<1>();  // the step before's first half is in
          load_lower(step + 1);
          first_half(step + 1);
          wgmma_wait<1>();  // and its second
          release(step);
          load_upper(step + 1);
          second_half(step + 1);
        }
        wgmma_wait<0>();
        release(step++);
      }
      pin(acc);  // the products are in: read after the waits, not before
#pragma unroll
      for (int i = 0; i < 64; ++i) total[i] = sum == 0 ? acc[i] : total[i] + acc[i];
    }
    finish_outputs<kGateUp, kTokens>(job, s, row0, token0, tokens, row >= 64, smem, [&](auto&& f) {
#pragma unroll
      for (int j = 0; j < 16; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) f(total[4 * j + i], row + (i >= 2 ? 8 : 0), 8 * j + 2 * t + i % 2);
    });
  }
}

// The tensor map of weight w [n][k] (boxes of 64 rows x one chunk), made once per weight.
const CUtensorMap& weight_map(const __nv_bfloat16* w, int64_t n, int64_t k) {
  struct Made {
    int64_t n = 0, k = 0;
    CUtensorMap map;
  };
  static std::mutex mutex;
  static std::unordered_map<const void*, Made> maps;  // by address
  const std::lock_guard lock(mutex);
  Made& made = maps[w];
  if (made.n != n || made.k != k) made = {n, k, matrix_map(w, n, k, kMmaChunk, 64, CU_TENSOR_MAP_SWIZZLE_128B)};
  return made.map;
}

template <bool kGateUp>
bool launch(cudaStream_t stream, const __nv_bfloat16* x, int64_t tokens, int64_t k, MmaJob job) {
  static const bool ready = [] {
    cudaFuncAttributes attributes{};  // fails where this build holds no kernel for the device
    return cudaFuncGetAttributes(&attributes, wgmma_gemm_kernel<kGateUp>) == cudaSuccess &&
           cudaFuncSetAttribute(wgmma_gemm_kernel<kGateUp>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(kSmem)) == cudaSuccess;
  }();
  if (!ready) {
    cudaGetLastError();  // the failed lookup's error is not the next launch's
    return false;
  }
  const int rows = kGateUp ? 64 : kBlockRows;
  WeightMaps maps{};
  job.first_tile[0] = 0;
  for (int i = 0; i < job.count; ++i) {
    job.first_tile[i + 1] = job.first_tile[i] + (job.n[i] + rows - 1) / rows;
    maps.w[i] = weight_map(job.w[i], job.n[i], k);
  }
  if constexpr (kGateUp) maps.w[1] = weight_map(job.w[1], job.n[0], k);
  const CUtensorMap x_map = matrix_map(x, tokens, k, kMmaChunk, kTokens, CU_TENSOR_MAP_SWIZZLE_128B);
  const dim3 grid(static_cast<unsigned>((tokens + kTokens - 1) / kTokens),
                  static_cast<unsigned>(job.first_tile[job.count]));
  launch_kernel(wgmma_gemm_kernel<kGateUp>, grid, kThreads, kSmem, stream, maps, x_map, tokens, k, job);
  return true;
}

}  // namespace

bool wgmma_gemm(cudaStream_t stream, const __nv_bfloat16* x, int64_t tokens, int64_t k, MmaJob job) {
  return job.gate_up ? launch<true>(stream, x, tokens, k, job) : launch<false>(stream, x, tokens, k, job);
}

}  // namespace tessera::cuda
