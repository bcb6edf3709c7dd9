// Matmul and embedding on ggml's quantized blocks (quant.cuh).
//
// Activations. round_q8_0 and round_q8_k restate cpu/quant_act.cpp's rounding (ggml's
// quantize_row_q8_0_ref and quantize_row_q8_K_ref) with one warp a block, in IEEE f32
// operations that nvcc may not fuse (__fmul_rn), so the 8-bit values, the scales and
// Q8_K's sums of 16 are the CPU's bits. They go to the scratch: q [tokens][k] (int8),
// the scales [tokens][k / 32] (f32; k / 256 of them for Q8_K) and the sums
// [tokens][k / 16] (int16). One rounding serves every matmul of the same x whose
// weights take it (CudaDevice's matmuls and gate_up: q, k and v; gate and up).
//
// Weights. A launch takes up to kMaxQuantJobs matmuls of one x and one dtype (q, k
// and v), each job's rows in blocks of their own, so a job's outputs are what a
// launch of it alone gives, and small matrices (k, v) do not each pay a launch's ramp
// and tail. A warp owns one weight row and up to kTile tokens. Where the tile's
// rounded activations take at most kStagedBytes (decode, and tiles of up to 4 tokens
// on rows that are not too long), a block of 8 warps first copies them into shared
// memory and its rounds read them from there, not from L2 (else a block of 4 warps
// reads them from global memory). A warp streams the row's
// bytes into its ring in shared memory with 16-byte cp.async copies (stages of 512
// bytes, Unit::kAhead of them in flight; a token's lean kernels, 1 KiB),
// whatever the blocks' alignment (a Q8_0 block is 34 bytes, a Q6_K one 210), and reads
// each block from there: the ring's first bytes repeat past its end (the lean kernels:
// a whole unit of Q4_K and Q6_K), so a part that wraps is read in a row, and Q4_K and Q5_K
// blocks (144 and 176 bytes, so on 16-byte boundaries) take 16-byte reads. The row's units (a
// block of 32 for Q8_0/Q4_0, a super-block of 256 for the K types) are dealt
// round-robin to G groups (G = 16, 32, 4, 4, 4 for Q8_0, Q4_0, Q4_K, Q5_K, Q6_K): unit
// u to group u % G. L lanes take a unit (L = 1, 1, 4, 4, 4), each a fixed part of it;
// where G L is 16 (Q8_0 and the K types) the warp's two halves take two units of each
// group a round (half 0 unit u, half 1 unit u + G), so that a lane's part of a unit is
// twice as large as with one unit a group and the per-unit work costs half as much a
// byte. The lanes of a unit add their integer products (exact, in int32), then every
// unit of a group in ascending order does
//   acc = fma(d_w * d_x, float(P), acc)        and, Q4_K/Q5_K, acc = fma(-(dmin_w * d_x), float(M), acc)
// with P the unit's integer sum of scale x q_w x q_x and M its mins times Q8_K's sums
// (as quant_dot.h defines them). The row's output is then group 0's acc + group 1's
// + ... in group order. Every order depends on the dtype and k alone; the tile, the
// number of tokens, the grid and the ring do not touch it. The CPU adds the same
// integer sums in another order of f32 steps (quant_dot.h), so the two devices agree
// to within the rounding of those steps, not bitwise. gate_up's gate and up take one
// launch (two jobs), and the rounding for down applies silu_mul as it reads them
// (quant_round_gated).
// Q4_K's matmuls of up to 8 tokens take quant_mma.cu's tensor-core kernel instead
// (quant_mma_products): the same integer sums and f32 steps, so the same bits.
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/common.cuh"
#include "backend/cuda/quant.cuh"
#include "backend/cuda/quant_lanes.cuh"
#include "backend/quant_types.h"
#include "core/check.h"

namespace tessera::cuda {

namespace {

// A block copies its tile's rounded activations into shared memory when they take
// at most this (decode, and short tiles), so that the rounds read them from there.
constexpr int64_t kStagedBytes = 24 << 10;
// A block's warps, one weight row each: 8 when the activations are staged (they
// share one copy), else 4 (the 8-token tiles use 140 registers a thread).
template <bool kStaged>
constexpr int kWarpsOf = kStaged ? 8 : 4;

Acts acts_in(void* scratch, int64_t tokens, int64_t k) {
  auto* base = static_cast<uint8_t*>(scratch);
  const size_t q_bytes = (static_cast<size_t>(tokens * k) + 15) / 16 * 16;
  const size_t d_bytes = (static_cast<size_t>(tokens * (k / 32)) * sizeof(float) + 15) / 16 * 16;
  return {reinterpret_cast<int8_t*>(base), reinterpret_cast<float*>(base + q_bytes),
          reinterpret_cast<int16_t*>(base + q_bytes + d_bytes)};
}

// ---- Activations ----

// One warp a block of 32 (quantize_row_q8_0_ref): lane i rounds element i, v, of the
// scratch's block `block`.
__device__ __forceinline__ void round_q8_0(float v, int64_t block, Acts a) {
  const int lane = threadIdx.x % 32;
  const float amax = warp_max(fabsf(v));
  const bool finite = __all_sync(0xffffffffu, isfinite(v));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const float r = roundf(__fmul_rn(v, id));  // ties away from zero, as roundf on the CPU
  a.q[block * 32 + lane] = static_cast<int8_t>(isfinite(r) ? static_cast<int>(r) : 0);
  if (lane == 0) a.d[block] = finite ? __half2float(__float2half_rn(d)) : __int_as_float(0x7fc00000);
}

// One warp a block of 256 (quantize_row_q8_K_ref): lane i rounds elements 8i..8i+7, v.
__device__ __forceinline__ void round_q8_k(const float (&v)[8], int64_t block, Acts a) {
  const int lane = threadIdx.x % 32;
  const int64_t at = block * 256 + 8 * lane;
  // The element of largest |x|, the first such (the CPU's strict > in ascending order).
  float amax = 0.0f, max = 0.0f;
  int index = 1 << 30;  // past every element
  bool finite = true;
  for (int j = 0; j < 8; ++j) {
    finite = finite && isfinite(v[j]);
    if (fabsf(v[j]) > amax) amax = fabsf(v[j]), max = v[j], index = 8 * lane + j;
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    const float other_amax = __shfl_xor_sync(0xffffffffu, amax, offset);
    const float other_max = __shfl_xor_sync(0xffffffffu, max, offset);
    const int other_index = __shfl_xor_sync(0xffffffffu, index, offset);
    if (other_amax > amax || (other_amax == amax && other_index < index))
      amax = other_amax, max = other_max, index = other_index;
  }
  finite = __all_sync(0xffffffffu, finite);
  int q[8] = {};
  float d = 0.0f;
  if (amax != 0.0f || !finite) {
    const float iscale = -127.0f / max;
    for (int j = 0; j < 8; ++j) {
      const float s = __fmul_rn(iscale, v[j]);
      q[j] = min(127, isfinite(s) ? __float2int_rn(s) : 0);  // half to even, as ggml's nearest_int
    }
    d = finite ? 1.0f / iscale : __int_as_float(0x7fc00000);
  }
  uint32_t packed[2] = {};
  int sum = 0;
  for (int j = 0; j < 8; ++j) {
    packed[j / 4] |= (static_cast<uint32_t>(q[j]) & 0xffu) << (8 * (j % 4));
    sum += q[j];
  }
  *reinterpret_cast<uint2*>(a.q + at) = make_uint2(packed[0], packed[1]);
  sum += __shfl_down_sync(0xffffffffu, sum, 1);
  if (lane % 2 == 0) a.s[block * 16 + lane / 2] = static_cast<int16_t>(sum);
  if (lane == 0) a.d[block] = d;
}

// What round_kernel rounds: x's rows as they are, normalized as rms_norm does it
// (kNorm), or silu_mul's silu(x) * up, x the gate (kGated), which it also writes to
// `out`, bitwise as silu_mul would.
enum class Rounds { kPlain, kNorm, kGated };

// The kN values of a row from element e on, as `kR` rounds them (kGated: up's and
// out's rows of it too).
template <DType D, Rounds kR, int kN>
__device__ __forceinline__ void values_at(const float* row, const float* up, float* out, const Storage<D>* weight,
                                          float scale, int64_t e, float (&v)[kN]) {
  if constexpr (kN == 8) {
    const float4 v0 = *reinterpret_cast<const float4*>(row + e), v1 = *reinterpret_cast<const float4*>(row + e + 4);
    v[0] = v0.x, v[1] = v0.y, v[2] = v0.z, v[3] = v0.w, v[4] = v1.x, v[5] = v1.y, v[6] = v1.z, v[7] = v1.w;
  } else {
    v[0] = row[e];
  }
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    if constexpr (kR == Rounds::kNorm) v[j] = widen<D>(weight[e + j]) * (v[j] * scale);
    if constexpr (kR == Rounds::kGated) v[j] = silu_times(v[j], up[e + j]);
  }
  if constexpr (kR == Rounds::kGated) {
#pragma unroll
    for (int j = 0; j < kN; ++j) out[e + j] = v[j];
  }
}

// A block of kNormThreads threads rounds 8 blocks of kSize activations of one row of
// x (blockIdx.x the row, blockIdx.y which 8), one warp a block, once the earlier
// kernels are done. With a norm weight (kNorm) it first takes the row's RMSNorm scale
// as rms_norm does (block_rms_scale, the same threads) and normalizes each value as
// rms_norm does, so that the rounding reads rms_norm's bits. (kGated: up and out
// [rows, k] as values_at reads and writes them; out may be x.)
template <DType D, Rounds kR, int kSize>
__global__ void round_kernel(const float* x, const float* __restrict__ up, float* out, int64_t k,
                             const Storage<D>* __restrict__ weight, float eps, Acts a) {
  let_next_start();
  wait_for_earlier();
  const int64_t at = blockIdx.x * k;  // the row's first element
  const float* row = x + at;
  float scale = 0.0f;
  if constexpr (kR == Rounds::kNorm) {
    __shared__ float shared[32];
    scale = block_rms_scale(row, k, eps, shared);
  }
  const int64_t b = static_cast<int64_t>(blockIdx.y) * (kNormThreads / 32) + threadIdx.x / 32;  // the warp's block
  if (b >= k / kSize) return;
  constexpr int kEach = kSize / 32;  // a lane's values
  float v[kEach];
  const bool gated = kR == Rounds::kGated;
  values_at<D, kR>(row, gated ? up + at : nullptr, gated ? out + at : nullptr, weight, scale,
                   kSize * b + kEach * (threadIdx.x % 32), v);
  if constexpr (kSize == 32) round_q8_0(v[0], blockIdx.x * (k / 32) + b, a);
  else round_q8_k(v, blockIdx.x * (k / 256) + b, a);
}

// ---- Weights ----

// Bytes of the rounded activations of `tile` tokens: q, the scales, Q8_K's sums.
template <DType kT>
int64_t staged_bytes(int tile, int64_t k) {
  using U = Unit<kT>;
  return tile * (k + k / U::kElems * int64_t{sizeof(float)} + (U::kSums ? k / 16 * int64_t{sizeof(int16_t)} : 0));
}

// The 6-bit scale and min of sub-block g (the embedding's dequantization).
__device__ __forceinline__ void scale_min(const uint32_t (&s)[3], int g, int& sc, int& m) {
  uint32_t scs, ms;
  scales_mins(s[0], s[1], s[2], g / 2, scs, ms);
  sc = static_cast<int>((scs >> (8 * (g % 4))) & 0xff), m = static_cast<int>((ms >> (8 * (g % 4))) & 0xff);
}

// The lean kernels (kLean, bits of): kLeanStages streams the row in stages of 1 KiB (half
// the stages' fixed work a byte; Unit::kAheadOf of them in flight) with a running pointer
// (each stage's copies an add, not their address again from the row), kLeanLanes unpacks
// Q4_K's and Q6_K's weights in fewer operations (lane_part's kLean; their rings' tails
// hold a unit, Unit::kTail). A token's matmuls take both by default: bitwise the kernels
// before, and faster on the H200 (session 28, 2 layers of the 8B shape: Q8_0 45.9 -> 49.0-49.8 %
// of the copy bandwidth, Q4_K_M 31.2-32.1 -> 33.7-33.8 %). TESSERA_CUDA_QUANT_LEAN=stages takes
// the stages alone, =0 the kernels before (lean_asked); launches of more tokens take those.
constexpr int kLeanStages = 1, kLeanLanes = 2, kLean = kLeanStages | kLeanLanes;

// The ring's tail and a warp's ring in shared memory (Unit::kStride for the lean lanes).
template <DType kT, int kLeanBits>
constexpr int kTailOf = (kLeanBits & kLeanLanes) != 0 ? Unit<kT>::kTail : kRingTail;
template <DType kT, int kLeanBits>
constexpr int kStrideOf = kRingBytes + kTailOf<kT, kLeanBits>;

// The lean kernels' bits a token's matmuls take (read at each call).
int lean_asked() {
  const char* value = std::getenv("TESSERA_CUDA_QUANT_LEAN");
  const std::string_view asked = value != nullptr ? value : "";
  return asked == "0" ? 0 : asked == "stages" ? kLeanStages : kLean;
}

// A shared-memory address (the ring's), for copies into it.
__device__ __forceinline__ void copy16_at(uint32_t to, const void* from) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(to), "l"(from));
}

// Blocks an SM that ptxas must leave room for (0: its own choice), for the decode
// kernels of the two common files: left alone, ptxas gives Q8_0's 48 registers (5
// blocks of 8 warps an SM) and Q4_K's 64 (4); held to 40 and 48, as they were before
// the jobs, 6 and 5 blocks fit beside their shared memory at k = 4096.
template <DType kT, int kTile, bool kStaged>
constexpr int kMinBlocksOf = !kStaged || kTile > 1 ? 0
                             : kT == DType::kQ8_0  ? 6
                             : kT == DType::kQ4_K  ? 5
                                                   : 0;

template <DType kT, int kTile, bool kStaged, int kLeanBits>
__global__ void __launch_bounds__(kWarpsOf<kStaged> * 32, (kMinBlocksOf<kT, kTile, kStaged>))
    quant_matmul_kernel(const __grid_constant__ QuantJobs jobs, int k, int tokens, Acts a, bool accumulate) {
  using U = Unit<kT>;
  constexpr int kWarps = kWarpsOf<kStaged>;
  constexpr int kLanes = U::kLanes, kGroups = U::kGroups;
  constexpr bool kLeanS = (kLeanBits & kLeanStages) != 0;
  constexpr int kStage = kLeanS ? kLeanStageBytes : kStageBytes, kAhead = U::template kAheadOf<kStage>;
  constexpr bool kMins = kT == DType::kQ4_K || kT == DType::kQ5_K;
  extern __shared__ uint4 shared[];  // the warps' rings, then (kStaged) the tile's activations
  let_next_start();
  // 32-bit arithmetic throughout (launch checks that rows, tokens and a row's bytes fit).
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  // The block's job (__grid_constant__: its fields are read where they lie).
  static_assert(kMaxQuantJobs == 3);
  const int job = (blockIdx.x >= jobs.first[1]) + (blockIdx.x >= jobs.first[2]);
  const uint8_t* __restrict__ w = jobs.w[job];
  const int n = jobs.n[job];
  const unsigned block = blockIdx.x - jobs.first[job];
  // Consecutive blocks take the same rows for successive tiles of tokens, so that
  // prefill reads each row from memory once and then from L2. A warp past the job's
  // last row streams that row again (every warp reaches the block's barrier) and
  // stores nothing.
  const unsigned tiles = (tokens + kTile - 1) / kTile;
  const unsigned rows = (kLeanBits & kLeanStages) != 0 && tiles == 1 ? block : block / tiles;
  const int own_row = static_cast<int>(rows) * kWarps + warp, token0 = static_cast<int>(block - rows * tiles) * kTile;
  const int row = min(own_row, n - 1);
  constexpr int kTail = kTailOf<kT, kLeanBits>;
  uint8_t* ring = reinterpret_cast<uint8_t*>(shared) + warp * kStrideOf<kT, kLeanBits>;
  const int units = k / U::kElems;
  const uint32_t row_bytes = static_cast<uint32_t>(units) * U::kBytes;
  // The row's stream: from the 16-byte boundary at or before its first byte; this lane
  // copies bytes 16 lane.. of each stage.
  const uint8_t* first = w + static_cast<size_t>(row) * row_bytes;
  const uint32_t skew = reinterpret_cast<uintptr_t>(first) & 15;
  const uint8_t* from = first - skew + 16 * lane;
  const uint32_t end = skew + row_bytes, chunks = (end + 15) / 16, stages = (end + kStage - 1) / kStage;
  // (kLeanStages) This lane's next copy (a running pointer), into the ring's bytes at.
  const uint8_t* next = from;
  const uint32_t ring_at = static_cast<uint32_t>(__cvta_generic_to_shared(ring)) + 16 * lane;
  const auto issue = [&](uint32_t stage) {
    if constexpr (kLeanS) {                                     // the lane's 16 bytes of each 512 of the stage
      const uint32_t at = (stage * kStage) & (kRingBytes - 1);  // and 16 lane
#pragma unroll
      for (int c = 0; c < kStage / kStageBytes; ++c) {
        if (stage * (kStage / 16) + 32 * c + lane < chunks) {
          copy16_at(ring_at + at + c * kStageBytes, next + c * kStageBytes);
          if (c == 0 && at + 16 * lane < kTail) copy16_at(ring_at + kRingBytes + at, next);  // and into the tail
        }
      }
      next += kStage;
    } else if (stage * 32 + lane < chunks) {
      const uint32_t at = (stage * kStageBytes + 16 * lane) & (kRingBytes - 1);
      copy16(ring + at, from + stage * kStageBytes);
      if (at < kTail) copy16(ring + kRingBytes + at, from + stage * kStageBytes);  // and into the tail
    }
    copies_sent();
  };
  for (int s = 0; s < kAhead; ++s) issue(s);
  wait_for_earlier();  // the weights are on their way; the activations are the last kernel's

  // Where the tile's activations are read: token t of the tile is row xt[t] of x.
  int64_t xt[kTile];
#pragma unroll
  for (int t = 0; t < kTile; ++t) xt[t] = min(token0 + t, tokens - 1);
  Acts x = a;
  const int scales = k / U::kElems;
  if constexpr (kStaged) {
    // The block copies them to shared memory once (words of 16 and 4 bytes: the
    // scales and sums of a token need not start on 16 bytes), then reads them from there.
    const int sum_words = U::kSums ? k / 32 : 0;
    auto* q = reinterpret_cast<int8_t*>(shared) + kWarps * kStrideOf<kT, kLeanBits>;
    auto* d = reinterpret_cast<float*>(q + kTile * k);
    auto* sums = reinterpret_cast<int16_t*>(d + kTile * scales);
#pragma unroll
    for (int t = 0; t < kTile; ++t) {
      const auto* q_from = reinterpret_cast<const int4*>(a.q + xt[t] * k);
      const float* d_from = a.d + xt[t] * scales;
      const auto* sums_from = reinterpret_cast<const int32_t*>(a.s + xt[t] * (k / 16));
      for (int i = threadIdx.x; i < k / 16; i += kWarps * 32) reinterpret_cast<int4*>(q + t * k)[i] = q_from[i];
      for (int i = threadIdx.x; i < scales; i += kWarps * 32) d[t * scales + i] = d_from[i];
      for (int i = threadIdx.x; i < sum_words; i += kWarps * 32)
        reinterpret_cast<int32_t*>(sums + t * (k / 16))[i] = sums_from[i];
      xt[t] = t;
    }
    __syncthreads();
    x = Acts{q, d, sums};
  }
  const float* dx[kTile];  // the tile's scales of x
#pragma unroll
  for (int t = 0; t < kTile; ++t) dx[t] = x.d + xt[t] * scales;
  // Lane (half, group, j): round r's unit u0 + mine (u0 = r * kRound).
  const int half = lane / (kLanes * kGroups), group = lane / kLanes % kGroups, j = lane % kLanes;
  const int mine = half * kGroups + group;
  const auto* ring32 = reinterpret_cast<const uint32_t*>(ring);
  float acc[kTile] = {};
  // Unit v's f32 steps, with its d_w, dmin_w and integer sums.
  const auto add = [&](int v, float d, float dmin, const int(&p)[kTile], const int(&m)[kTile]) {
    if (v < units)
#pragma unroll
      for (int t = 0; t < kTile; ++t) {
        const float d_x = dx[t][v];
        acc[t] = fmaf(__fmul_rn(d, d_x), static_cast<float>(p[t]), acc[t]);
        if constexpr (kMins) acc[t] = fmaf(-__fmul_rn(dmin, d_x), static_cast<float>(m[t]), acc[t]);
      }
  };
  // A round needs the stream up to round_end. (A row's units and bytes fit in 32 bits:
  // ring offsets wrap anyway.)
  int u0 = 0;
  uint32_t round_end = skew + U::kRound * U::kBytes;
  for (uint32_t stage = 0; stage < stages; ++stage) {
    copies_wait<kAhead - 1>();
    __syncwarp();
    const uint32_t landed = min((stage + 1) * kStage, end);
    for (; u0 < units && min(round_end, end) <= landed; u0 += U::kRound, round_end += U::kRound * U::kBytes) {
      const int u = u0 + mine;
      int p[kTile] = {}, m[kTile] = {};
      float d = 0.0f, dmin = 0.0f;
      if (u < units)
        d = lane_part<kT, kTile, (kLeanBits & kLeanLanes) != 0>(ring32, skew + u * U::kBytes, j, u, x, xt, k, p, m,
                                                                dmin);
#pragma unroll
      for (int offset = 1; offset < kLanes; offset *= 2)
#pragma unroll
        for (int t = 0; t < kTile; ++t) {
          p[t] += __shfl_xor_sync(0xffffffffu, p[t], offset);
          if constexpr (kMins) m[t] += __shfl_xor_sync(0xffffffffu, m[t], offset);
        }
      // The group's units of the round in ascending order: half 0's, then half 1's,
      // whose sums the lanes of half 0 take from lane + 16. (The lanes of half 1 add
      // them the other way round, into sums that are never read.)
      add(u0 + group, d, dmin, p, m);
      if constexpr (U::kHalves == 2) {
        d = __shfl_xor_sync(0xffffffffu, d, 16);
        if constexpr (kMins) dmin = __shfl_xor_sync(0xffffffffu, dmin, 16);
#pragma unroll
        for (int t = 0; t < kTile; ++t) {
          p[t] = __shfl_xor_sync(0xffffffffu, p[t], 16);
          if constexpr (kMins) m[t] = __shfl_xor_sync(0xffffffffu, m[t], 16);
        }
        add(u0 + kGroups + group, d, dmin, p, m);
      }
    }
    __syncwarp();  // the ring's oldest stage is read; it takes stage + kAhead
    issue(stage + kAhead);
  }
  copies_wait<0>();
  // Group 0's sum, then group 1's, ... in order.
#pragma unroll
  for (int t = 0; t < kTile; ++t) {
    float sum = __shfl_sync(0xffffffffu, acc[t], 0);
    for (int g = 1; g < kGroups; ++g) sum += __shfl_sync(0xffffffffu, acc[t], g * kLanes);
    if (lane == 0 && own_row < n && token0 + t < tokens) {
      const float* bias = jobs.bias[job];
      float* y = jobs.y[job];
      const float value = bias != nullptr ? sum + bias[row] : sum;
      const size_t at = static_cast<size_t>(token0 + t) * n + row;
      y[at] = accumulate ? y[at] + value : value;
    }
  }
}

template <DType kT, int kTile, bool kStaged, int kLeanBits = 0>
void launch(cudaStream_t stream, std::span<const QuantJob> each, int64_t k, int64_t tokens, const Acts& a,
            bool accumulate) {
  constexpr int kWarps = kWarpsOf<kStaged>;
  int64_t blocks = 0;
  const QuantJobs jobs = quant_jobs(each, kWarps, (tokens + kTile - 1) / kTile, kT, k, tokens, blocks);
  const auto kernel = quant_matmul_kernel<kT, kTile, kStaged, kLeanBits>;
  const int64_t shared = kWarps * kStrideOf<kT, kLeanBits> + (kStaged ? kStagedBytes : 0);  // the most a launch asks
  static const cudaError_t allowed =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(shared));
  TS_CHECK(allowed == cudaSuccess, "[cuda] shared memory of a quantized matmul: ", cudaGetErrorString(allowed));
  const int64_t bytes = kWarps * kStrideOf<kT, kLeanBits> + (kStaged ? staged_bytes<kT>(kTile, k) : 0);
  launch_kernel(kernel, static_cast<unsigned>(blocks), kWarps * 32, static_cast<size_t>(bytes), stream, jobs,
                static_cast<int>(k), static_cast<int>(tokens), a, accumulate);
}

// The tile of tokens that share a weight load; it never changes a sum's order.
// Tiles of up to 4 tokens stage their activations when they fit (8 would spill).
template <DType kT, int kTile>
void launch_tile(cudaStream_t stream, std::span<const QuantJob> jobs, int64_t k, int64_t tokens, const Acts& a,
                 bool accumulate) {
  if constexpr (kTile == 1) {
    const int lean = lean_asked();  // a token's matmuls on the lean kernels (unless asked not to)
    if (lean != 0 && staged_bytes<kT>(kTile, k) <= kStagedBytes)
      return lean == kLean ? launch<kT, kTile, true, kLean>(stream, jobs, k, tokens, a, accumulate)
                           : launch<kT, kTile, true, kLeanStages>(stream, jobs, k, tokens, a, accumulate);
  }
  if constexpr (kTile <= 4) {
    if (staged_bytes<kT>(kTile, k) <= kStagedBytes)
      return launch<kT, kTile, true>(stream, jobs, k, tokens, a, accumulate);
  }
  launch<kT, kTile, false>(stream, jobs, k, tokens, a, accumulate);
}

// ---- Embedding ----

__device__ __forceinline__ float f16_at(const uint8_t* p) { return f16_bits(p[0] | p[1] << 8); }

// Element i of the unit at b, as gguf-py's dequantizer (and cpu/quant_matmul.cpp) computes it.
template <DType kT>
__device__ __forceinline__ float dequantize(const uint8_t* b, int i) {
  if constexpr (kT == DType::kQ8_0) {
    return __fmul_rn(static_cast<float>(static_cast<int8_t>(b[2 + i])), f16_at(b));
  } else if constexpr (kT == DType::kQ4_0) {
    const int q = i < 16 ? b[2 + i] & 0xf : b[2 + i - 16] >> 4;
    return __fmul_rn(f16_at(b), static_cast<float>(q - 8));
  } else if constexpr (kT == DType::kQ4_K || kT == DType::kQ5_K) {
    constexpr bool kFive = kT == DType::kQ5_K;
    const int g = i / 32, l = i % 32;
    int q = (b[(kFive ? 48 : 16) + 32 * (g / 2) + l] >> (4 * (g % 2))) & 0xf;
    if constexpr (kFive) q |= ((b[16 + l] >> g) & 1) << 4;
    const uint32_t s[3] = {b[4] | b[5] << 8 | b[6] << 16 | static_cast<uint32_t>(b[7]) << 24,
                           b[8] | b[9] << 8 | b[10] << 16 | static_cast<uint32_t>(b[11]) << 24,
                           b[12] | b[13] << 8 | b[14] << 16 | static_cast<uint32_t>(b[15]) << 24};
    int sc, m;
    scale_min(s, g, sc, m);
    const float dl = __fmul_rn(f16_at(b), static_cast<float>(sc)), ml = __fmul_rn(f16_at(b + 2), static_cast<float>(m));
    return __fsub_rn(__fmul_rn(dl, static_cast<float>(q)), ml);
  } else {
    const int half = i / 128, r = i % 128;
    const int lo = (b[64 * half + r % 64] >> (4 * (r / 64))) & 0xf;
    const int hi = (b[128 + 32 * half + r % 32] >> (2 * (r / 32))) & 3;
    const float ds = __fmul_rn(f16_at(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + i / 16])));
    return __fmul_rn(ds, static_cast<float>((lo | hi << 4) - 32));
  }
}

template <DType kT>
__global__ void quant_embed_kernel(const uint8_t* __restrict__ table, int64_t hidden, const int32_t* __restrict__ ids,
                                   float* __restrict__ y) {
  using U = Unit<kT>;
  let_next_start();
  wait_for_earlier();
  const int64_t t = blockIdx.x;
  const uint8_t* row = table + ids[t] * (hidden / U::kElems) * U::kBytes;
  for (int64_t e = threadIdx.x; e < hidden; e += blockDim.x)
    y[t * hidden + e] = dequantize<kT>(row + (e / U::kElems) * U::kBytes, static_cast<int>(e % U::kElems));
}

}  // namespace

QuantJobs quant_jobs(std::span<const QuantJob> each, int64_t rows, int64_t tiles, DType dtype, int64_t k,
                     int64_t tokens, int64_t& blocks) {
  QuantJobs jobs{};
  blocks = 0;
  for (size_t j = 0; j < kMaxQuantJobs; ++j) {
    jobs.first[j] = static_cast<unsigned>(blocks);
    if (j >= each.size()) continue;
    const QuantJob& job = each[j];
    TS_CHECK(reinterpret_cast<uintptr_t>(job.w) % 16 == 0, "quantized weights must be 16-byte aligned");
    TS_CHECK(job.n > 0 && job.n <= 0x7fffffff, "a quantized matmul of ", job.n, " rows");
    jobs.w[j] = static_cast<const uint8_t*>(job.w), jobs.bias[j] = job.bias, jobs.y[j] = job.y;
    jobs.n[j] = static_cast<int>(job.n);
    blocks += (job.n + rows - 1) / rows * tiles;
    TS_CHECK(blocks <= 0x7fffffff && tokens <= 0x7fffffff && k <= 0x7fffffff && dtype_bytes(dtype, k) <= 0x7fffffff,
             "a quantized matmul of ", job.n, " rows of ", k, " and ", tokens, " tokens");
  }
  return jobs;
}

size_t quant_scratch_bytes(int64_t tokens, int64_t k) {
  const auto pad = [](size_t bytes) { return (bytes + 15) / 16 * 16; };
  return pad(static_cast<size_t>(tokens * k)) + pad(static_cast<size_t>(tokens * (k / 32)) * sizeof(float)) +
         pad(static_cast<size_t>(tokens * (k / 16)) * sizeof(int16_t));
}

namespace {

// round_kernel's launch: x [tokens, k] rounded for `dtype` as kR says.
template <DType D, Rounds kR>
void round_rows(cudaStream_t stream, const float* x, const float* up, float* out, int64_t tokens, int64_t k,
                DType dtype, void* scratch, const Storage<D>* weight, float eps) {
  TS_CHECK(dtype_is_quantized(dtype) && k % dtype_block_elements(dtype) == 0, dtype_name(dtype), " rows of ", k,
           " elements");
  if (tokens == 0) return;
  const Acts a = acts_in(scratch, tokens, k);
  const bool k_type = dtype_block_elements(dtype) == 256;
  const int64_t eighths = (k / (k_type ? 256 : 32) + 7) / 8;  // blocks of 8 warps a row
  TS_CHECK(tokens <= 0x7fffffff && eighths <= 0xffff, "rounding ", tokens, " rows of ", k);
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(eighths));
  if (k_type) launch_kernel(round_kernel<D, kR, 256>, grid, kNormThreads, 0, stream, x, up, out, k, weight, eps, a);
  else launch_kernel(round_kernel<D, kR, 32>, grid, kNormThreads, 0, stream, x, up, out, k, weight, eps, a);
}

}  // namespace

void quant_round(cudaStream_t stream, const float* x, int64_t tokens, int64_t k, DType dtype, void* scratch,
                 const QuantNorm& norm) {
  if (norm.weight == nullptr)
    return round_rows<DType::kF32, Rounds::kPlain>(stream, x, nullptr, nullptr, tokens, k, dtype, scratch, nullptr,
                                                   0.0f);
  with_dtype(norm.dtype, [&]<DType D>() {
    round_rows<D, Rounds::kNorm>(stream, x, nullptr, nullptr, tokens, k, dtype, scratch,
                                 static_cast<const Storage<D>*>(norm.weight), norm.eps);
  });
}

void quant_round_gated(cudaStream_t stream, float* gate, const float* up, int64_t tokens, int64_t k, DType dtype,
                       void* scratch) {
  round_rows<DType::kF32, Rounds::kGated>(stream, gate, up, gate, tokens, k, dtype, scratch, nullptr, 0.0f);
}

void quant_products(cudaStream_t stream, int64_t tokens, int64_t k, DType dtype, std::span<const QuantJob> jobs,
                    bool accumulate, void* scratch) {
  TS_CHECK(dtype_is_quantized(dtype) && k % dtype_block_elements(dtype) == 0, dtype_name(dtype), " rows of ", k,
           " elements");
  TS_CHECK(jobs.size() <= kMaxQuantJobs, jobs.size(), " quantized matmuls in one launch, at most ", kMaxQuantJobs);
  // Jobs without rows take no blocks.
  QuantJob some[kMaxQuantJobs];
  size_t count = 0;
  for (const QuantJob& job : jobs)
    if (job.n > 0) some[count++] = job;
  if (tokens == 0 || count == 0) return;
  const Acts a = acts_in(scratch, tokens, k);
  const std::span<const QuantJob> run(some, count);
  if (quant_mma_products(stream, tokens, k, dtype, run, accumulate, a)) return;
  with_quant_type(dtype, [&]<DType kT>() {
    if (tokens == 1) return launch_tile<kT, 1>(stream, run, k, tokens, a, accumulate);
    if (tokens == 2) return launch_tile<kT, 2>(stream, run, k, tokens, a, accumulate);
    if (tokens <= 4) return launch_tile<kT, 4>(stream, run, k, tokens, a, accumulate);
    launch_tile<kT, 8>(stream, run, k, tokens, a, accumulate);
  });
}

void quant_embed(cudaStream_t stream, const void* table, DType dtype, int64_t hidden, const int32_t* ids, int64_t count,
                 float* y) {
  TS_CHECK(hidden % dtype_block_elements(dtype) == 0, dtype_name(dtype), " rows of ", hidden, " elements");
  if (count == 0) return;
  with_quant_type(dtype, [&]<DType kT>() {
    launch_kernel(quant_embed_kernel<kT>, static_cast<unsigned>(count), 256, 0, stream,
                  static_cast<const uint8_t*>(table), hidden, ids, y);
  });
}

}  // namespace tessera::cuda
