// Attention on tensor cores for bf16 and f16 KV pages (head_dim 64 or 128, no
// sliding window), for every token count: decode and prefill run this same
// kernel, so a token's bits never depend on its batch.
//
// A block takes 64-position partitions of one KV head (one, or a few in turn, or
// for a lone decode token a share of them in a cluster of blocks: see the kernel)
// for up to 64 columns, a column being one query head of one token; its columns are one sequence's
// (ColumnBlock), so they share the partition's keys and values, copied once to
// shared memory (the keys first, so that the scores are computed while the
// values are still coming). Warp w takes columns [16w, 16w + 16) and, as
// FlashAttention-2 arranges it, computes S = Q K^T (q rounded to the pages' 16 bits, head_dim
// summed 16 at a time in order), masks positions past each column's token and
// scales (by log2(e) too), takes each column's max and sum of 2^(s - max) (one
// MUFU.EX2 each) over the partition in a fixed tree, and O = P V with P rounded
// to 16 bits (positions 16 at a time, in order).
// Each column's numbers depend on its own query and the partition alone: the
// other columns of a block only share its instructions. The output per (token,
// head, partition) is what attend.cu's combine kernel merges: the unnormalised
// sum [head_dim], then the max (times ln 2: in base e, as the combine kernel takes
// it) and the sum of the weights.
#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kernels.cuh"
#include "backend/cuda/merge.cuh"
#include "backend/cuda/mma.cuh"
#include "core/check.h"

namespace tessera::cuda {

namespace {

namespace cg = cooperative_groups;

constexpr int kPositions = 64;  // a partition, as attend.cu's kPartition
constexpr int kWarps = 4;
constexpr int kColumns = 16 * kWarps;

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// 2^x in one instruction (MUFU.EX2: about 2 ulp; subnormal results flush to 0).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

template <DType D>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (D == DType::kBF16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

template <DType D>
__device__ __forceinline__ void mma16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (D == DType::kBF16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Four 8 x 8 matrices of 16-bit elements from shared memory (ldmatrix): lane l
// names row l % 8 of matrix l / 8 (16 bytes); r[m] receives lane (g, t)'s
// fragment of matrix m, elements (g, 2t) and (g, 2t + 1), or with kTrans those of
// the matrix transposed, (2t, g) and (2t + 1, g): the B operands of mma16 for
// the keys as they are and for the values transposed, four registers a load.
template <bool kTrans>
__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], const uint16_t* row) {
  const auto at = static_cast<unsigned>(__cvta_generic_to_shared(row));
  if constexpr (kTrans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at)
                 : "memory");
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(at)
                 : "memory");
  }
}

// The keys and values of one partition in shared memory (rows kHeadDim + 8
// elements apart: 16 bytes apart in banks).
template <int kHeadDim>
struct Stage {
  static constexpr int kStride = kHeadDim + 8;
  uint16_t keys[kPositions * kStride];
  uint16_t values[kPositions * kStride];
};

// Lane (g, t) of a warp holds rows g and g + 8 of its 16 columns (accumulator
// elements 0, 1 and 2, 3) at positions or dimensions 2t and 2t + 1 of each 8.
//
// A block takes `span` consecutive partitions of its column block and KV head,
// one after another, with the next partition's keys and values on their way
// while it computes one (two stages of shared memory): each partition's numbers
// are what a block of one partition computes, written to its own place in
// scratch, so the span changes no bit.
//
// kWhole: the block takes every partition its tokens see and merges them itself, in
// order, as the combine kernel would (merge.cuh), writing out (and `rounded`)
// instead of scratch: the same bits without the partial sums' round trip through
// memory and the combine launch. Its grid is (KV head, column block), column
// blocks last first: a prompt's last tokens see the most partitions, and start
// first, so that the short blocks fill in behind them.
//
// kSpread (whole, a decode step's block of at most 16 columns, which one warp
// holds): the four warps take the same columns and four partitions at a time
// (four stages: warp w partition 4n + w), each writing its partition's output,
// max and sum to shared memory, and warp 0 merges the four in partition order
// into its running merge, as the block without kSpread merges them one by one:
// the same bits, in a quarter of the chain of partitions. Spread blocks may run in
// clusters (launch_kernel_in_clusters): the C blocks of a cluster share a KV head
// and take its partitions P at a time in turn (P = ceil(partitions / C), at most
// one a warp: block r partitions Pr..Pr + P - 1 of each round of PC), and block 0's
// warp 0 merges every block's, block by block, from their shared memory: the same
// order again, in fewer rounds.
// Split, three blocks fit an SM's registers and shared memory (168 registers at most); whole, two
// (its shared memory); spread, one (hd 128) or two.
template <DType D, int kHeadDim, bool kWhole, bool kSpread = false>
__global__ void __launch_bounds__(kWarps * 32, kWhole ? 2 : 3)
    mma_attention_kernel(const float* __restrict__ q, int64_t n_heads, KvPages p, int64_t layer, TokenMap map,
                         float scale, int64_t partitions, int64_t span, const ColumnBlock* __restrict__ column_blocks,
                         float* __restrict__ scratch, float* __restrict__ out, __nv_bfloat16* __restrict__ rounded) {
  let_next_start();
  constexpr int kStride = Stage<kHeadDim>::kStride;
  extern __shared__ __align__(16) unsigned char shared[];
  auto* stages = reinterpret_cast<Stage<kHeadDim>*>(shared);
  constexpr int kStages = kSpread ? kWarps : 2;
  auto* key_rows = reinterpret_cast<int64_t*>(stages + kStages);  // [span * kPositions]
  const ColumnBlock cb = column_blocks[kWhole ? gridDim.y - 1 - blockIdx.y : blockIdx.y];
  // (kSpread) The cluster's blocks (1 unless launched in clusters) and this one's place in it.
  const unsigned blocks = kSpread ? cg::this_cluster().num_blocks() : 1;
  const unsigned rank = kSpread ? cg::this_cluster().block_rank() : 0;
  const int64_t kv = kWhole ? blockIdx.x / blocks : blockIdx.z, group = n_heads / p.n_kv_heads;
  const int64_t part0 = kWhole ? 0 : blockIdx.x * span, last = map.pos[cb.first + cb.tokens - 1];
  // The partitions of the span that hold a position some token of the block sees.
  const int64_t parts = min(span, min(partitions - part0, last / kPositions + 1 - part0));
  if (parts <= 0) {  // every token of the block sees fewer partitions
    wait_for_earlier();
    return;
  }
  // Where each position's key row is in the pages (its value row is value_step
  // further), found once a row, not once a 16-byte piece.
  const int64_t first_at = part0 * kPositions, count = min(parts * kPositions, last - first_at + 1);
  {
    const int32_t* blocks = map.tables + map.table[cb.first];
    const int size = static_cast<int>(p.block_size);
    for (int i = static_cast<int>(threadIdx.x); i < count; i += kWarps * 32) {
      const int at = static_cast<int>(first_at) + i;
      key_rows[i] = kv_offset(p, blocks[at / size], layer, 0, kv) + at % size * kHeadDim;
    }
  }
  __syncthreads();
  const int64_t value_step = p.n_kv_heads * p.block_size * kHeadDim;
  const auto* base = static_cast<const uint16_t*>(p.base);
  constexpr int kUnits = kHeadDim * 2 / 16;  // 16-byte pieces of a row
  const auto rows_of = [&](int64_t i) {
    return min(static_cast<int64_t>(kPositions), last - (part0 + i) * kPositions + 1);
  };
  // Partition i's keys, then its values, into stage i % kStages: two groups of copies. A thread copies
  // the same 16-byte piece of rows j0, j0 + kRowsARound, ...
  constexpr int kRowsARound = kWarps * 32 / kUnits;
  const int piece = static_cast<int>(threadIdx.x) % kUnits, j0 = static_cast<int>(threadIdx.x) / kUnits;
  const auto copy_keys_and_values = [&](int64_t i) {
    Stage<kHeadDim>& stage = stages[i % kStages];
    const int64_t rows = rows_of(i);
    const int64_t* at = key_rows + i * kPositions;
#pragma unroll
    for (int kind = 0; kind < 2; ++kind) {
      const uint16_t* from = base + (kind == 0 ? 0 : value_step) + piece * 8;
      uint16_t* to = (kind == 0 ? stage.keys : stage.values) + piece * 8;
#pragma unroll 2
      for (int n = 0; n < kPositions / kRowsARound; ++n) {
        const int j = j0 + n * kRowsARound;
        if (j < rows) {
          copy16(to + j * kStride, from + at[j]);
        } else {  // positions past the last: zero (masked, never NaN)
          *reinterpret_cast<uint4*>(to + j * kStride) = make_uint4(0, 0, 0, 0);
        }
      }
      copies_sent();
    }
  };
  // The token map and column blocks were staged before the kernels of this
  // layer; keys and values of positions below `fresh` were stored by earlier
  // steps. A first partition of those alone is copied while the kernels before
  // this one (rope and the store of this step's keys) still run.
  // (kSpread) The partitions a block takes a round (at most one a warp; a cluster's blocks share a token, so
  // every block finds the same), the block's first, and its first ones copied.
  const int64_t per = kSpread ? min(static_cast<int64_t>(kWarps), (parts + blocks - 1) / blocks) : 1;
  const int64_t own = per * rank;
  const bool older = own < parts && (part0 + own) * kPositions + rows_of(own) <= cb.fresh;
  if (older) copy_keys_and_values(own);
  wait_for_earlier();
  if (!older && own < parts) copy_keys_and_values(own);
  if constexpr (kSpread)
    for (int64_t i = own + 1; i < min(parts, own + per); ++i) copy_keys_and_values(i);

  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  const int g = lane / 4, t = lane % 4;
  // A warp past the columns only helps to copy (spread: every warp takes columns 0-15).
  const int64_t columns = cb.tokens * group, c0 = kSpread ? 0 : warp * 16;
  const bool idle = c0 >= columns;
  int64_t token[2], head[2], pos[2];
  bool mine[2];
  for (int r = 0; r < 2; ++r) {
    const int64_t c = c0 + g + 8 * r;
    mine[r] = c < columns;
    token[r] = cb.first + (mine[r] ? c / group : 0);
    head[r] = kv * group + (mine[r] ? c % group : 0);
    pos[r] = map.pos[token[r]];
  }

  // Q as the A operand: rows (columns) g and g + 8, dimensions 2t.. and 2t + 8.. of each 16.
  uint32_t qa[kHeadDim / 16][4];
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = i % 2, half = i / 2;
      float2 v = make_float2(0.0f, 0.0f);
      if (mine[r])
        v = *reinterpret_cast<const float2*>(q + (token[r] * n_heads + head[r]) * kHeadDim + kk * 16 + 2 * t +
                                             8 * half);
      qa[kk][i] = pack2<D>(v.x, v.y);
    }

  const float scale2 = __fmul_rn(scale, kLog2e);
  RunningMerge run[2];
  float merged[kWhole ? kHeadDim / 8 : 1][4] = {};
  // One partition's S = Q K^T, softmax weights and O = P V for this warp's columns
  // from `stage`: the keys first, then `values_ready()` (every thread calls it)
  // before the values are read.
  const auto partition_sums = [&](const Stage<kHeadDim>& stage, int64_t start, const bool(&used)[2],
                                  auto&& values_ready, float(&o)[kHeadDim / 8][4], float(&peak)[2], float(&sum)[2]) {
    float s[kPositions / 8][4] = {};
    if (!idle) {
      // S = Q K^T, eight tiles of 8 positions, two 16-dimension steps a load.
#pragma unroll
      for (int j = 0; j < kPositions / 8; ++j) {
        const uint16_t* rows = stage.keys + (8 * j + lane % 8) * kStride + 8 * (lane / 8);
#pragma unroll
        for (int kk = 0; kk < kHeadDim / 16; kk += 2) {
          uint32_t b[4];
          load_matrices<false>(b, rows + kk * 16);
          mma16<D>(s[j], qa[kk], b[0], b[1]);
          mma16<D>(s[j], qa[kk + 1], b[2], b[3]);
        }
      }
      // Scores in base 2 (scaled by log2(e) too); row r sees the partition's positions 2t + seen[r]
      // and before (counted from its start; below 0: none of this lane's).
      int seen[2];
      for (int r = 0; r < 2; ++r)
        seen[r] = used[r] ? static_cast<int>(min(pos[r] - start, static_cast<int64_t>(kPositions))) - 2 * t : -1;
#pragma unroll
      for (int j = 0; j < kPositions / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e / 2;
          s[j][e] = 8 * j + e % 2 <= seen[r] ? s[j][e] * scale2 : -INFINITY;
          peak[r] = fmaxf(peak[r], s[j][e]);
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        peak[r] = fmaxf(peak[r], __shfl_xor_sync(0xffffffffu, peak[r], 1));
        peak[r] = fmaxf(peak[r], __shfl_xor_sync(0xffffffffu, peak[r], 2));
      }
      // Masked scores give 2^-inf = 0, without a branch; a row that sees none subtracts 0, not -inf (NaN).
      const float floor[2] = {peak[0] == -INFINITY ? 0.0f : peak[0], peak[1] == -INFINITY ? 0.0f : peak[1]};
#pragma unroll
      for (int j = 0; j < kPositions / 8; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int r = e / 2;
          s[j][e] = exp2_approx(s[j][e] - floor[r]);
          sum[r] += s[j][e];
        }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
      }
    }
    values_ready();
    if (!idle) {
      // O = P V: P's accumulators are already the A operand's layout, 16 positions at a time.
#pragma unroll
      for (int ks = 0; ks < kPositions / 16; ++ks) {
        const uint32_t pa[4] = {pack2<D>(s[2 * ks][0], s[2 * ks][1]), pack2<D>(s[2 * ks][2], s[2 * ks][3]),
                                pack2<D>(s[2 * ks + 1][0], s[2 * ks + 1][1]),
                                pack2<D>(s[2 * ks + 1][2], s[2 * ks + 1][3])};
        // Matrices of positions 16ks + 0..7 and + 8..15, of dimensions 8dt.. and 8(dt + 1)..
        const uint16_t* rows = stage.values + (16 * ks + 8 * (lane / 8 % 2) + lane % 8) * kStride + 8 * (lane / 16);
#pragma unroll
        for (int dt = 0; dt < kHeadDim / 8; dt += 2) {
          uint32_t b[4];
          load_matrices<true>(b, rows + dt * 8);
          mma16<D>(o[dt], pa, b[0], b[1]);
          mma16<D>(o[dt + 1], pa, b[2], b[3]);
        }
      }
    }
  };
  // What partition `part` adds: to the running merge (whole) or to scratch. o(dt, e) is its output's
  // accumulator e of dimensions dt (read where it lies: registers, or a block's slots).
  const auto take = [&](int64_t part, const bool(&used)[2], auto&& o, const float(&peak)[2], const float(&sum)[2]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!used[r]) continue;
      const float top = __fmul_rn(peak[r], kLn2);  // the partition's max score, in base e again
      if constexpr (kWhole) {
        const float2 w = merge_partition(run[r], top, sum[r]);
#pragma unroll
        for (int dt = 0; dt < kHeadDim / 8; ++dt) {
          merged[dt][2 * r] = merge_output(merged[dt][2 * r], o(dt, 2 * r), w);
          merged[dt][2 * r + 1] = merge_output(merged[dt][2 * r + 1], o(dt, 2 * r + 1), w);
        }
        continue;
      }
      float* to = scratch + ((token[r] * n_heads + head[r]) * partitions + part) * (kHeadDim + 2);
#pragma unroll
      for (int dt = 0; dt < kHeadDim / 8; ++dt) {
        to[dt * 8 + 2 * t] = o(dt, 2 * r);
        to[dt * 8 + 2 * t + 1] = o(dt, 2 * r + 1);
      }
      if (t == 0) {
        to[kHeadDim] = top;
        to[kHeadDim + 1] = sum[r];
      }
    }
  };
  const auto used_by = [&](int64_t start, bool(&used)[2]) {
    for (int r = 0; r < 2; ++r) used[r] = mine[r] && start <= pos[r];
  };
  if constexpr (kSpread) {
    // Slots of each warp's partition: o [kWarps][kHeadDim / 8][4][32], then peak and sum [kWarps][4][32].
    auto* slot_o = reinterpret_cast<float*>(key_rows + span * kPositions);
    float* slot_ps = slot_o + kWarps * (kHeadDim / 8) * 4 * 32;
    // Every block of the cluster waits for every other (one block: a block barrier).
    const auto all_wait = [&] {
      if (blocks > 1) {
        cg::this_cluster().sync();
      } else {
        __syncthreads();
      }
    };
    for (int64_t round = 0; round < parts; round += per * blocks) {
      const int64_t first = round + own;  // this block's
      if (round > 0)
        for (int64_t i = first; i < min(parts, first + per); ++i) copy_keys_and_values(i);
      copies_wait<0>();
      __syncthreads();
      if (warp < per && first + warp < parts) {
        const int64_t start = (part0 + first + warp) * kPositions;
        bool used[2];
        used_by(start, used);
        float o[kHeadDim / 8][4] = {}, peak[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
        partition_sums(
            stages[(first + warp) % kStages], start, used, [] {}, o, peak, sum);
#pragma unroll
        for (int dt = 0; dt < kHeadDim / 8; ++dt)
#pragma unroll
          for (int e = 0; e < 4; ++e) slot_o[((warp * (kHeadDim / 8) + dt) * 4 + e) * 32 + lane] = o[dt][e];
        for (int r = 0; r < 2; ++r) {
          slot_ps[(warp * 4 + r) * 32 + lane] = peak[r];
          slot_ps[(warp * 4 + 2 + r) * 32 + lane] = sum[r];
        }
      }
      all_wait();
      if (rank == 0 && warp == 0)
        for (unsigned b = 0; b < blocks; ++b) {
          // Block b's slots (its shared memory, for b > 0).
          const float* from_o = b == 0 ? slot_o : cg::this_cluster().map_shared_rank(slot_o, b);
          const float* from_ps = b == 0 ? slot_ps : cg::this_cluster().map_shared_rank(slot_ps, b);
          for (int w = 0; w < per && round + per * b + w < parts; ++w) {
            const int64_t part = part0 + round + per * b + w;
            bool used[2];
            used_by(part * kPositions, used);
            float peak[2], sum[2];
            for (int r = 0; r < 2; ++r)
              peak[r] = from_ps[(w * 4 + r) * 32 + lane], sum[r] = from_ps[(w * 4 + 2 + r) * 32 + lane];
            take(
                part, used, [&](int dt, int e) { return from_o[((w * (kHeadDim / 8) + dt) * 4 + e) * 32 + lane]; },
                peak, sum);
          }
        }
      all_wait();  // the stages and slots are free for the next round, and block 0 has read every block's
    }
  } else {
    for (int64_t i = 0; i < parts; ++i) {
      const int64_t part = part0 + i, start = part * kPositions;
      const bool more = i + 1 < parts;
      if (more) copy_keys_and_values(i + 1);  // its stage was freed by the barrier at the end of the last round
      bool used[2];
      used_by(start, used);
      // The scores need the keys alone: they are computed while the values are still on their way.
      if (more) {
        copies_wait<3>();
      } else {
        copies_wait<1>();
      }
      __syncthreads();
      float o[kHeadDim / 8][4] = {}, peak[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
      const auto values_ready = [&] {
        if (more) {
          copies_wait<2>();
        } else {
          copies_wait<0>();
        }
        __syncthreads();
      };
      partition_sums(stages[i % kStages], start, used, values_ready, o, peak, sum);
      if (!idle)
        take(
            part, used, [&](int dt, int e) { return o[dt][e]; }, peak, sum);
      __syncthreads();  // every warp is done with this stage before the copies two rounds on refill it
    }
  }
  if constexpr (kWhole) {
    if (idle || (kSpread && (warp != 0 || rank != 0))) return;  // spread: block 0's warp 0 holds the merge
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (!mine[r]) continue;
      const int64_t row = token[r] * n_heads + head[r];
#pragma unroll
      for (int dt = 0; dt < kHeadDim / 8; ++dt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int64_t d = dt * 8 + 2 * t + e;
          const float value = __fdiv_rn(merged[dt][2 * r + e], run[r].sum);
          out[row * kHeadDim + d] = value;
          if (rounded != nullptr)
            rounded[token[r] * n_heads * kHeadDim + mma_slot(head[r] * kHeadDim + d)] = __float2bfloat16_rn(value);
        }
    }
  }
}
}  // namespace

bool mma_attention_fits(const KvPages& p, int64_t n_heads, int64_t window) {
  return (p.dtype == DType::kBF16 || p.dtype == DType::kF16) && (p.head_dim == 64 || p.head_dim == 128) &&
         window == 0 && p.n_kv_heads > 0 && n_heads % p.n_kv_heads == 0 && n_heads / p.n_kv_heads <= kColumns;
}

int64_t mma_attention_tokens_per_block(int64_t n_heads, int64_t n_kv_heads) {
  return kColumns / (n_heads / n_kv_heads);
}

constexpr int64_t kMaxSpan = 8;
// The most partitions a block that takes all of its tokens' partitions may see (its
// table of key rows in shared memory: 16 KiB).
constexpr int64_t kMaxWhole = 32;

// Partitions a block (1, 2 or 4): as many as leave at least four blocks an SM,
// so that a few sequences still spread over every SM while many sequences'
// blocks each hide one partition's copies behind another's products. 0 (every
// partition of its tokens, merged in the block; at most kMaxWhole of them) for
// prompt chunks (blocks of several tokens) whose launch has a block an SM without
// splitting their partitions: 8B prefill +7 % at 512 tokens, +21 % at 2,048;
// decode steps of 64 sequences were 2 % slower so (session 27). And 0 for decode
// steps of head_dim 128 with at most two blocks an SM unsplit: on the H200
// (session 31, two rounds, 512-token prompts) the 8B shape's batch-1 decode ran
// 192.8 and 192.7 tok/s against 180.6 and 180.2, and 32 sequences 5,298.0 and
// 5,256.9 against 5,122.4 and 5,167.8; the 1B shape (head_dim 64) lost 10 % so
// (820.4 and 831.6 against 913.7 and 914.6), which is why head_dim decides; its
// whole blocks spreading their partitions over their warps (kSpread) still lost
// 8 % (session 32: 852.6 and 850.2 against 936.8 and 921.7 split). And only with
// at least 8 unsplit blocks (8 KV heads at batch 1): 12 layers of Qwen3-30B-A3B
// (4 KV heads, head_dim 128) after a 512-token prompt decoded 777.7, 782.8 and
// 780.5 tok/s split against 722.7, 736.5 and 731.4 whole (H100, session 52).
// TESSERA_CUDA_ATTENTION_SPAN=N sets it (read at every call, so that a test can
// compare spans in one process; 0 asks for the whole where it fits). The bits are
// the same whichever it takes (merge.cuh), so the choice may follow the batch.
int64_t partitions_a_block(int64_t partitions, int64_t unsplit_blocks, bool chunks, int64_t head_dim) {
  if (const char* asked = std::getenv("TESSERA_CUDA_ATTENTION_SPAN"); asked != nullptr) {
    const int64_t span = std::clamp<int64_t>(std::atoll(asked), 0, kMaxSpan);
    return span == 0 && partitions > kMaxWhole ? 1 : span;
  }
  const int64_t sms = multiprocessors();
  if (partitions <= kMaxWhole &&
      (chunks ? unsplit_blocks >= sms : head_dim == 128 && unsplit_blocks >= 8 && unsplit_blocks <= 2 * sms))
    return 0;
  int64_t span = 4;
  while (span > 1 && partitions * unsplit_blocks / span < 4 * sms) span /= 2;
  return span;
}

bool mma_attention_whole(int64_t partitions, int64_t count, int64_t tokens, int64_t n_kv_heads, int64_t head_dim) {
  return partitions_a_block(partitions, count * n_kv_heads, tokens > count, head_dim) == 0;
}

void mma_attention(cudaStream_t stream, const float* q, int64_t n_heads, const KvPages& p, int64_t layer, TokenMap map,
                   float scale, int64_t partitions, const ColumnBlock* column_blocks, int64_t count, int64_t tokens,
                   float* scratch, float* out, __nv_bfloat16* rounded) {
  if (count == 0) return;
  const int64_t asked = partitions_a_block(partitions, count * p.n_kv_heads, tokens > count, p.head_dim);
  const bool whole = asked == 0;
  const int64_t span = whole ? partitions : asked;
  // A decode step's whole blocks of at most 16 columns, at most a block an SM, spread their partitions over
  // their warps (the kernel's kSpread; TESSERA_CUDA_ATTENTION_SPREAD=0: one warp, read at every call). On the
  // H200 (session 32, two rounds) the 8B shape's batch-1 decode ran 196.4 and 197.3 tok/s against 195.2 and 194.0.
  const int64_t sms = multiprocessors();
  const bool spread = whole && tokens == count && count * p.n_kv_heads <= sms && n_heads / p.n_kv_heads <= 16 &&
                      !switched_off("TESSERA_CUDA_ATTENTION_SPREAD");
  // Spread blocks run in clusters of as many as take two partitions each (at most 8, and no more blocks than SMs;
  // TESSERA_CUDA_ATTENTION_CLUSTER=N asks for N, 0 or 1 for none, read at every call). On the H200 (session 34) the
  // 8B shape's batch-1 decode after a 512-token prompt (10 partitions) ran 204.7 / 203.3 tok/s so, 203.9 / 200.4 in
  // clusters of 3 (four a block) and 193.9 / 194.2 in one block.
  int64_t cluster = 1;
  if (spread) {
    const char* asked_cluster = std::getenv("TESSERA_CUDA_ATTENTION_CLUSTER");
    const int64_t want = asked_cluster != nullptr ? std::atoll(asked_cluster) : (partitions + 1) / 2;
    cluster = std::clamp<int64_t>(want, 1, std::min<int64_t>(8, sms / (count * p.n_kv_heads)));
  }
  // Whole: (KV head, column block), the last column blocks (a prompt's longest) first.
  const dim3 grid = whole ? dim3(static_cast<unsigned>(p.n_kv_heads * cluster), static_cast<unsigned>(count))
                          : dim3(static_cast<unsigned>((partitions + span - 1) / span), static_cast<unsigned>(count),
                                 static_cast<unsigned>(p.n_kv_heads));
  const auto launch = [&]<DType D, int kHeadDim, bool kWhole, bool kSpread>() {
    const auto kernel = mma_attention_kernel<D, kHeadDim, kWhole, kSpread>;
    constexpr size_t kStages = kSpread ? kWarps : 2;
    constexpr size_t kSlots = kSpread ? kWarps * (kHeadDim / 8 * 4 + 4) * 32 * sizeof(float) : 0;
    constexpr size_t kMostShared =
        kStages * sizeof(Stage<kHeadDim>) + (kWhole ? kMaxWhole : kMaxSpan) * kPositions * sizeof(int64_t) + kSlots;
    static const bool sized = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kMostShared)) == cudaSuccess;
    TS_CHECK(sized, "the attention kernel cannot have ", kMostShared, " bytes of shared memory");
    const size_t shared =
        kStages * sizeof(Stage<kHeadDim>) + static_cast<size_t>(span * kPositions) * sizeof(int64_t) + kSlots;
    launch_kernel_in_clusters(static_cast<unsigned>(cluster), kernel, grid, kWarps * 32, shared, stream, q, n_heads, p,
                              layer, map, scale, partitions, span, column_blocks, scratch, out, rounded);
  };
  const auto run = [&]<DType D, int kHeadDim>() {
    if (spread) return launch.template operator()<D, kHeadDim, true, true>();
    if (whole) return launch.template operator()<D, kHeadDim, true, false>();
    launch.template operator()<D, kHeadDim, false, false>();
  };
  const auto run_dtype = [&]<DType D>() {
    if (p.head_dim == 64) return run.template operator()<D, 64>();
    run.template operator()<D, 128>();
  };
  if (p.dtype == DType::kBF16) {
    run_dtype.template operator()<DType::kBF16>();
  } else {
    run_dtype.template operator()<DType::kF16>();
  }
  if (!whole) attention_combine(stream, out, tokens, n_heads, p.head_dim, map, 0, partitions, scratch, rounded);
}

}  // namespace tessera::cuda
