// A few tokens' matmuls on GGUF blocks through the integer tensor cores (mma.sync,
// u8/s8 x s8 into s32), bitwise quant_matmul_kernel's outputs: Q4_K by default, Q8_0
// and Q6_K when TESSERA_CUDA_QUANT_MMA=all (slower there on the H200; benchmarks.md).
//
// quant_matmul.cu gives a warp one weight row and forms each unit's integer sums by
// dp4a, about 0.3 warp instructions a Q4_K byte (benchmarks.md, issue 19). Here a block
// takes tiles of 16 rows and up to 8 tokens (one mma's), and its kGroups warps are the
// row's groups of units (unit u to group u % kGroups, quant_matmul.cu's). The block
// copies each round (kPer units of every group, the same bytes of the 16 rows) into
// shared memory with cp.async, kStagesOf - 1 rounds ahead and across its tiles; lane
// (g, t) reads 8 (Q8_0, Q4_K) or 4 (Q6_K) bytes of each sub-block of rows g and g + 8
// there, token g's bytes of x at the same positions (x staged too when it fits), and
// one mma gives every row's and token's integer sum of the sub-block. Which k slot
// holds which position does not matter: the sums are exact integers. Each lane then
// keeps rows g, g + 8 and tokens 2t, 2t + 1 (the mma's outputs it holds): the unit's
// P and M as lane_part defines them, and its group's f32 steps in ascending unit
// order, acc = fma(d_w * d_x, P, acc) (and - dmin_w * d_x times M); the block adds
// its groups' sums in group order. So every f32 step is quant_matmul_kernel's, in its
// order: the same bits (QuantGpu's stated-order test runs =all and =0 against it).
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/quant.cuh"
#include "backend/cuda/quant_lanes.cuh"
#include "core/check.h"

namespace tessera::cuda {

namespace {

// Shared-memory reads of the staged rows (p's alignment as the type of the read).
__device__ __forceinline__ uint32_t lds32(const uint8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint2 lds64(const uint8_t* p) { return *reinterpret_cast<const uint2*>(p); }
__device__ __forceinline__ uint4 lds128(const uint8_t* p) { return *reinterpret_cast<const uint4*>(p); }
__device__ __forceinline__ uint32_t lds16(const uint8_t* p) { return *reinterpret_cast<const unsigned short*>(p); }
// The 4 bytes at p, p even (a Q8_0 or Q6_K block is 34 or 210 bytes: only 2-byte aligned).
__device__ __forceinline__ uint32_t word_at(const uint8_t* p) {
  if ((reinterpret_cast<uintptr_t>(p) & 3) == 0) return lds32(p);
  return __funnelshift_r(lds32(p - 2), lds32(p + 2), 16);
}
// Reads of x, staged in shared memory or not (generic addresses).
__device__ __forceinline__ uint32_t ld32(const int8_t* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint2 ld64(const int8_t* p) { return *reinterpret_cast<const uint2*>(p); }
__device__ __forceinline__ uint4 ld128(const int16_t* p) { return *reinterpret_cast<const uint4*>(p); }

// c = the products of A (16 rows x 32 k, 8-bit; kUnsigned: A's bytes unsigned) and B
// (32 k x 8 columns, signed bytes), fragments as mma.sync lays them out.
template <bool kUnsigned>
__device__ __forceinline__ void mma_k32(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
  c[0] = c[1] = c[2] = c[3] = 0;
  if constexpr (kUnsigned)
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// The same for 16 k (unsigned A): one Q6_K sub-block.
__device__ __forceinline__ void mma_k16(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  c[0] = c[1] = c[2] = c[3] = 0;
  asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
               : "r"(a0), "r"(a1), "r"(b0));
}

// What a lane knows of a unit: for its rows g, g + 8 (r) and tokens 2t, 2t + 1 (c),
// P and (Q4_K) M as lane_part defines them, and the rows' d_w and dmin_w.
struct UnitSums {
  int p[2][2] = {};
  int m[2][2] = {};
  float d[2] = {};
  float dmin[2] = {};
};

// Where a lane reads a unit: the unit's bytes of rows g and g + 8 in shared memory,
// token g's rounded x (B's column g) and Q8_K's sums of tokens 2t, 2t + 1 (its outputs').
struct Lane {
  const uint8_t* row[2];
  const int8_t* xq;
  const int16_t* sums[2];
  int t;  // lane % 4
};

// A unit's 16 sums of 16 of x (Q8_K's), two a word.
__device__ __forceinline__ void sum_pairs(const int16_t* sums, uint32_t (&pairs)[8]) {
  const uint4 s0 = ld128(sums), s1 = ld128(sums + 8);
  pairs[0] = s0.x, pairs[1] = s0.y, pairs[2] = s0.z, pairs[3] = s0.w;
  pairs[4] = s1.x, pairs[5] = s1.y, pairs[6] = s1.z, pairs[7] = s1.w;
}

template <DType kT>
struct Mma;

// Q8_0: a unit is one k32 product. Lane t takes words t and t + 4 of each row's 32
// bytes and of x's (the mma's own layout, so the 8 rows' words fall in 32 banks).
template <>
struct Mma<DType::kQ8_0> {
  __device__ static void sums(const Lane& l, int u, UnitSums& s) {
    uint32_t q[2][2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      q[r][0] = word_at(l.row[r] + 2 + 4 * l.t), q[r][1] = word_at(l.row[r] + 18 + 4 * l.t);
      s.d[r] = f16_bits(lds16(l.row[r]));
    }
    const int8_t* x = l.xq + 32 * u + 4 * l.t;
    int c[4];
    mma_k32<false>(c, q[0][0], q[1][0], q[0][1], q[1][1], ld32(x), ld32(x + 16));
    s.p[0][0] = c[0], s.p[0][1] = c[1], s.p[1][0] = c[2], s.p[1][1] = c[3];
  }
};

// Q4_K: sub-blocks 2i and 2i + 1 are the low and high nibbles of qs bytes 32i..32i+31;
// lane t takes bytes 8t..8t+7 of each, x at the same positions of both sub-blocks. The
// high nibbles stay in place (16 times their value, as lane_part's kMasked), and their
// products, 16 times the sum exactly, are divided by 16.
template <>
struct Mma<DType::kQ4_K> {
  __device__ static void sums(const Lane& l, int u, UnitSums& s) {
    uint4 head[2];  // d, dmin, the 12 scale bytes
    uint2 q[2][4];  // rows x pairs of sub-blocks
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      head[r] = lds128(l.row[r]);
#pragma unroll
      for (int i = 0; i < 4; ++i) q[r][i] = lds64(l.row[r] + 16 + 32 * i + 8 * l.t);
    }
    uint2 x[8];  // the sub-blocks of token g
#pragma unroll
    for (int sb = 0; sb < 8; ++sb) x[sb] = ld64(l.xq + 256 * u + 32 * sb + 8 * l.t);
    uint32_t sc[2][2], mn[2][2];  // rows x sub-blocks 0-3, 4-7: a byte each
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      scales_mins(head[r].y, head[r].z, head[r].w, 0, sc[r][0], mn[r][0]);
      scales_mins(head[r].y, head[r].z, head[r].w, 2, sc[r][1], mn[r][1]);
      s.d[r] = f16_bits(head[r].x), s.dmin[r] = f16_bits(head[r].x >> 16);
    }
    int lo[2][2] = {}, hi[2][2] = {};
#pragma unroll
    for (int sb = 0; sb < 8; ++sb) {
      const int i = sb / 2;
      const uint32_t mask = sb % 2 == 0 ? 0x0f0f0f0fu : 0xf0f0f0f0u;
      int c[4];
      mma_k32<true>(c, q[0][i].x & mask, q[1][i].x & mask, q[0][i].y & mask, q[1][i].y & mask, x[sb].x, x[sb].y);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int scale = static_cast<int>((sc[r][sb / 4] >> (8 * (sb % 4))) & 0xff);
        int(&into)[2] = sb % 2 == 0 ? lo[r] : hi[r];
        into[0] += scale * c[2 * r], into[1] += scale * c[2 * r + 1];
      }
    }
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      // The mins times x's sums of each sub-block (its two sums of 16: one dp2a).
      uint32_t pairs[8];
      sum_pairs(l.sums[c] + 16 * u, pairs);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        s.p[r][c] = lo[r][c] + (hi[r][c] >> 4);
        int m = 0;
#pragma unroll
        for (int sb = 0; sb < 8; ++sb)
          m = dp2a_lo(static_cast<int>(pairs[sb]), static_cast<int>(byte_perm(mn[r][sb / 4], 0, (sb % 4) * 0x11)), m);
        s.m[r][c] = m;
      }
    }
  }
};

// Q6_K: sub-block j of half h (16 elements) takes the low (j < 4) or high nibbles of ql
// bytes 64h + 16 (j % 4).., and bits 2 (j / 2) of qh bytes 128 + 32h + 16 (j % 2)..;
// lane t takes elements 4t..4t+3 of each. P = sum of scale x (products - 32 x x's sum
// of 16), as lane_part's.
template <>
struct Mma<DType::kQ6_K> {
  __device__ static void sums(const Lane& l, int u, UnitSums& s) {
    uint32_t ql[2][8], qh[2][4], sc[2][4];  // rows x (half, j % 4), (half, j % 2), the 16 int8 scales
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const uint8_t* b = l.row[r];
#pragma unroll
      for (int i = 0; i < 8; ++i) ql[r][i] = word_at(b + 64 * (i / 4) + 16 * (i % 4) + 4 * l.t);
#pragma unroll
      for (int i = 0; i < 4; ++i) qh[r][i] = word_at(b + 128 + 32 * (i / 2) + 16 * (i % 2) + 4 * l.t);
#pragma unroll
      for (int i = 0; i < 4; ++i) sc[r][i] = word_at(b + 192 + 4 * i);
      s.d[r] = f16_bits(lds16(b + 208));
    }
    int p[2][2] = {};
#pragma unroll
    for (int sb = 0; sb < 16; ++sb) {
      const int h = sb / 8, j = sb % 8;
      uint32_t a[2];
#pragma unroll
      for (int r = 0; r < 2; ++r)
        a[r] = ((ql[r][4 * h + j % 4] >> (4 * (j / 4))) & 0x0f0f0f0fu) |
               (((qh[r][2 * h + j % 2] >> (2 * (j / 2))) & 0x03030303u) << 4);
      int c[4];
      mma_k16(c, a[0], a[1], ld32(l.xq + 256 * u + 16 * sb + 4 * l.t));
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int scale = signed_byte(sc[r][sb / 4] >> (16 * (sb % 4 / 2)), sb % 2);  // byte sb % 4
        p[r][0] += scale * c[2 * r], p[r][1] += scale * c[2 * r + 1];
      }
    }
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      uint32_t pairs[8];
      sum_pairs(l.sums[c] + 16 * u, pairs);
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        int mins = 0;  // the scales times x's sums of 16, two a dp2a
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          mins = dp2a_lo(static_cast<int>(pairs[2 * i]), static_cast<int>(sc[r][i]), mins);
          mins = dp2a_lo(static_cast<int>(pairs[2 * i + 1]), static_cast<int>(sc[r][i] >> 16), mins);
        }
        s.p[r][c] = p[r][c] - 32 * mins;
      }
    }
  }
};

constexpr int kRows = 16, kTokens = 8;  // a block's rows and tokens: one mma's
constexpr int kStagesOf = 3;            // rounds of staged rows, 2 in flight

// A round: kPer units of every group (warp w: units w, w + kGroups, ...) of the block's
// 16 rows, kSpan consecutive bytes of each row (a multiple of 16, so a row's rounds keep
// its first byte's place in a 16-byte piece, `lead`), copied by the whole block into
// shared memory in 16-byte pieces from the boundary at or before the row's round, each
// row kStride bytes apart (kStride / 4 words = 4 or 8 mod 32: conflict-free reads).
template <DType kT>
struct Round {
  static constexpr int kPer = 2;
  static constexpr int kUnits = Unit<kT>::kGroups * kPer;
  static constexpr int kSpan = kUnits * Unit<kT>::kBytes;
  static_assert(kSpan % 16 == 0);
  static constexpr int kPieces = kSpan / 16 + 1;  // at most, from the boundary
  static constexpr int kPad = kT == DType::kQ4_K ? 32 : 16;
  static constexpr int kStride = (16 * kPieces + 127 - kPad) / 128 * 128 + kPad;
  static constexpr int kBytes = kRows * kStride;
};

// Bytes of the rounded activations of `tokens` tokens (q, the scales, Q8_K's sums),
// as a block stages them (each part from a 16-byte boundary).
template <DType kT>
__host__ __device__ constexpr int64_t x_bytes(int64_t tokens, int64_t k) {
  const auto pad = [](int64_t bytes) { return (bytes + 15) / 16 * 16; };
  return pad(tokens * k) + pad(tokens * (k / Unit<kT>::kElems) * 4) +
         (Unit<kT>::kSums ? pad(tokens * (k / 16) * 2) : 0);
}
// A block stages its tokens' activations in shared memory when they take at most this.
constexpr int64_t kStagedX = 32 << 10;

template <DType kT, bool kStaged>
__global__ void __launch_bounds__(Unit<kT>::kGroups * 32)
    quant_mma_kernel(const __grid_constant__ QuantJobs jobs, int tiles, int per, int k, int tokens, Acts a,
                     bool accumulate) {
  using U = Unit<kT>;
  using R = Round<kT>;
  constexpr int kGroups = U::kGroups, kThreads = kGroups * 32;
  constexpr bool kMins = kT == DType::kQ4_K;
  extern __shared__ uint4 shared[];                   // kStagesOf rounds, then (kStaged) the tokens' activations
  __shared__ float part[2][kGroups][kRows][kTokens];  // a tile's groups' sums (two tiles in turn)
  let_next_start();
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int token0 = static_cast<int>(blockIdx.y) * kTokens;
  const int units = k / U::kElems, rounds = (units + R::kUnits - 1) / R::kUnits;
  const size_t row_bytes = static_cast<size_t>(units) * U::kBytes;
  const int first = static_cast<int>(blockIdx.x) * per, last = min(first + per, tiles);
  // Tile i's job, and the byte of that job's weights where its row r (< 16) starts (rows past n: the last).
  struct Rows {
    const uint8_t* w;
    int job, row0;
  };
  const auto tile_rows = [&](int i) {
    static_assert(kMaxQuantJobs == 3);
    const int job = (i >= static_cast<int>(jobs.first[1])) + (i >= static_cast<int>(jobs.first[2]));
    return Rows{jobs.w[job], job, (i - static_cast<int>(jobs.first[job])) * kRows};
  };
  const auto row_at = [&](const Rows& rows, int r) {
    return static_cast<size_t>(min(rows.row0 + r, jobs.n[rows.job] - 1)) * row_bytes;
  };
  uint8_t* stages = reinterpret_cast<uint8_t*>(shared);
  // The copies: kEach threads a row, thread e of them pieces e, e + kEach, ... of the row's round.
  constexpr int kEach = kThreads / kRows, kCopies = (R::kPieces + kEach - 1) / kEach;
  const int copy_row = threadIdx.x / kEach, copy_e = threadIdx.x % kEach;
  struct Issue {
    int tile, round;
    const uint8_t* from;  // the round's first piece of this thread
    int full, tail;       // its pieces in a whole round and in the row's last
  } is{first, 0, nullptr, 0, 0};
  const auto pieces = [&](int bytes) { return max(0, (bytes - 16 * copy_e + 16 * kEach - 1) / (16 * kEach)); };
  const auto start_tile = [&](Issue& i) {
    const Rows rows = tile_rows(i.tile);
    const size_t at = row_at(rows, copy_row);
    const int lead = static_cast<int>(at % 16);
    i.from = rows.w + at / 16 * 16 + 16 * copy_e;
    i.full = pieces(lead + R::kSpan);
    i.tail = pieces(lead + static_cast<int>(row_bytes - static_cast<size_t>(rounds - 1) * R::kSpan));
  };
  if (first < last) start_tile(is);
  // The next round's copies (nothing past the block's last tile), into stage `stage`.
  const auto issue = [&](int stage) {
    if (is.tile < last) {
      uint8_t* to = stages + stage * R::kBytes + copy_row * R::kStride + 16 * copy_e;
      const int count = is.round == rounds - 1 ? is.tail : is.full;
#pragma unroll
      for (int c = 0; c < kCopies; ++c)
        if (c < count) copy16(to + 16 * kEach * c, is.from + 16 * kEach * c);
      is.from += R::kSpan;
      if (++is.round == rounds) {
        is.round = 0;
        if (++is.tile < last) start_tile(is);
      }
    }
    copies_sent();
  };
  for (int stage = 0; stage < kStagesOf - 1; ++stage) issue(stage);
  wait_for_earlier();  // the weights are on their way; the activations are the last kernel's

  // Where the activations are read: token i of the call at x's token i - skip.
  Acts x = a;
  int skip = 0;
  if constexpr (kStaged) {  // the block copies its tokens' to shared memory once (words of 16 and 4 bytes)
    const int count = min(kTokens, tokens - token0), scales = count * units, sums = U::kSums ? count * k / 32 : 0;
    auto* q = reinterpret_cast<int8_t*>(stages + kStagesOf * R::kBytes);
    auto* d = reinterpret_cast<float*>(q + (count * k + 15) / 16 * 16);
    auto* sum = reinterpret_cast<int16_t*>(reinterpret_cast<uint8_t*>(d) + (scales * 4 + 15) / 16 * 16);
    const auto* q_from = reinterpret_cast<const int4*>(a.q + static_cast<size_t>(token0) * k);
    for (int i = threadIdx.x; i < count * k / 16; i += kThreads) reinterpret_cast<int4*>(q)[i] = q_from[i];
    for (int i = threadIdx.x; i < scales; i += kThreads) d[i] = a.d[static_cast<size_t>(token0) * units + i];
    const auto* sums_from = reinterpret_cast<const int32_t*>(a.s + static_cast<size_t>(token0) * (k / 16));
    for (int i = threadIdx.x; i < sums; i += kThreads) reinterpret_cast<int32_t*>(sum)[i] = sums_from[i];
    x = Acts{q, d, sum}, skip = token0;
    __syncthreads();
  }
  Lane l;
  l.t = t;
  const int token_g = min(token0 + g, tokens - 1) - skip;
  const int token_c[2] = {min(token0 + 2 * t, tokens - 1) - skip, min(token0 + 2 * t + 1, tokens - 1) - skip};
  l.xq = x.q + static_cast<size_t>(token_g) * k;
#pragma unroll
  for (int c = 0; c < 2; ++c) l.sums[c] = x.s + static_cast<size_t>(token_c[c]) * (k / 16);
  // Tile i's outputs from its groups' sums in part[i % 2]: group 0's sum, then group 1's, ... in
  // order; one thread an output.
  const auto finish = [&](int i) {
    if (threadIdx.x >= kRows * kTokens) return;
    const Rows rows = tile_rows(i);
    const int rr = threadIdx.x / kTokens, tt = threadIdx.x % kTokens;
    const int row = rows.row0 + rr, token = token0 + tt, n = jobs.n[rows.job];
    if (row >= n || token >= tokens) return;
    float sum = part[i % 2][0][rr][tt];
    for (int j = 1; j < kGroups; ++j) sum += part[i % 2][j][rr][tt];
    const float* bias = jobs.bias[rows.job];
    float* y = jobs.y[rows.job];
    const float value = bias != nullptr ? sum + bias[row] : sum;
    const size_t out = static_cast<size_t>(token) * n + row;
    y[out] = accumulate ? y[out] + value : value;
  };
  // Each tile's group's units in ascending order (round r: units r kUnits + warp + j kGroups).
  float acc[2][2] = {};
  int item = 0;
  for (int tile = first; tile < last; ++tile) {
    const Rows rows = tile_rows(tile);
    int lead[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) lead[r] = (g + 8 * r) * R::kStride + static_cast<int>(row_at(rows, g + 8 * r) % 16);
    for (int round = 0; round < rounds; ++round, ++item) {
      copies_wait<kStagesOf - 2>();
      __syncthreads();  // the round is in; every warp is done with the stage the next copies take
      issue((item + kStagesOf - 1) % kStagesOf);
      if (round == 0 && tile > first) finish(tile - 1);  // (its sums are in: the barrier above)
      const uint8_t* stage = stages + (item % kStagesOf) * R::kBytes;
#pragma unroll
      for (int j = 0; j < R::kPer; ++j) {
        const int v = warp + j * kGroups, u = round * R::kUnits + v;
        if (u >= units) break;
#pragma unroll
        for (int r = 0; r < 2; ++r) l.row[r] = stage + lead[r] + v * U::kBytes;
        UnitSums s;
        Mma<kT>::sums(l, u, s);
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float d_x = x.d[static_cast<size_t>(token_c[c]) * units + u];
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            acc[r][c] = fmaf(__fmul_rn(s.d[r], d_x), static_cast<float>(s.p[r][c]), acc[r][c]);
            if constexpr (kMins) acc[r][c] = fmaf(-__fmul_rn(s.dmin[r], d_x), static_cast<float>(s.m[r][c]), acc[r][c]);
          }
        }
      }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int c = 0; c < 2; ++c) part[tile % 2][warp][g + 8 * r][2 * t + c] = acc[r][c], acc[r][c] = 0.0f;
  }
  copies_wait<0>();
  __syncthreads();
  if (first < last) finish(last - 1);
}

// The launch: blocks of as many tiles as it takes for every block to be resident at once.
template <DType kT, bool kStaged>
void go(cudaStream_t stream, const QuantJobs& jobs, int64_t tiles, int64_t k, int64_t tokens, const Acts& a,
        bool accumulate, int64_t staged) {
  const auto kernel = quant_mma_kernel<kT, kStaged>;
  const int shared = static_cast<int>(kStagesOf * Round<kT>::kBytes + staged);
  // The blocks an SM holds at once with this much shared memory (asked once a size; a
  // decode step's launches take a few sizes).
  static const bool allowed =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(kStagesOf * Round<kT>::kBytes + (kStaged ? kStagedX : 0))) == cudaSuccess;
  TS_CHECK(allowed, "[cuda] shared memory of a quantized matmul");
  static int sizes[4] = {-1, -1, -1, -1}, residents[4] = {};
  int slot = 0;
  while (slot < 3 && sizes[slot] != shared && sizes[slot] != -1) ++slot;
  if (sizes[slot] != shared) {
    int blocks = 0;
    TS_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, kernel, Unit<kT>::kGroups * 32, shared) == cudaSuccess &&
            blocks > 0,
        "[cuda] the blocks of a quantized matmul an SM holds");
    sizes[slot] = shared, residents[slot] = blocks;
  }
  const int resident = residents[slot];
  const int64_t slots = static_cast<int64_t>(resident) * multiprocessors();
  const int64_t per = (tiles + slots - 1) / slots, blocks = (tiles + per - 1) / per;
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>((tokens + kTokens - 1) / kTokens));
  launch_kernel(kernel, grid, Unit<kT>::kGroups * 32, static_cast<size_t>(shared), stream, jobs,
                static_cast<int>(tiles), static_cast<int>(per), static_cast<int>(k), static_cast<int>(tokens), a,
                accumulate);
}

template <DType kT>
void launch(cudaStream_t stream, std::span<const QuantJob> each, int64_t k, int64_t tokens, const Acts& a,
            bool accumulate) {
  int64_t tiles = 0;  // of 16 rows (the kernel's blocks each take several)
  const QuantJobs jobs = quant_jobs(each, kRows, 1, kT, k, tokens, tiles);
  const int64_t staged = x_bytes<kT>(std::min<int64_t>(tokens, kTokens), k);
  if (staged <= kStagedX) return go<kT, true>(stream, jobs, tiles, k, tokens, a, accumulate, staged);
  go<kT, false>(stream, jobs, tiles, k, tokens, a, accumulate, 0);
}

}  // namespace

bool quant_mma_products(cudaStream_t stream, int64_t tokens, int64_t k, DType dtype, std::span<const QuantJob> jobs,
                        bool accumulate, const Acts& a) {
  if (tokens > kTokens) return false;
  const char* value = std::getenv("TESSERA_CUDA_QUANT_MMA");
  const std::string_view asked = value != nullptr ? value : "";
  if (asked == "0") return false;
  switch (dtype) {
    case DType::kQ4_K: return launch<DType::kQ4_K>(stream, jobs, k, tokens, a, accumulate), true;
    case DType::kQ8_0:
      return asked == "all" ? (launch<DType::kQ8_0>(stream, jobs, k, tokens, a, accumulate), true) : false;
    case DType::kQ6_K:
      return asked == "all" ? (launch<DType::kQ6_K>(stream, jobs, k, tokens, a, accumulate), true) : false;
    default: return false;
  }
}

}  // namespace tessera::cuda
