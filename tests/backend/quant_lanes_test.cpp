// The lanes of the CUDA matmul on GGUF blocks (backend/cuda/quant_lanes.cuh), compiled
// here as host code: for rows of real blocks at every skew the kernel meets, read out of
// a ring laid out as the kernel lays it (wrapping past its end, with its tail), each
// unit's lane parts add up to the unit's exact integer sums (P, and M for Q4_K/Q5_K) and
// give its d and dmin. So the integers of the GPU's products are checked on any machine;
// the order of their f32 steps is quant_gpu_test's (on a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/quant_act.h"
#include "backend/cuda/quant_lanes.cuh"
#include "io/quantize.h"
#include "support/gguf_units.h"
#include "support/random_tensors.h"

namespace tessera {
namespace {

template <DType kT, int kTile, bool kLean = true>
void check_lanes(int64_t units, uint32_t seed) {
  using U = cuda::Unit<kT>;
  const int64_t k = units * U::kElems, n = 5, row_bytes = units * U::kBytes;
  SCOPED_TRACE(std::string(dtype_name(kT)) + ", " + std::to_string(units) + " units, tile " + std::to_string(kTile) +
               (kLean ? "" : ", not lean"));
  const std::vector<float> values = testing::random_values(static_cast<size_t>(n * k), seed);
  std::vector<uint8_t> blocks(dtype_bytes(kT, n * k));
  quantize_blocks(kT, values, blocks);
  // The tile's activations as the rounding kernel leaves them: q, and Q8_K's sums of 16.
  const std::vector<float> x = testing::random_values(static_cast<size_t>(kTile * k), seed + 1);
  std::vector<cpu::Q8Block> x32(static_cast<size_t>(kTile * k / 32));
  std::vector<cpu::Q8KBlock> x256(static_cast<size_t>(kTile * k / 256));
  std::vector<int8_t> q(static_cast<size_t>(kTile * k));
  std::vector<int16_t> sums(static_cast<size_t>(kTile * k / 16));
  for (int t = 0; t < kTile; ++t) {
    if (U::kSums) {
      cpu::quantize_q8_K(x.data() + t * k, k, x256.data() + t * units);
      for (int64_t u = 0; u < units; ++u) {
        std::memcpy(q.data() + t * k + 256 * u, x256[t * units + u].qs, 256);
        std::memcpy(sums.data() + t * (k / 16) + 16 * u, x256[t * units + u].bsums, 32);
      }
    } else {
      cpu::quantize_q8_0(x.data() + t * k, k, x32.data() + t * units);
      for (int64_t u = 0; u < units; ++u) std::memcpy(q.data() + t * k + 32 * u, x32[t * units + u].qs, 32);
    }
  }
  const cuda::Acts acts{q.data(), nullptr, sums.data()};
  int64_t xt[kTile];
  for (int t = 0; t < kTile; ++t) xt[t] = t;
  std::mt19937 rng(seed + 2);
  alignas(16) uint32_t ring[U::kStride / 4];
  // Row r starts at byte r * row_bytes of 16-byte aligned weights; its stream starts at
  // the 16-byte boundary before it, at ring byte 0, so unit u is at stream byte su.
  for (int64_t r = 0; r < n; ++r) {
    const int64_t skew = (r * row_bytes) & 15;
    const uint8_t* row = blocks.data() + r * row_bytes;
    for (int64_t u = 0; u < units; ++u) {
      const auto su = static_cast<uint32_t>(skew + u * U::kBytes);
      // The ring holds other bytes, but the unit's (where they wrap, the tail repeats them).
      for (auto& word : ring) word = static_cast<uint32_t>(rng());
      auto* bytes = reinterpret_cast<uint8_t*>(ring);
      for (int i = 0; i < U::kBytes; ++i) bytes[(su + i) & (cuda::kRingBytes - 1)] = row[u * U::kBytes + i];
      std::memcpy(bytes + cuda::kRingBytes, bytes, U::kTail);
      const testing::UnitInts w = testing::unit_ints(kT, row + u * U::kBytes);
      int p_sum[kTile] = {}, m_sum[kTile] = {};
      for (int j = 0; j < U::kLanes; ++j) {
        int p[kTile] = {}, m[kTile] = {};
        float dmin = 0;
        const float d = cuda::lane_part<kT, kTile, kLean>(ring, su, j, static_cast<int>(u), acts, xt, k, p, m, dmin);
        ASSERT_EQ(d, w.d) << "row " << r << " unit " << u << " lane " << j;
        if (kT == DType::kQ4_K || kT == DType::kQ5_K) {
          ASSERT_EQ(dmin, w.dmin) << "row " << r << " unit " << u;
        }
        for (int t = 0; t < kTile; ++t) p_sum[t] += p[t], m_sum[t] += m[t];
      }
      for (int t = 0; t < kTile; ++t) {
        int32_t want_p = 0, want_m = 0;
        testing::unit_sums(kT, w, q.data() + t * k + u * U::kElems, sums.data() + t * (k / 16) + 16 * u, want_p,
                           want_m);
        ASSERT_EQ(p_sum[t], want_p) << "row " << r << " unit " << u << " token " << t;
        ASSERT_EQ(m_sum[t], want_m) << "row " << r << " unit " << u << " token " << t;
      }
    }
  }
}

// The ring's schedule in quant_matmul_kernel, restated: while a warp reads at stage s,
// the copies of stages s + 1 .. s + kAhead - 1 are in flight into their ring slots, and
// each round of units is read at the first stage whose landed bytes reach its end. So
// a round must lie in stages s - (kStages - kAhead) .. s, the ones no copy in flight
// overwrites: Unit::kAheadOf leaves room for it, at every row length and skew, and on
// long rows (a Q8_0 or Q4_0 row of 14,336 is 448 units; 1,000 and 4,000 units: every
// phase of rounds against stages in their middle); for stages of 512 bytes and the lean
// kernels' 1 KiB.
template <DType kT, int kStage>
void check_schedule() {
  using U = cuda::Unit<kT>;
  constexpr int64_t kAhead = U::template kAheadOf<kStage>, kStages = cuda::kRingBytes / kStage;
  SCOPED_TRACE(std::string(dtype_name(kT)) + ", stages of " + std::to_string(kStage));
  std::vector<int64_t> lengths;
  for (int64_t units = 1; units <= 200; ++units) lengths.push_back(units);
  lengths.push_back(1000);
  lengths.push_back(4000);
  for (int64_t skew = 0; skew < 16; skew += 2) {
    for (const int64_t units : lengths) {
      const int64_t end = skew + units * U::kBytes, stages = (end + kStage - 1) / kStage;
      int64_t u0 = 0;  // the next round's first unit
      for (int64_t stage = 0; stage < stages; ++stage) {
        const int64_t landed = std::min((stage + 1) * kStage, end);
        for (; u0 < units && std::min(skew + (u0 + U::kRound) * U::kBytes, end) <= landed; u0 += U::kRound) {
          const int64_t first = (skew + u0 * U::kBytes) / kStage;
          ASSERT_LE(stage - first, kStages - kAhead)
              << units << " units at skew " << skew << ": a round from stage " << first << " read at stage " << stage;
        }
      }
      ASSERT_GE(u0, units) << units << " units at skew " << skew << ": rounds left unread";
    }
  }
}

TEST(QuantLanes, EveryRoundLiesInStagesNoCopyInFlightOverwrites) {
  for (const auto check :
       {check_schedule<DType::kQ8_0, cuda::kStageBytes>, check_schedule<DType::kQ4_0, cuda::kStageBytes>,
        check_schedule<DType::kQ4_K, cuda::kStageBytes>, check_schedule<DType::kQ5_K, cuda::kStageBytes>,
        check_schedule<DType::kQ6_K, cuda::kStageBytes>, check_schedule<DType::kQ8_0, cuda::kLeanStageBytes>,
        check_schedule<DType::kQ4_0, cuda::kLeanStageBytes>, check_schedule<DType::kQ4_K, cuda::kLeanStageBytes>,
        check_schedule<DType::kQ5_K, cuda::kLeanStageBytes>, check_schedule<DType::kQ6_K, cuda::kLeanStageBytes>})
    check();
}

// Units enough that a row wraps the 4 KiB ring (Q4_K's 31 x 144 bytes; Q8_0's rows of
// 34-byte blocks sit at every even skew).
TEST(QuantLanes, LanePartsAddUpToTheUnitsIntegerSums) {
  check_lanes<DType::kQ8_0, 1>(131, 1);
  check_lanes<DType::kQ8_0, 4>(131, 2);
  check_lanes<DType::kQ4_0, 1>(251, 3);
  check_lanes<DType::kQ4_0, 4>(251, 4);
  check_lanes<DType::kQ4_K, 1>(31, 5);
  check_lanes<DType::kQ4_K, 4>(31, 6);
  check_lanes<DType::kQ5_K, 1>(31, 7);
  check_lanes<DType::kQ5_K, 4>(31, 8);
  check_lanes<DType::kQ6_K, 1>(31, 9);
  check_lanes<DType::kQ6_K, 4>(31, 10);
  // The lanes of the kernels that are not lean (the default), which differ for Q4_K and Q6_K.
  check_lanes<DType::kQ4_K, 1, false>(31, 5);
  check_lanes<DType::kQ4_K, 4, false>(31, 6);
  check_lanes<DType::kQ6_K, 1, false>(31, 9);
  check_lanes<DType::kQ6_K, 4, false>(31, 10);
}

}  // namespace
}  // namespace tessera
