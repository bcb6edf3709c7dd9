// A probe for the next design question of the bf16 matmul (docs/gpu.md, "Many
// sequences"): today every output is eight sums (chunk c of k goes to sum
// c mod 8) added at the end, so the decode kernel can give each 16-row tile
// eight warps; the price is a second accumulator set in every GEMM block. If each
// output were ONE chain (every 64-wide chunk in order into one accumulator, as
// wgmma and a GEMM with one accumulator set would run it), a decode tile would
// have one warp. Can one warp a tile stream the weights at batch 1 as fast?
//
// chain_kernel: one warp owns a 16-row tile and keeps kDepth chunks of its
// weights in flight (cp.async into its own ring in shared memory), x rounded to
// bf16 once a block into shared memory, the same mma instructions as mma.cuh.
// For each 8B-shape matmul at one token, the probe prints µs a call and the
// share of the copy bandwidth for a few depths and for tessera's decode kernel
// (cuda::mma_matmul) on the same weights, launched the same way (programmatic
// dependent launches, weights rotating over copies larger than L2), and checks
// every output against a double-precision sum of the same bf16 products. Beside them,
// ring_kernel: the decode kernel's own order (eight warps a tile, eight sums) with each
// warp's chunks streamed through a ring in shared memory, counted bitwise against it.
//
// Second question: would wgmma (sm_90a) give the same bits as the mma.sync chain?
// order_kernel runs one 64-wide chunk (four k16 steps) of a 64 x 8 tile both ways
// from the same fragments and the same starting accumulators (values of mixed
// magnitudes, so that a different order of additions would show), and the probe
// counts the outputs that differ, after checking both against a double sum.
//
// Third question (docs/gpu.md, the prefill GEMM): does one mma.sync k16 step's sum
// depend on which of its 16 slots a product sits in? If it does not, the kernels
// need only agree on which 16 positions of k each step takes, not on their slots,
// and wgmma could take the weights from shared memory in their natural order.
// slots_kernel runs one step on the same products placed by several permutations
// of the slots (within each 8-slot half, the halves swapped, across the halves, all
// 16 at random) and the probe counts the outputs that differ from the identity's.
//   chain_probe
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
#include "core/dtype.h"
#include "probe.cuh"

namespace tessera::cuda {
namespace {

// Lane (g, t)'s four 16-byte pieces of the chunk at `at` of rows pa and pb (rows g and
// g + 8, offset by 8t) into a ring slot, a piece's 32 lanes side by side (cp.async).
__device__ __forceinline__ void copy_chunk(uint4* slot, const __nv_bfloat16* pa, const __nv_bfloat16* pb, int64_t at) {
  const int lane = threadIdx.x % 32;
  copy16(slot + lane, pa + at);
  copy16(slot + 32 + lane, pb + at);
  copy16(slot + 64 + lane, pa + at + 32);
  copy16(slot + 96 + lane, pb + at + 32);
}
// What copy_chunk put in the slot, as the lane's WeightChunk.
__device__ __forceinline__ WeightChunk slot_chunk(const uint4* slot) {
  const int lane = threadIdx.x % 32;
  return {slot[lane], slot[32 + lane], slot[64 + lane], slot[96 + lane]};
}

// Block: kWarps tiles of 16 rows, one token. Shared memory: x as bf16 [k], then
// each warp's ring of kDepth chunks, a chunk as four 16-byte pieces a lane
// ([piece][lane], so a warp's reads are conflict-free).
template <int kDepth, int kWarps>
__global__ void __launch_bounds__(32 * kWarps) chain_kernel(const __nv_bfloat16* __restrict__ w, int64_t n, int64_t k,
                                                            const float* __restrict__ x, float* __restrict__ y) {
  let_next_start();
  extern __shared__ uint4 shared[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int64_t chunks = k / kMmaChunk;
  uint4* xs = shared;  // k / 8 pieces
  uint4* ring = shared + k / 8 + warp * kDepth * 4 * 32;
  const int64_t tile = static_cast<int64_t>(blockIdx.x) * kWarps + warp;
  const int64_t row_a = min(tile * 16 + g, n - 1), row_b = min(tile * 16 + g + 8, n - 1);
  const __nv_bfloat16* pa = w + row_a * k + 8 * t;
  const __nv_bfloat16* pb = w + row_b * k + 8 * t;
  const auto issue = [&](int64_t c) {
    if (c < chunks) {
      copy_chunk(ring + (c % kDepth) * 128, pa, pb, c * kMmaChunk);
    }
    copies_sent();
  };
  for (int c = 0; c < kDepth - 1; ++c) issue(c);  // the weights are on their way; x may be the kernel before's
  wait_for_earlier();
  for (int64_t i = threadIdx.x; i < k / 8; i += blockDim.x) xs[i] = load_x(x + 8 * i);
  __syncthreads();
  float acc[4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t c = 0; c < chunks; ++c) {
    issue(c + kDepth - 1);
    copies_wait<kDepth - 1>();
    const uint4 x0 = g == 0 ? xs[c * 8 + t] : zero, x1 = g == 0 ? xs[c * 8 + 4 + t] : zero;
    mma_chunk(acc, slot_chunk(ring + (c % kDepth) * 128), x0, x1);
  }
  // Accumulator 0 of lane (g, 0): row g, token 0; accumulator 2: row g + 8.
  if (t == 0 && tile * 16 + g < n) y[tile * 16 + g] = acc[0];
  if (t == 0 && tile * 16 + g + 8 < n) y[tile * 16 + g + 8] = acc[2];
}

// The decode kernel's order with its weights streamed through shared memory: eight
// warps a 16-row tile, warp w the chunks w, w + 8, ... in order, each warp's next
// kDepth - 1 chunks in flight in its own ring (cp.async) while it sums one, where the
// decode kernel loads a round of chunks into registers, sums them, then loads the
// next round. The warps' sums are added in warp order, so every output is the decode
// kernel's bit for bit (the probe counts those that differ).
template <int kDepth>
__global__ void __launch_bounds__(32 * kMmaSplit) ring_kernel(const __nv_bfloat16* __restrict__ w, int64_t n, int64_t k,
                                                              const float* __restrict__ x, float* __restrict__ y) {
  let_next_start();
  extern __shared__ uint4 shared[];
  __shared__ float partial[kMmaSplit][32][4];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int64_t chunks = k / kMmaChunk, mine = warp < chunks ? (chunks - warp + kMmaSplit - 1) / kMmaSplit : 0;
  uint4* ring = shared + warp * kDepth * 4 * 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * 16;
  const __nv_bfloat16* pa = w + min(row0 + g, n - 1) * k + 8 * t;
  const __nv_bfloat16* pb = w + min(row0 + g + 8, n - 1) * k + 8 * t;
  const auto issue = [&](int64_t i) {  // this warp's i-th chunk
    if (i < mine) {
      const int64_t at = (warp + kMmaSplit * i) * kMmaChunk;
      copy_chunk(ring + (i % kDepth) * 128, pa, pb, at);
    }
    copies_sent();
  };
  for (int i = 0; i < kDepth - 1; ++i) issue(i);  // the weights are on their way; x may be the kernel before's
  wait_for_earlier();
  float acc[4] = {};
  const uint4 zero = make_uint4(0, 0, 0, 0);
  for (int64_t i = 0; i < mine; ++i) {
    issue(i + kDepth - 1);
    copies_wait<kDepth - 1>();
    const float* xi = x + (warp + kMmaSplit * i) * kMmaChunk + 8 * t;
    const uint4 x0 = g == 0 ? load_x(xi) : zero, x1 = g == 0 ? load_x(xi + 32) : zero;
    mma_chunk(acc, slot_chunk(ring + (i % kDepth) * 128), x0, x1);
  }
  for (int i = 0; i < 4; ++i) partial[warp][lane][i] = acc[i];
  __syncthreads();
  if (warp != 0 || t != 0) return;
  float sum_a = partial[0][lane][0], sum_b = partial[0][lane][2];
  for (int s = 1; s < kMmaSplit; ++s) sum_a += partial[s][lane][0], sum_b += partial[s][lane][2];
  if (row0 + g < n) y[row0 + g] = sum_a;
  if (row0 + g + 8 < n) y[row0 + g + 8] = sum_b;
}

// The wgmma operand B descriptor of a K-major 8 x 16 (n x k) bf16 tile without
// swizzling: two 8 x 8 core matrices (8 rows of 16 bytes each), the second (k 8..15)
// 128 bytes after the first. The leading and the stride byte offsets are both
// 128 bytes, so the layout reads the same whichever of them the hardware takes
// for the k direction (n has one core matrix).
__device__ uint64_t b_descriptor(const void* smem) {
  const auto address = static_cast<uint64_t>(__cvta_generic_to_shared(smem));
  return ((address & 0x3ffff) >> 4) | (uint64_t{128 >> 4} << 16) | (uint64_t{128 >> 4} << 32);
}

// Trial blockIdx.x: a [64][64] (rows, k), b [8][64] (n, k), d [64][8]; out_mma and
// out_wgmma [64][8] after four k16 steps from d.
__global__ void __launch_bounds__(128)
    order_kernel(const uint16_t* __restrict__ a, const uint16_t* __restrict__ b, const float* __restrict__ d,
                 float* __restrict__ out_mma, float* __restrict__ out_wgmma) {
  __shared__ __align__(128) uint16_t bs[4][2][8][8];  // [k step][core matrix][n][k in it]
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  a += blockIdx.x * 64 * 64, b += blockIdx.x * 8 * 64, d += blockIdx.x * 64 * 8;
  for (int i = threadIdx.x; i < 8 * 64; i += blockDim.x) {
    const int n = i / 64, k = i % 64;
    bs[k / 16][(k % 16) / 8][n][k % 8] = b[i];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();
  const int row = 16 * warp + g;
  const auto pair = [](const uint16_t* p) { return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 16; };
  float c[4] = {d[row * 8 + 2 * t], d[row * 8 + 2 * t + 1], d[(row + 8) * 8 + 2 * t], d[(row + 8) * 8 + 2 * t + 1]};
  float w[4] = {c[0], c[1], c[2], c[3]};
  uint32_t frag[4][4];
  for (int s = 0; s < 4; ++s) {
    const int k0 = 16 * s + 2 * t;
    frag[s][0] = pair(a + row * 64 + k0), frag[s][1] = pair(a + (row + 8) * 64 + k0);
    frag[s][2] = pair(a + row * 64 + k0 + 8), frag[s][3] = pair(a + (row + 8) * 64 + k0 + 8);
    mma_bf16(c, frag[s][0], frag[s][1], frag[s][2], frag[s][3], pair(b + g * 64 + k0), pair(b + g * 64 + k0 + 8));
  }
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  for (int s = 0; s < 4; ++s) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
        : "+f"(w[0]), "+f"(w[1]), "+f"(w[2]), "+f"(w[3])
        : "r"(frag[s][0]), "r"(frag[s][1]), "r"(frag[s][2]), "r"(frag[s][3]), "l"(b_descriptor(&bs[s][0][0][0])));
  }
  asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  out_mma += blockIdx.x * 64 * 8, out_wgmma += blockIdx.x * 64 * 8;
  out_mma[row * 8 + 2 * t] = c[0], out_mma[row * 8 + 2 * t + 1] = c[1];
  out_mma[(row + 8) * 8 + 2 * t] = c[2], out_mma[(row + 8) * 8 + 2 * t + 1] = c[3];
  out_wgmma[row * 8 + 2 * t] = w[0], out_wgmma[row * 8 + 2 * t + 1] = w[1];
  out_wgmma[(row + 8) * 8 + 2 * t] = w[2], out_wgmma[(row + 8) * 8 + 2 * t + 1] = w[3];
}

// Trial blockIdx.x, permutation blockIdx.y: a [16][16] (rows, k), b [8][16] (n, k),
// d [16][8]; out [perm][trial][16][8] = d + one mma.sync k16 step of a and b with
// k-slot j holding position perm[j].
__global__ void __launch_bounds__(32)
    slots_kernel(const uint16_t* __restrict__ a, const uint16_t* __restrict__ b, const float* __restrict__ d,
                 const int* __restrict__ perms, float* __restrict__ out) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int trial = blockIdx.x, trials = gridDim.x;
  const int* perm = perms + blockIdx.y * 16;
  a += trial * 16 * 16, b += trial * 8 * 16, d += trial * 16 * 8;
  const auto pair = [&](const uint16_t* row, int slot) {  // slots slot, slot + 1 of a row of k
    return static_cast<uint32_t>(row[perm[slot]]) | static_cast<uint32_t>(row[perm[slot + 1]]) << 16;
  };
  float c[4] = {d[g * 8 + 2 * t], d[g * 8 + 2 * t + 1], d[(g + 8) * 8 + 2 * t], d[(g + 8) * 8 + 2 * t + 1]};
  mma_bf16(c, pair(a + g * 16, 2 * t), pair(a + (g + 8) * 16, 2 * t), pair(a + g * 16, 2 * t + 8),
           pair(a + (g + 8) * 16, 2 * t + 8), pair(b + g * 16, 2 * t), pair(b + g * 16, 2 * t + 8));
  float* o = out + (static_cast<size_t>(blockIdx.y) * trials + trial) * 16 * 8;
  o[g * 8 + 2 * t] = c[0], o[g * 8 + 2 * t + 1] = c[1], o[(g + 8) * 8 + 2 * t] = c[2],
                o[(g + 8) * 8 + 2 * t + 1] = c[3];
}

template <int kDepth, int kWarps>
void launch_chain(cudaStream_t stream, const __nv_bfloat16* w, int64_t n, int64_t k, const float* x, float* y) {
  const size_t smem = static_cast<size_t>(k / 8 + kWarps * kDepth * 4 * 32) * sizeof(uint4);
  static const bool sized = [] {  // as much as an SM has, whatever k
    int most = 0;
    cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
    must(cudaFuncSetAttribute(chain_kernel<kDepth, kWarps>, cudaFuncAttributeMaxDynamicSharedMemorySize, most),
         "shared memory");
    return true;
  }();
  (void)sized;
  const auto blocks = static_cast<unsigned>((n / 16 + kWarps - 1) / kWarps);
  launch_kernel(chain_kernel<kDepth, kWarps>, blocks, 32 * kWarps, smem, stream, w, n, k, x, y);
}

template <int kDepth>
void launch_ring(cudaStream_t stream, const __nv_bfloat16* w, int64_t n, int64_t k, const float* x, float* y) {
  const size_t smem = static_cast<size_t>(kMmaSplit * kDepth * 4 * 32) * sizeof(uint4);
  static const bool sized = [] {
    int most = 0;
    cudaDeviceGetAttribute(&most, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
    must(cudaFuncSetAttribute(ring_kernel<kDepth>, cudaFuncAttributeMaxDynamicSharedMemorySize, most - 4096),
         "shared memory");
    return true;
  }();
  (void)sized;
  launch_kernel(ring_kernel<kDepth>, static_cast<unsigned>((n + 15) / 16), 32 * kMmaSplit, smem, stream, w, n, k, x, y);
}

struct Run {
  const char* name;
  void (*launch)(cudaStream_t, const __nv_bfloat16*, int64_t, int64_t, const float*, float*);
};

void decode_kernel(cudaStream_t stream, const __nv_bfloat16* w, int64_t n, int64_t k, const float* x, float* y) {
  MmaJob job{.count = 1};
  job.w[0] = w;
  job.y[0] = y;
  job.n[0] = n;
  mma_matmul(stream, x, 1, k, job);
}

// Random operands of mixed magnitudes (so that a different order of additions would
// show): a [trials][rows][k] and b [trials][n][k] in bf16, d [trials][rows][n].
struct Operands {
  std::vector<uint16_t> a, b;
  std::vector<float> d;
};
Operands mixed_operands(std::mt19937& rng, int trials, int rows, int n, int k) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  const auto value = [&] { return std::ldexp(unit(rng), exponent(rng)); };
  Operands o{std::vector<uint16_t>(static_cast<size_t>(trials) * rows * k),
             std::vector<uint16_t>(static_cast<size_t>(trials) * n * k),
             std::vector<float>(static_cast<size_t>(trials) * rows * n)};
  for (auto& v : o.a) v = f32_to_bf16(value());
  for (auto& v : o.b) v = f32_to_bf16(value());
  for (auto& v : o.d) v = value();
  return o;
}

// wgmma against the mma.sync chain on the same fragments (order_kernel).
void order(cudaStream_t stream) {
  const int trials = 4096;
  std::mt19937 rng(2);
  const auto [a, b, d] = mixed_operands(rng, trials, 64, 8, 64);
  uint16_t *da, *db;
  float *dd, *dm, *dw;
  must(cudaMalloc(&da, a.size() * 2), "a");
  must(cudaMalloc(&db, b.size() * 2), "b");
  must(cudaMalloc(&dd, d.size() * 4), "d");
  must(cudaMalloc(&dm, d.size() * 4), "out");
  must(cudaMalloc(&dw, d.size() * 4), "out");
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dd, d.data(), d.size() * 4, cudaMemcpyHostToDevice);
  order_kernel<<<trials, 128, 0, stream>>>(da, db, dd, dm, dw);
  must(cudaStreamSynchronize(stream), "order_kernel");
  std::vector<float> m(d.size()), w(d.size());
  cudaMemcpy(m.data(), dm, m.size() * 4, cudaMemcpyDeviceToHost);
  cudaMemcpy(w.data(), dw, w.size() * 4, cudaMemcpyDeviceToHost);
  size_t differ = 0;
  double err_m = 0, err_w = 0;
  for (int trial = 0; trial < trials; ++trial)
    for (int r = 0; r < 64; ++r)
      for (int n = 0; n < 8; ++n) {
        const size_t i = (static_cast<size_t>(trial) * 64 + r) * 8 + n;
        double sum = d[i], magnitude = std::fabs(d[i]);
        for (int k = 0; k < 64; ++k) {
          const double p = double{bf16_to_f32(a[(static_cast<size_t>(trial) * 64 + r) * 64 + k])} *
                           bf16_to_f32(b[(static_cast<size_t>(trial) * 8 + n) * 64 + k]);
          sum += p, magnitude += std::fabs(p);
        }
        err_m = std::max(err_m, std::fabs(m[i] - sum) / magnitude);
        err_w = std::max(err_w, std::fabs(w[i] - sum) / magnitude);
        differ += std::memcmp(&m[i], &w[i], 4) != 0;
      }
  std::printf(
      "\nwgmma m64n8k16 against the mma.sync m16n8k16 chain, %d trials of a 64 x 8 tile over k = 64:\n"
      "  outputs that differ: %zu of %zu\n  largest error over the sum of |terms|: mma.sync %.2e, wgmma %.2e\n",
      trials, differ, d.size(), err_m, err_w);
  cudaFree(da), cudaFree(db), cudaFree(dd), cudaFree(dm), cudaFree(dw);
}

// One k16 step with its products in permuted slots against the identity (slots_kernel).
void slots(cudaStream_t stream) {
  const int trials = 8192;
  std::mt19937 rng(3);
  const auto [a, b, d] = mixed_operands(rng, trials, 16, 8, 16);
  struct Perm {
    const char* name;
    std::vector<int> slots;
  };
  std::vector<Perm> perms = {{"identity", {}},
                             {"each 8-slot half reversed", {}},
                             {"the two halves swapped", {}},
                             {"pairs moved across the halves (2t <-> 2t + 8)", {}},
                             {"all 16 at random (1)", {}},
                             {"all 16 at random (2)", {}},
                             {"all 16 at random (3)", {}}};
  for (int j = 0; j < 16; ++j) {
    perms[0].slots.push_back(j);
    perms[1].slots.push_back(j < 8 ? 7 - j : 23 - j);
    perms[2].slots.push_back((j + 8) % 16);
    perms[3].slots.push_back(j % 4 < 2 ? (j + 8) % 16 : j);
  }
  for (size_t p = 4; p < perms.size(); ++p) {
    perms[p].slots = perms[0].slots;
    std::shuffle(perms[p].slots.begin(), perms[p].slots.end(), rng);
  }
  std::vector<int> flat;
  for (const Perm& p : perms) flat.insert(flat.end(), p.slots.begin(), p.slots.end());
  uint16_t *da, *db;
  float *dd, *dout;
  int* dp;
  const size_t outs = perms.size() * d.size();
  must(cudaMalloc(&da, a.size() * 2), "a");
  must(cudaMalloc(&db, b.size() * 2), "b");
  must(cudaMalloc(&dd, d.size() * 4), "d");
  must(cudaMalloc(&dp, flat.size() * 4), "perms");
  must(cudaMalloc(&dout, outs * 4), "out");
  cudaMemcpy(da, a.data(), a.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size() * 2, cudaMemcpyHostToDevice);
  cudaMemcpy(dd, d.data(), d.size() * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(dp, flat.data(), flat.size() * 4, cudaMemcpyHostToDevice);
  slots_kernel<<<dim3(trials, static_cast<unsigned>(perms.size())), 32, 0, stream>>>(da, db, dd, dp, dout);
  must(cudaStreamSynchronize(stream), "slots_kernel");
  std::vector<float> out(outs);
  cudaMemcpy(out.data(), dout, outs * 4, cudaMemcpyDeviceToHost);
  std::printf("\nmma.sync m16n8k16, one k16 step, %d trials of a 16 x 8 tile, products in permuted slots:\n", trials);
  for (size_t p = 1; p < perms.size(); ++p) {
    size_t differ = 0;
    for (size_t i = 0; i < d.size(); ++i) differ += std::memcmp(&out[p * d.size() + i], &out[i], 4) != 0;
    std::printf("  %-48s outputs that differ from the identity's: %zu of %zu\n", perms[p].name, differ, d.size());
  }
  cudaFree(da), cudaFree(db), cudaFree(dd), cudaFree(dp), cudaFree(dout);
}

int probe() {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out as it is printed
  cudaStream_t stream;
  must(cudaStreamCreate(&stream), "stream");
  const auto seconds = [&](int reps, auto&& call) { return seconds_per_call(stream, reps, call); };
  // The copy bandwidth as tessera bench measures it: bytes read plus written by a 1 GiB copy.
  const size_t copy_bytes = size_t{1} << 30;
  void *from = nullptr, *to = nullptr;
  must(cudaMalloc(&from, copy_bytes), "copy buffer");
  must(cudaMalloc(&to, copy_bytes), "copy buffer");
  const double copy_s =
      seconds(10, [&](int) { cudaMemcpyAsync(to, from, copy_bytes, cudaMemcpyDeviceToDevice, stream); });
  const double bandwidth = 2.0 * copy_bytes / copy_s;
  cudaFree(from);
  cudaFree(to);
  std::printf("copy bandwidth %.0f GB/s\n\n%-22s %-24s %9s %8s %12s %8s\n", bandwidth / 1e9, "matmul, 1 token",
              "kernel", "us", "of copy", "max rel err", "differ");

  const Run runs[] = {{"decode kernel (8 sums)", decode_kernel},      {"8 sums, ring of 2", launch_ring<2>},
                      {"8 sums, ring of 3", launch_ring<3>},          {"8 sums, ring of 4", launch_ring<4>},
                      {"8 sums, ring of 6", launch_ring<6>},          {"8 sums, ring of 8", launch_ring<8>},
                      {"8 sums, ring of 12", launch_ring<12>},        {"decode kernel again", decode_kernel},
                      {"chain, 4 warps, depth 8", launch_chain<8, 4>}};
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {
      {"q/o 4096x4096", 4096, 4096},    {"k/v 1024x4096", 1024, 4096},     {"qkv 6144x4096", 6144, 4096},
      {"gate 14336x4096", 14336, 4096}, {"down 4096x14336", 4096, 14336},  {"1B q 2048x2048", 2048, 2048},
      {"1B qkv 3072x2048", 3072, 2048}, {"1B gate 8192x2048", 8192, 2048}, {"1B down 2048x8192", 2048, 8192}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (const Shape& s : shapes) {
    const size_t elements = static_cast<size_t>(s.n * s.k), bytes = elements * 2;
    const int copies = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / bytes + 1, 1, 16));
    std::vector<uint16_t> host(elements);
    std::vector<float> xh(static_cast<size_t>(s.k));
    for (auto& v : host) v = f32_to_bf16(dist(rng));
    for (auto& v : xh) v = dist(rng);
    std::vector<__nv_bfloat16*> weights(static_cast<size_t>(copies));
    for (auto& w : weights) {
      must(cudaMalloc(&w, bytes), "weights");
      must(cudaMemcpy(w, host.data(), bytes, cudaMemcpyHostToDevice), "weights");
    }
    float *x = nullptr, *y = nullptr;
    must(cudaMalloc(&x, sizeof(float) * s.k), "x");
    must(cudaMalloc(&y, sizeof(float) * s.n), "y");
    must(cudaMemcpy(x, xh.data(), sizeof(float) * s.k, cudaMemcpyHostToDevice), "x");
    // The exact sum of the bf16 products, in double.
    std::vector<double> want(static_cast<size_t>(s.n));
    double scale = 0;
    for (int64_t r = 0; r < s.n; ++r) {
      double sum = 0;
      for (int64_t i = 0; i < s.k; ++i)
        sum += double{bf16_to_f32(host[static_cast<size_t>(r * s.k + i)])} *
               bf16_to_f32(f32_to_bf16(xh[static_cast<size_t>(i)]));
      want[static_cast<size_t>(r)] = sum;
      scale = std::max(scale, std::fabs(sum));
    }
    std::vector<float> first;  // the decode kernel's outputs
    for (const Run& run : runs) {
      const double sec =
          seconds(200, [&](int i) { run.launch(stream, weights[static_cast<size_t>(i % copies)], s.n, s.k, x, y); });
      std::vector<float> got(static_cast<size_t>(s.n));
      must(cudaMemcpy(got.data(), y, sizeof(float) * s.n, cudaMemcpyDeviceToHost), "y");
      double err = 0;
      for (size_t r = 0; r < got.size(); ++r) err = std::max(err, std::fabs(got[r] - want[r]) / scale);
      if (first.empty()) first = got;
      size_t differ = 0;
      for (size_t r = 0; r < got.size(); ++r) differ += std::memcmp(&got[r], &first[r], 4) != 0;
      std::printf("%-22s %-24s %9.2f %7.1f%% %12.2e %8zu\n", s.name, run.name, sec * 1e6,
                  100.0 * bytes / sec / bandwidth, err, differ);
    }
    for (auto* w : weights) cudaFree(w);
    cudaFree(x);
    cudaFree(y);
  }
  order(stream);
  slots(stream);
  return 0;
}

}  // namespace
}  // namespace tessera::cuda

int main() { return tessera::cuda::probe(); }
