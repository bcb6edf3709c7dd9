// The bf16 matmul on tensor cores for many tokens (prefill, large batches): a
// block computes 128 weight rows x 32 * kNTiles tokens from tiles staged through
// shared memory by cp.async, so each weight tile is read once for all of them.
//
// Every output is bitwise what mma_matmul.cu's kernel gives the same row, for
// any number of tokens: x is rounded to bf16 the same way (to_bf16 below), k is
// cut into the same 64-wide chunks, chunk c goes to sum c % 8, each sum starts
// from zero and takes its chunks in increasing order through the same four mma
// instructions with the same positions in the same slots (mma.cuh), and the
// eight sums are added in order 0, 1, ..., 7. Here one warp runs all eight sums
// one after another (the block visits the chunks sum by sum), keeping the
// finished ones added up in `total`; there eight warps run one each.
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdlib>

#include "backend/cuda/gemm_tile.cuh"
#include "backend/cuda/rope_pair.cuh"
#include "core/check.h"

namespace tessera::cuda {

namespace {

constexpr int kStages = 4;              // chunks staged in shared memory, three of them in flight
constexpr int kThreads = kGemmThreads;  // eight warps: kRowWarps across the rows, the rest across the tokens

// x's rows (tokens, in mma slot order: mma.cuh's mma_slot) sit at unit ^ (row % 8), so
// that ldmatrix's eight rows of one unit hit eight different banks.
__device__ __forceinline__ int x_unit_at(int row, int unit) { return row * 8 + (unit ^ (row & 7)); }

// x_half(tile, row, half): lane (g, t)'s operand for mma_half of tokens row..row + 7
// (row % 8 == 0) in half `half` of the staged chunk: units 4 half .. 4 half + 3 of
// the token g, their words t (slots 2t, 2t + 1 of each), as ldmatrix gives them.
__device__ __forceinline__ uint4 x_half(const uint4* tile, int row, int half) {
  const int lane = threadIdx.x % 32;
  const auto at =
      static_cast<uint32_t>(__cvta_generic_to_shared(tile + x_unit_at(row + lane % 8, 4 * half + lane / 8)));
  uint4 v;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(at));
  return v;
}

// Where a block's output goes: with kSplit the block runs `sums_per_block` of the
// eight sums (from blockIdx.z * sums_per_block on, each from zero) and writes each
// as it ends to sums [8][tokens][width] (the job's outputs side by side: each
// weight's rows, or gate's then up's), for add_sums_kernel to add in order; else
// it runs all eight and finishes the outputs itself. Up to 64
// tokens a block, two blocks share an SM (registers capped at 128 a thread: at
// 158 the 224 gate/up blocks of 64 sequences on the 8B shape ran in two waves).
// A warp computes kM 16-row tiles by kN 8-token tiles. Up to 64 tokens a block,
// the warps are four (32 rows each) by two: a warp reads a quarter fewer bytes of
// shared memory a chunk than as two by four for the same outputs (64 sequences on
// the 8B shape: 7,353 against 7,252 tok/s, 32: 4,809 against 4,726).
template <int kNTiles, bool kGateUp, bool kSplit, int kGateRows = 64>
__global__ void __launch_bounds__(kThreads, kNTiles <= 2 ? 2 : 1)
    gemm_kernel(const __nv_bfloat16* __restrict__ x, int64_t tokens, int64_t k, MmaJob job, float* __restrict__ sums,
                int64_t width, int sums_per_block) {
  let_next_start();
  constexpr int kTokens = 32 * kNTiles;
  constexpr int kStageUnits = (kBlockRows + kTokens) * 8;
  constexpr int kRowWarps = kNTiles <= 2 ? 4 : 2;
  constexpr int kWarpRows = kBlockRows / kRowWarps, kM = kWarpRows / 16;
  constexpr int kN = kTokens / (kThreads / 32 / kRowWarps) / 8;
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, t = lane % 4, warp_m = warp % kRowWarps, warp_n = warp / kRowWarps;

  int s = 0;
  while (s + 1 < job.count && blockIdx.y >= job.first_tile[s + 1]) ++s;
  const int64_t n = job.n[s];
  const int64_t row0 = (static_cast<int64_t>(blockIdx.y) - job.first_tile[s]) * (kGateUp ? kGateRows : kBlockRows);
  // gate/up's block rows r and r + 64 are gate's and up's row row0 + r, for r < kGateRows
  // (Plan::gate_rows); the rest are not stored.
  const auto held = [](int r) { return !kGateUp || r % 64 < kGateRows; };
  const int64_t token0 = static_cast<int64_t>(blockIdx.x) * kTokens;

  // What this thread copies each chunk: four units of weight rows, kNTiles of x.
  const __nv_bfloat16* w_from[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int unit = threadIdx.x + kThreads * j, r = unit / 8;
    const __nv_bfloat16* w = kGateUp && r >= 64 ? job.w[1] : job.w[s];
    // Rows past n, or past gate_rows: computed (from a held row, read again from L2), never stored.
    const int64_t row = min(row0 + (kGateUp ? min(r % 64, kGateRows - 1) : r), n - 1);
    w_from[j] = w + row * k + (unit % 8) * 8;
  }
  // The first chunks' weight rows (one 128-byte line each) head for L2 while the
  // kernels before this one finish: x may be theirs, the weights are not (8B
  // prefill at 512 tokens: 11,988 and 12,246 tok/s against 11,750 and 11,776).
#pragma unroll
  for (int j = 0; j < 4; ++j)
    if (threadIdx.x % 8 == 0)
      for (int c = 0; c < kStages - 1; ++c) prefetch_l2(w_from[j] + static_cast<int64_t>(c) * kMmaChunk);
  wait_for_earlier();
  const __nv_bfloat16* x_from[kNTiles];
#pragma unroll
  for (int j = 0; j < kNTiles; ++j) {
    const int unit = threadIdx.x + kThreads * j;
    x_from[j] = x + min(token0 + unit / 8, tokens - 1) * k + (unit % 8) * 8;
  }
  const auto load = [&](int stage, int chunk) {
    uint4* at = smem + stage * kStageUnits;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int unit = threadIdx.x + kThreads * j;
      copy16(at + unit_at(unit / 8, unit % 8), w_from[j] + static_cast<int64_t>(chunk) * kMmaChunk);
    }
#pragma unroll
    for (int j = 0; j < kNTiles; ++j) {
      const int unit = threadIdx.x + kThreads * j;
      copy16(at + kBlockRows * 8 + x_unit_at(unit / 8, unit % 8), x_from[j] + static_cast<int64_t>(chunk) * kMmaChunk);
    }
  };

  const int chunks = static_cast<int>(k / kMmaChunk);
  ChunkWalk loading{chunks / kMmaSplit, chunks % kMmaSplit};
  int steps = chunks;
  if constexpr (kSplit) {
    loading.sum = static_cast<int>(blockIdx.z) * sums_per_block;
    steps = 0;
    for (int z = loading.sum; z < loading.sum + sums_per_block; ++z) steps += loading.q + (z < loading.r ? 1 : 0);
  }
  ChunkWalk computing = loading;
#pragma unroll
  for (int stage = 0; stage < kStages - 1; ++stage) {
    if (stage < steps) load(stage, loading.chunk()), loading.next();
    copies_sent();
  }
  float acc[kM][kN][4] = {}, total[kM][kN][4] = {};
  int sums_done = 0;  // sums finished and added into total
  // f(m, j, i, r, tok) for accumulator i of lane (g, t) in tile (m, j): row r of the
  // block (g, +8 for i >= 2) and token tok of the block (2t, +1 for odd i).
  const auto each = [&](auto&& f) {
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int j = 0; j < kN; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i)
          f(m, j, i, warp_m * kWarpRows + m * 16 + g + (i >= 2 ? 8 : 0), warp_n * 8 * kN + j * 8 + 2 * t + i % 2);
  };
  int64_t col0 = 0;  // kSplit: where weight s's rows start in a row of sums
  for (int i = 0; i < s; ++i) col0 += job.n[i];
  const auto store_sum = [&](int sum) {  // written out: through each() the 64-token kernel spilled 28 bytes, not 4
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int j = 0; j < kN; ++j)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int r = warp_m * kWarpRows + m * 16 + g + (i >= 2 ? 8 : 0);
          const int64_t row = row0 + (kGateUp ? r % 64 : r);
          const int64_t token = token0 + warp_n * 8 * kN + j * 8 + 2 * t + i % 2;
          if (row < n && token < tokens && held(r))
            sums[(sum * tokens + token) * width + col0 + (kGateUp && r >= 64 ? n : 0) + row] = acc[m][j][i];
          acc[m][j][i] = 0.0f;
        }
  };
  for (int step = 0; step < steps; ++step) {
    copies_wait<kStages - 2>();
    __syncthreads();  // this chunk is in; every warp is done with the stage refilled next
    if (step + kStages - 1 < steps) load((step + kStages - 1) % kStages, loading.chunk()), loading.next();
    copies_sent();

    const uint4* a_tile = smem + (step % kStages) * kStageUnits;
    const uint4* x_tile = a_tile + kBlockRows * 8;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      uint4 a[kM], b[kM], xs[kN];
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const int row = warp_m * kWarpRows + m * 16 + g;
        a[m] = a_tile[unit_at(row, t + 4 * half)];
        b[m] = a_tile[unit_at(row + 8, t + 4 * half)];
      }
#pragma unroll
      for (int j = 0; j < kN; ++j) xs[j] = x_half(x_tile, warp_n * 8 * kN + j * 8, half);
#pragma unroll
      for (int m = 0; m < kM; ++m)
#pragma unroll
        for (int j = 0; j < kN; ++j) mma_half(acc[m][j], a[m], b[m], xs[j]);
    }
    const bool ends_sum = computing.ends_sum();
    const int sum = computing.sum;
    computing.next();
    if constexpr (kSplit) {
      if (ends_sum) store_sum(sum);
    } else if (ends_sum) {
      each([&](int m, int j, int i, int, int) {
        total[m][j][i] = sums_done == 0 ? acc[m][j][i] : total[m][j][i] + acc[m][j][i];
        acc[m][j][i] = 0.0f;
      });
      ++sums_done;
    }
  }
  if constexpr (!kSplit) {
    // With fewer than eight chunks the other sums are zero, and still added.
    for (; sums_done < kMmaSplit; ++sums_done) each([&](int m, int j, int i, int, int) { total[m][j][i] += 0.0f; });

    finish_outputs<kGateUp, kTokens>(job, s, row0, token0, tokens, warp_m * kWarpRows >= 64, smem, [&](auto&& f) {
      each([&](int m, int j, int i, int r, int tok) {
        if (held(r)) f(total[m][j][i], r, tok);
      });
    });
  }
}

// Positions 8 unit .. 8 unit + 7 of a row (a, b) rounded to bf16 pairs, stored in
// mma slot order (mma_slot): pair q of the unit goes to word 4q + unit % 4 of its half.
__device__ __forceinline__ void store_in_slots(uint32_t* __restrict__ row, int64_t unit, float4 a, float4 b) {
  uint32_t* at = row + unit / 4 * 16 + unit % 4;
  at[0] = pack_bf16(a.x, a.y), at[4] = pack_bf16(a.z, a.w), at[8] = pack_bf16(b.x, b.y), at[12] = pack_bf16(b.z, b.w);
}

// x rounded to bf16 as mma.cuh's load_x rounds it, eight elements a thread, in mma
// slot order (rows are whole halves, so the units of all rows count on).
__global__ void to_bf16_kernel(const float* __restrict__ x, int64_t count8, uint32_t* __restrict__ y) {
  let_next_start();
  wait_for_earlier();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count8) return;
  store_in_slots(y, i, __ldg(reinterpret_cast<const float4*>(x) + 2 * i),
                 __ldg(reinterpret_cast<const float4*>(x) + 2 * i + 1));
}

// A row of k values times `scale` (block_rms_scale's) and the norm's weight, rounded
// to bf16 in mma slot order into y_row (k / 2 words): rms_norm's products (weight *
// (x * scale)), then to_bf16's rounding. A block of kNormThreads.
__device__ __forceinline__ void norm_row_to_bf16(const float* row, int64_t k, const __nv_bfloat16* weight, float scale,
                                                 uint32_t* y_row) {
  const auto n = [&](float value, __nv_bfloat16 w) { return __bfloat162float(w) * (value * scale); };
  for (int64_t i = threadIdx.x; i < k / 8; i += kNormThreads) {
    const float4 a = reinterpret_cast<const float4*>(row)[2 * i];
    const float4 b = reinterpret_cast<const float4*>(row)[2 * i + 1];
    const __nv_bfloat16* w = weight + 8 * i;
    store_in_slots(y_row, i, make_float4(n(a.x, w[0]), n(a.y, w[1]), n(a.z, w[2]), n(a.w, w[3])),
                   make_float4(n(b.x, w[4]), n(b.y, w[5]), n(b.z, w[6]), n(b.w, w[7])));
  }
}

// A row of x RMS-normalized and rounded to bf16 (a block of kNormThreads a row),
// so the GEMM reads bitwise what rms_norm and to_bf16_kernel would have written.
__global__ void norm_to_bf16_kernel(const float* __restrict__ x, int64_t k, const __nv_bfloat16* __restrict__ weight,
                                    float eps, uint32_t* __restrict__ y) {
  let_next_start();
  wait_for_earlier();
  __shared__ float shared[32];
  const float* row = x + blockIdx.x * k;
  norm_row_to_bf16(row, k, weight, block_rms_scale(row, k, eps, shared), y + blockIdx.x * (k / 2));
}

// The outputs from the eight sums of a kSplit launch, added in order 0..7 (as
// mma.cuh's block_sum adds the decode kernel's warps'), then the bias, SiLU * up and the
// accumulation as the kernels above finish theirs. Thread per (token, output row).
__global__ void add_sums_kernel(MmaJob job, int64_t tokens, int64_t width, const float* __restrict__ sums) {
  let_next_start();
  wait_for_earlier();
  const int64_t outputs = job.gate_up ? job.n[0] : width;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * outputs) return;
  const int64_t token = i / outputs;
  int64_t row = i % outputs;
  int s = 0;
  while (row >= job.n[s]) row -= job.n[s++];
  const auto sum_at = [&](int64_t col) {
    float total = sums[token * width + col];
    for (int z = 1; z < kMmaSplit; ++z) total += sums[(z * tokens + token) * width + col];
    return total;
  };
  float value = with_bias(sum_at(i % outputs), job.bias[s], row);
  if (job.gate_up) value = silu_times(value, with_bias(sum_at(job.n[0] + row), job.bias[1], row));
  float& out = job.y[s][token * job.n[s] + row];
  out = job.accumulate ? out + value : value;
  if (job.y_bf16 != nullptr) job.y_bf16[token * job.n[s] + mma_slot(row)] = __float2bfloat16_rn(out);
}

// add_sums_kernel's outputs for a q/k/v job with job.rope, turned and stored
// (rope_pair.cuh) instead of written as they are: thread per (token, pair of rows
// i and i + head_dim / 2 of one head of q, k or v).
__global__ void add_sums_rope_kernel(MmaJob job, int64_t tokens, int64_t width, const float* __restrict__ sums) {
  let_next_start();
  wait_for_earlier();
  const int64_t pairs = width / 2, half = job.rope.head_dim / 2;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= tokens * pairs) return;
  const int64_t token = i / pairs;
  int64_t pair = i % pairs, col = 0;
  int s = 0;
  while (pair >= job.n[s] / 2) pair -= job.n[s] / 2, col += job.n[s++];
  const int64_t row_a = pair / half * 2 * half + pair % half, row_b = row_a + half;
  const auto sum_at = [&](int64_t row) {
    float total = sums[token * width + col + row];
    for (int z = 1; z < kMmaSplit; ++z) total += sums[(z * tokens + token) * width + col + row];
    return with_bias(total, job.bias[s], row);
  };
  rope_store_pair(job, s, token, row_a, row_b, sum_at(row_a), sum_at(row_b));
}

// add_sums_kernel's outputs for a job of one weight that accumulates, a block a
// token, and then the token's row normalized into job.next_x as norm_to_bf16_kernel
// normalizes it (the same block_rms_scale and products), for the normalizing
// matmul that comes next: one launch instead of two. A thread takes four outputs
// at a time, kHeld such at once: it loads all their sums (and residuals) before
// it adds any, so that a block's few warps keep the row's sums in flight; each
// output's sums are added in order 0..7, as add_sums_kernel adds them.
__global__ void __launch_bounds__(kNormThreads)
    add_sums_norm_kernel(MmaJob job, int64_t tokens, const float* __restrict__ sums) {
  constexpr int kHeld = 4;  // 4096 outputs a pass
  let_next_start();
  wait_for_earlier();
  __shared__ float shared[32];
  const int64_t width = job.n[0], token = blockIdx.x, quads = width / 4;
  auto* row = reinterpret_cast<float4*>(job.y[0] + token * width);
  for (int64_t base = threadIdx.x; base < quads; base += kHeld * kNormThreads) {
    float4 part[kHeld][kMmaSplit], out[kHeld];
#pragma unroll
    for (int j = 0; j < kHeld; ++j) {
      const int64_t i = base + j * kNormThreads;
      if (i >= quads) break;
#pragma unroll
      for (int z = 0; z < kMmaSplit; ++z)
        part[j][z] = reinterpret_cast<const float4*>(sums + (z * tokens + token) * width)[i];
      out[j] = row[i];
    }
#pragma unroll
    for (int j = 0; j < kHeld; ++j) {
      const int64_t i = base + j * kNormThreads;
      if (i >= quads) break;
      float4 total = part[j][0];
#pragma unroll
      for (int z = 1; z < kMmaSplit; ++z)
        total.x += part[j][z].x, total.y += part[j][z].y, total.z += part[j][z].z, total.w += part[j][z].w;
      out[j].x += with_bias(total.x, job.bias[0], 4 * i), out[j].y += with_bias(total.y, job.bias[0], 4 * i + 1);
      out[j].z += with_bias(total.z, job.bias[0], 4 * i + 2), out[j].w += with_bias(total.w, job.bias[0], 4 * i + 3);
      row[i] = out[j];
    }
  }
  __syncthreads();  // the row, whole, for every thread of the block
  const float* normed = job.y[0] + token * width;
  norm_row_to_bf16(normed, width, job.next_norm, block_rms_scale(normed, width, job.next_eps, shared),
                   reinterpret_cast<uint32_t*>(job.next_x) + token * (width / 2));
}

// A job's blocks, their tokens and rows, and whether they split the eight sums:
// when the blocks for whole outputs would not fill half the device (few tokens,
// few rows), eight times as many blocks each run one sum. (On the H200, 8B shape:
// 4096 rows at 64 tokens, 32 blocks, 55 -> 26 us split; at 512 tokens, 128 blocks,
// 80 us whole against 125 split.) Blocks of 32 tokens run two or four sums one
// after the other when one sum a block would take more than one wave of blocks
// (two an SM), so that the launch is one wave: on the H200, 8B shape, 32 sequences
// (q/k/v: 384 blocks -> 192) 4,893 and 4,888 tok/s against 4,841 and 4,859 with one
// sum a block; at 64 tokens the same change lost (7,088 and 7,098 against 7,209 and
// 7,151). TESSERA_CUDA_GEMM_SUMS=1, 2, 4 or 8 sets it (read at every call).
// Blocks of 64 tokens held to 32 (two blocks side by side a tile of rows, reading
// the weights from DRAM about once) were measured 23 % slower at 64 sequences
// (session 30: 6,011-6,036 tok/s against 7,776-7,782).
//
// gate/up's blocks of 32 tokens take 56 rows of gate and the same of up where that
// evens out the SMs' work (a block stores its first 56 rows of each; the other 8
// are computed from a copy of the 56th), and 64 otherwise: 32 sequences' gate/up on
// the 8B shape is 224 blocks of 64 rows (92 SMs run two, 40 one) or 256 of 56 (124
// run two), so the SMs that finish last hold 112 rows, not 128. On the H200
// (session 31, two rounds): 32 sequences 5,036.7 and 5,032.6 tok/s against 4,989.5
// and 4,971.9; at 64 sequences (blocks of 64 tokens) the same choice lost (7,641.8
// and 7,674.6 against 7,685.6 and 7,695.7), so those keep 64 rows.
int gate_rows_for(int64_t n, int64_t token_tiles) {
  const int64_t sms = multiprocessors();
  const auto most_rows = [&](int rows) {  // on the SM with the most blocks
    const int64_t blocks = token_tiles * ((n + rows - 1) / rows);
    return (blocks + sms - 1) / sms * rows;
  };
  return token_tiles * ((n + 55) / 56) <= 2 * sms && most_rows(56) < most_rows(64) ? 56 : 64;
}

struct Plan {
  int n_tiles;  // 8-token tiles per warp
  int64_t token_tiles, row_tiles, width;
  bool split;
  int sums_per_block = kMmaSplit;
  int gate_rows = 64;  // gate/up: rows of each a block
  Plan(int64_t tokens, int64_t k, const MmaJob& job) {
    n_tiles = tokens >= 128 ? 4 : tokens >= 64 ? 2 : 1;
    token_tiles = (tokens + 32 * n_tiles - 1) / (32 * n_tiles);
    if (job.gate_up && n_tiles == 1) gate_rows = gate_rows_for(job.n[0], token_tiles);
    const int rows = job.gate_up ? gate_rows : kBlockRows;
    row_tiles = width = 0;
    for (int s = 0; s < job.count; ++s) row_tiles += (job.n[s] + rows - 1) / rows, width += job.n[s];
    if (job.gate_up) width = 2 * job.n[0];
    split = 2 * token_tiles * row_tiles <= multiprocessors() && k >= kMmaSplit * kMmaChunk;
    if (!split) return;
    const int64_t wave = 2 * static_cast<int64_t>(multiprocessors());
    sums_per_block = 1;
    while (n_tiles == 1 && sums_per_block < 4 && kMmaSplit / sums_per_block * token_tiles * row_tiles > wave)
      sums_per_block *= 2;
    if (const char* asked = std::getenv("TESSERA_CUDA_GEMM_SUMS"); asked != nullptr) {
      const int n = std::atoi(asked);
      if (n == 1 || n == 2 || n == 4 || n == 8) sums_per_block = n;
    }
  }
};

// One gemm_kernel launch (its shared memory allowed once).
template <int kNTiles, bool kGateUp, bool kSplit, int kGateRows>
void launch_gemm(cudaStream_t stream, dim3 grid, const __nv_bfloat16* x, int64_t tokens, int64_t k, const MmaJob& job,
                 float* sums, const Plan& plan) {
  constexpr size_t kSmem = size_t{kStages} * (kBlockRows + 32 * kNTiles) * 8 * sizeof(uint4);
  static const bool sized =
      cudaFuncSetAttribute(gemm_kernel<kNTiles, kGateUp, kSplit, kGateRows>,
                           cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmem)) == cudaSuccess;
  TS_CHECK(sized, "the gemm kernel cannot have ", kSmem, " bytes of shared memory");
  launch_kernel(gemm_kernel<kNTiles, kGateUp, kSplit, kGateRows>, grid, kThreads, kSmem, stream, x, tokens, k, job,
                sums, plan.width, plan.sums_per_block);
}

template <int kNTiles, bool kGateUp, bool kSplit>
void launch(cudaStream_t stream, const __nv_bfloat16* x, int64_t tokens, int64_t k, MmaJob job, const Plan& plan,
            float* sums) {
  const int rows = kGateUp ? plan.gate_rows : kBlockRows;
  job.first_tile[0] = 0;
  for (int s = 0; s < job.count; ++s) job.first_tile[s + 1] = job.first_tile[s] + (job.n[s] + rows - 1) / rows;
  const dim3 grid(static_cast<unsigned>(plan.token_tiles), static_cast<unsigned>(plan.row_tiles),
                  kSplit ? kMmaSplit / plan.sums_per_block : 1);
  constexpr int kFewerRows = kGateUp && kNTiles == 1 ? 56 : 64;  // gate_rows_for
  if (plan.gate_rows == 56)
    launch_gemm<kNTiles, kGateUp, kSplit, kFewerRows>(stream, grid, x, tokens, k, job, sums, plan);
  else launch_gemm<kNTiles, kGateUp, kSplit, 64>(stream, grid, x, tokens, k, job, sums, plan);
  if constexpr (kSplit) {
    if (job.next_x != nullptr)
      return launch_kernel(add_sums_norm_kernel, static_cast<unsigned>(tokens), kNormThreads, 0, stream, job, tokens,
                           sums);
    if (job.rope.inv_freq != nullptr)
      return launch_kernel(add_sums_rope_kernel, static_cast<unsigned>((tokens * plan.width / 2 + 255) / 256), 256, 0,
                           stream, job, tokens, plan.width, sums);
    const int64_t outputs = tokens * (kGateUp ? job.n[0] : plan.width);
    launch_kernel(add_sums_kernel, static_cast<unsigned>((outputs + 255) / 256), 256, 0, stream, job, tokens,
                  plan.width, sums);
  }
}

template <bool kGateUp, bool kSplit>
void launch_tiles(cudaStream_t stream, const __nv_bfloat16* x, int64_t tokens, int64_t k, const MmaJob& job,
                  const Plan& plan, float* sums) {
  if (plan.n_tiles == 4) return launch<4, kGateUp, kSplit>(stream, x, tokens, k, job, plan, sums);
  if (plan.n_tiles == 2) return launch<2, kGateUp, kSplit>(stream, x, tokens, k, job, plan, sums);
  launch<1, kGateUp, kSplit>(stream, x, tokens, k, job, plan, sums);
}

size_t x_bytes(int64_t tokens, int64_t k) {
  return (static_cast<size_t>(tokens * k) * sizeof(__nv_bfloat16) + 255) / 256 * 256;
}

// The peak: every warp runs kPeakChains independent accumulators through
// kPeakSteps mma instructions each (operands in registers, so nothing waits for
// memory), and writes its sums so that none is optimised away.
constexpr int kPeakChains = 8, kPeakSteps = 4096, kPeakBlocksPerSm = 4;

__global__ void __launch_bounds__(kThreads) mma_peak_kernel(float* out) {
  let_next_start();
  wait_for_earlier();
  const uint32_t a = pack_bf16(1e-3f * threadIdx.x, 1.0f), b = pack_bf16(1.0f, -1e-3f * threadIdx.x);
  float c[kPeakChains][4] = {};
  for (int step = 0; step < kPeakSteps; ++step)
#pragma unroll
    for (int i = 0; i < kPeakChains; ++i) mma_bf16(c[i], a, b, a, b, b, a);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < kPeakChains; ++i) sum += c[i][0] + c[i][1] + c[i][2] + c[i][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = sum;
}

}  // namespace

int multiprocessors() {
  static const int count = [] {
    int device = 0, sms = 0;
    return cudaGetDevice(&device) == cudaSuccess &&
                   cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) == cudaSuccess
               ? sms
               : 1;
  }();
  return count;
}

double mma_peak(cudaStream_t stream) {
  const int blocks = kPeakBlocksPerSm * multiprocessors();
  float* out = nullptr;
  TS_CHECK(cudaMalloc(&out, sizeof(float) * blocks * kThreads) == cudaSuccess, "[cuda] the peak's output");
  cudaEvent_t begin, end;
  cudaEventCreate(&begin);
  cudaEventCreate(&end);
  float best_ms = 0.0f;
  for (int round = 0; round < 4; ++round) {  // the first warms up
    cudaEventRecord(begin, stream);
    launch_kernel(mma_peak_kernel, blocks, kThreads, 0, stream, out);
    cudaEventRecord(end, stream);
    cudaEventSynchronize(end);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, begin, end);
    if (round > 0 && (best_ms == 0.0f || ms < best_ms)) best_ms = ms;
  }
  cudaEventDestroy(begin);
  cudaEventDestroy(end);
  cudaFree(out);
  const double flops = 2.0 * 16 * 8 * 16 * kPeakChains * kPeakSteps * (kThreads / 32.0) * blocks;
  return flops / (best_ms * 1e-3);
}

int64_t mma_gemm_min_tokens() { return 32; }

namespace {

// mma_gemm_normalizes_ahead for a plan already made.
bool normalizes_ahead(int64_t tokens, const MmaJob& job, const Plan& plan) {
  return tokens >= mma_gemm_min_tokens() && job.count == 1 && job.accumulate && !job.gate_up && job.y_bf16 == nullptr &&
         job.n[0] % 8 == 0 && plan.split;
}

}  // namespace

bool mma_gemm_normalizes_ahead(int64_t tokens, int64_t k, const MmaJob& job) {
  return normalizes_ahead(tokens, job, Plan(tokens, k, job));
}

bool mma_gemm_splits(int64_t tokens, int64_t k, const MmaJob& job) { return Plan(tokens, k, job).split; }

size_t mma_gemm_scratch(int64_t tokens, int64_t k, const MmaJob& job) {
  const Plan plan(tokens, k, job);
  return x_bytes(tokens, k) + (plan.split ? static_cast<size_t>(kMmaSplit * tokens * plan.width) * sizeof(float) : 0);
}

bool mma_gemm(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, const MmaJob& given, void* scratch,
              const __nv_bfloat16* x_rounded) {
  auto* x_bf16 = static_cast<__nv_bfloat16*>(scratch);
  auto* sums = reinterpret_cast<float*>(static_cast<char*>(scratch) + x_bytes(tokens, k));
  const int64_t count8 = tokens * k / 8;
  TS_CHECK(x_rounded == nullptr || given.norm == nullptr, "a normalizing matmul of x already rounded");
  if (x_rounded != nullptr) x_bf16 = const_cast<__nv_bfloat16*>(x_rounded);
  else if (given.norm != nullptr)
    launch_kernel(norm_to_bf16_kernel, static_cast<unsigned>(tokens), kNormThreads, 0, stream, x, k, given.norm,
                  given.eps, reinterpret_cast<uint32_t*>(x_bf16));
  else
    launch_kernel(to_bf16_kernel, static_cast<unsigned>((count8 + 255) / 256), 256, 0, stream, x, count8,
                  reinterpret_cast<uint32_t*>(x_bf16));
  const Plan plan(tokens, k, given);
  TS_CHECK(given.rope.inv_freq == nullptr || (plan.split && given.count == 3 && !given.gate_up && !given.accumulate),
           "a q/k/v job with rope of ", given.count, " weights for ", tokens, " tokens");
  MmaJob job = given;
  const bool next = job.next_x != nullptr && job.next_norm != nullptr && normalizes_ahead(tokens, job, plan);
  if (!next) job.next_x = nullptr;
  // 128 tokens a block and whole outputs: on wgmma where this build and the device
  // have it (TESSERA_CUDA_WGMMA=0: never, read at every call).
  if (!plan.split && plan.n_tiles == 4 && !switched_off("TESSERA_CUDA_WGMMA") &&
      wgmma_gemm(stream, x_bf16, tokens, k, job))
    return false;
  if (job.gate_up)
    plan.split ? launch_tiles<true, true>(stream, x_bf16, tokens, k, job, plan, sums)
               : launch_tiles<true, false>(stream, x_bf16, tokens, k, job, plan, sums);
  else if (plan.split) launch_tiles<false, true>(stream, x_bf16, tokens, k, job, plan, sums);
  else launch_tiles<false, false>(stream, x_bf16, tokens, k, job, plan, sums);
  return next;
}

}  // namespace tessera::cuda
