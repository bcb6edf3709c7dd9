// The matmul of bf16 weights by bf16 dot products (backend/cpu/bf16_dot_kernel.h):
//   - its tiles and GEMM sum every output in the order the kernel states, bitwise, run
//     with the portable emulation of the instruction (bf16_dot_emulated.h) on every
//     machine;
//   - the instruction itself (AVX-512 BF16's vdpbf16ps) gives bitwise what the
//     emulation gives, and the dispatched matmul takes it: only on a CPU that has it
//     (the GPU host's Xeon, in the device run of docs/benchmarks.md); the dev VMs (AVX2)
//     skip these, saying so.
// kernels_test.cpp's batch tests (rows alone or in a batch, any thread count) run the
// dispatched matmul, so on such a CPU they cover this kernel through CpuDevice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/bf16_reference.h"
#include "backend/cpu/bf16_dot.h"
#include "backend/cpu/bf16_dot_emulated.h"
#include "backend/cpu/bf16_dot_kernel.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/weight_layout.h"
#include "support/random_tensors.h"

namespace tessera {
namespace {

using Emulated = cpu::bf16_dot::EmulatedOps;
namespace kernel = cpu::bf16_dot::kernel;
using testing::random_bf16;
using testing::random_values;
using testing::rounded_x_dot;

// The kernel run with the emulation, as bf16_dot.cpp runs it with the instruction: tiles
// below kGemmTokens tokens (one token's rows asked for 2,048 bytes ahead, its default), else
// x packed and the GEMM. w's rows in groups of `group` (weight_layout.h).
std::vector<float> emulated_matmul(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows,
                                   int64_t group = 1) {
  std::vector<float> y(static_cast<size_t>(tokens * rows));
  const int64_t kp = kernel::padded_k(k);
  if (tokens < kernel::kGemmTokens) {
    std::vector<uint16_t> rounded(static_cast<size_t>(tokens * kp));
    for (int64_t t = 0; t < tokens; ++t) kernel::round_row<Emulated>(x + t * k, k, rounded.data() + t * kp);
    kernel::tiles<Emulated>(rounded.data(), tokens, {w, k, rows, group}, y.data(), rows, 2048);
  } else {
    std::vector<uint16_t> packed(static_cast<size_t>(kernel::packed_elements(tokens, k)), 0xFFFF);
    std::vector<uint16_t> row(static_cast<size_t>(kp));
    kernel::pack_x<Emulated>(x, tokens, k, 0, tokens, packed.data(), row.data());
    std::vector<float> acc(static_cast<size_t>(kernel::kAccFloats));
    kernel::gemm<Emulated>(packed.data(), tokens, {w, k, rows, group}, y.data(), rows, acc.data());
  }
  return y;
}

// One output in the order bf16_dot_kernel.h states, chunk after chunk, nothing blocked.
float in_stated_order(const float* x, const uint16_t* w, int64_t k) {
  const int64_t kp = kernel::padded_k(k);
  std::vector<uint16_t> xb(static_cast<size_t>(kp)), wb(static_cast<size_t>(kp), 0);
  kernel::round_row<Emulated>(x, k, xb.data());
  std::copy(w, w + k, wb.begin());
  Emulated::Acc lanes[16] = {};
  for (int64_t c = 0; c < kp; c += kernel::kChunk)
    lanes[0] = Emulated::dot(lanes[0], Emulated::load(wb.data() + c), Emulated::load(xb.data() + c));
  float sums[16];
  Emulated::sum_lanes16(lanes, sums);
  return sums[0];
}

// Tiles (1, 2, 5 and 15 tokens), the GEMM (16, 40 and 301 tokens: two token blocks, the
// second not whole panels), k with and without a partial last chunk and over several k
// blocks, rows leaving partial tiles and panels: every output bitwise in the stated
// order, so a row is the same alone or in any batch.
TEST(Bf16DotTest, EmulatedKernelSumsInTheStatedOrder) {
  for (const int64_t k : {7, 64, 2 * 512 + 37}) {
    const int64_t rows = 21;
    const auto x = random_values(static_cast<size_t>(301 * k), 31);
    const auto w = random_bf16(static_cast<size_t>(rows * k), 32);
    for (const int64_t tokens : {1, 2, 5, 15, 16, 40, 301}) {
      const auto y = emulated_matmul(x.data(), tokens, k, w.data(), rows);
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(y[static_cast<size_t>(t * rows + r)], in_stated_order(x.data() + t * k, w.data() + r * k, k))
              << "k " << k << " tokens " << tokens << " t " << t << " row " << r;
    }
  }
}

// One token's tiles of 4, 8 and 16 rows side by side (TESSERA_DECODE_ROWS), asking for
// the bytes past them or not: every row bitwise in the stated order, so a row is the same
// whatever the tile (21 rows: partial tiles of each size).
TEST(Bf16DotTest, OneTokenTilesOfAnyRowsSumInTheStatedOrder) {
  for (const int64_t k : {7, 64, 2 * 512 + 37}) {
    const int64_t rows = 21;
    const auto x = random_values(static_cast<size_t>(k), 41);
    const auto w = random_bf16(static_cast<size_t>(rows * k), 42);
    std::vector<uint16_t> rounded(static_cast<size_t>(kernel::padded_k(k)));
    kernel::round_row<Emulated>(x.data(), k, rounded.data());
    for (const int decode_rows : {4, 8, 16})
      for (const int64_t ahead : {0, 2048}) {
        std::vector<float> y(static_cast<size_t>(rows));
        kernel::tiles<Emulated>(rounded.data(), 1, {w.data(), k, rows, 1}, y.data(), rows, ahead, decode_rows);
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(y[static_cast<size_t>(r)], in_stated_order(x.data(), w.data() + r * k, k))
              << "k " << k << " rows a tile " << decode_rows << " ahead " << ahead << " row " << r;
      }
  }
}

// Weights interleaved in groups of 4, 8 and 16 rows (weight_layout.h), as CpuDevice::place
// lays them out: the tiles (one token's of the group's rows, read side by side with
// groups left over: 56 rows are 7 groups of 8 and 14 of 4; and 4 rows x up to 4 tokens)
// and the GEMM (read in place, not copied) give the bits of the rows one after another,
// the emulation and, where the CPU has it, the instruction.
TEST(Bf16DotTest, InterleavedRowsGiveTheBitsOfRowsOneAfterAnother) {
  for (const auto& [k, rows] : {std::pair<int64_t, int64_t>{64, 48}, {2 * 512 + 64, 48}, {64, 56}}) {
    const auto x = random_values(static_cast<size_t>(40 * k), 43);
    const auto w = random_bf16(static_cast<size_t>(rows * k), 44);
    for (const int64_t group : {4, 8, 16}) {
      if (rows % group != 0) continue;
      ASSERT_TRUE(cpu::can_interleave(DType::kBF16, rows, k, group));
      std::vector<uint16_t> lined(w.size());
      cpu::interleave_rows(w.data(), DType::kBF16, k, group, 0, rows, lined.data());
      ASSERT_NE(lined, w);
      for (const int64_t tokens : {1, 2, 5, 16, 40}) {
        const auto want = emulated_matmul(x.data(), tokens, k, w.data(), rows);
        ASSERT_EQ(emulated_matmul(x.data(), tokens, k, lined.data(), rows, group), want)
            << "k " << k << " rows " << rows << " group " << group << " tokens " << tokens;
        if (cpu::bf16_dot::instructions() == nullptr) continue;
        std::vector<float> y(want.size());
        cpu::bf16_dot::instructions()->matmul_rows(x.data(), tokens, k, lined.data(), rows, y.data(), rows, group);
        ASSERT_EQ(y, want) << "the instruction, k " << k << " rows " << rows << " group " << group << " tokens "
                           << tokens;
      }
    }
  }
}

// The emulated products are those of the weights and x rounded to bf16, summed in f32.
TEST(Bf16DotTest, EmulationSumsTheProductsOfXRoundedToBf16) {
  const int64_t tokens = 3, k = 1061, rows = 5;
  const auto x = random_values(static_cast<size_t>(tokens * k), 33);
  const auto w = random_bf16(static_cast<size_t>(rows * k), 34);
  const auto y = emulated_matmul(x.data(), tokens, k, w.data(), rows);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_NEAR(y[static_cast<size_t>(t * rows + r)], rounded_x_dot(x.data() + t * k, w.data() + r * k, k), 1e-5 * k)
          << "t " << t << " row " << r;
  // Rounding: nearest, ties to even; a subnormal reads as zero.
  EXPECT_EQ(Emulated::round(1.0f), 0x3F80);
  EXPECT_EQ(Emulated::round(1.0f + 1.0f / 256), 0x3F80);                 // tie, to even
  EXPECT_EQ(Emulated::round(1.0f + 3.0f / 256), 0x3F82);                 // tie, to even (up)
  EXPECT_EQ(Emulated::round(1.0f + 1.0f / 256 + 1.0f / 65536), 0x3F81);  // past the tie
  EXPECT_EQ(Emulated::round(-1e-40f), 0x8000);
}

#define SKIP_WITHOUT_THE_INSTRUCTION()                                                                   \
  if (cpu::bf16_dot::instructions() == nullptr)                                                          \
  GTEST_SKIP() << "this CPU has no AVX-512 BF16; the instruction is tested on the GPU host's Xeon (see " \
                  "docs/benchmarks.md)"

// vdpbf16ps and vcvtneps2bf16 give bitwise what the emulation gives, through every path.
TEST(Bf16DotTest, InstructionGivesTheEmulatedSums) {
  SKIP_WITHOUT_THE_INSTRUCTION();
  for (const int64_t k : {7, 64, 2 * 512 + 37, 2048}) {
    const int64_t rows = 53;
    const auto x = random_values(static_cast<size_t>(301 * k), 35);
    const auto w = random_bf16(static_cast<size_t>(rows * k), 36);
    for (const int64_t tokens : {1, 3, 15, 16, 40, 301}) {
      std::vector<float> y(static_cast<size_t>(tokens * rows));
      cpu::bf16_dot::instructions()->matmul_rows(x.data(), tokens, k, w.data(), rows, y.data(), rows, 1);
      const auto want = emulated_matmul(x.data(), tokens, k, w.data(), rows);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(y[i], want[i]) << "k " << k << " tokens " << tokens << " at " << i;
    }
  }
}

// The same with subnormal inputs and products that cancel to tiny sums (the
// instruction's denormal handling, as the emulation reads the Intel SDM).
TEST(Bf16DotTest, InstructionGivesTheEmulatedSumsAtSubnormals) {
  SKIP_WITHOUT_THE_INSTRUCTION();
  const int64_t tokens = 2, k = 64, rows = 16;
  auto x = random_values(static_cast<size_t>(tokens * k), 37);
  auto w = random_bf16(static_cast<size_t>(rows * k), 38);
  for (size_t i = 0; i < x.size(); i += 3) x[i] = (i % 2 ? 1e-39f : -3e-40f);
  for (size_t i = 0; i < w.size(); i += 5) w[i] = static_cast<uint16_t>(i % 2 ? 0x0001 : 0x8040);
  for (size_t i = 1; i < w.size(); i += 7) w[i] = 0x0080;  // the smallest normal: products underflow
  std::vector<float> y(static_cast<size_t>(tokens * rows));
  cpu::bf16_dot::instructions()->matmul_rows(x.data(), tokens, k, w.data(), rows, y.data(), rows, 1);
  const auto want = emulated_matmul(x.data(), tokens, k, w.data(), rows);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(y[i], want[i]) << "at " << i;
}

// Within a lane the odd-indexed product is added first, each step rounded: lane 0 holds
// 1 after the first chunk, then takes 2^-23 (element 33) and 2^-24 (element 32). Odd
// first: 1 + 2^-23, then a tie rounded to even, 1 + 2^-22; even first would give 1 +
// 2^-23 (the tie first, to 1).
TEST(Bf16DotTest, InstructionAddsTheOddProductOfAPairFirst) {
  SKIP_WITHOUT_THE_INSTRUCTION();
  const int64_t k = 64;
  std::vector<float> x(k, 0.0f);
  std::vector<uint16_t> w(k, 0);
  x[1] = x[32] = x[33] = 1.0f;
  w[1] = 0x3F80;   // 1
  w[33] = 0x3400;  // 2^-23
  w[32] = 0x3380;  // 2^-24
  float y = 0;
  cpu::bf16_dot::instructions()->matmul_rows(x.data(), 1, k, w.data(), 1, &y, 1, 1);
  EXPECT_EQ(y, 1.0f + 0x1p-22f) << "even first would give " << 1.0f + 0x1p-23f;
  EXPECT_EQ(emulated_matmul(x.data(), 1, k, w.data(), 1)[0], 1.0f + 0x1p-22f);
}

// Dispatch sends bf16 weights to the dot products in this order where the CPU has them
// (and the target is AVX-512) and TESSERA_BF16_COLUMNS=0: the library's matmul gives the
// emulated sums.
TEST(Bf16DotTest, DispatchedMatmulTakesTheDotProducts) {
  SKIP_WITHOUT_THE_INSTRUCTION();
  if (cpu::amx_active()) GTEST_SKIP() << "this CPU has AMX-BF16: bf16 weights take the tiles (amx_test.cpp)";
  if (cpu::bf16_dot::columns_enabled())
    GTEST_SKIP() << "bf16 weights take the column order (columns_test.cpp); TESSERA_BF16_COLUMNS=0 runs this";
  ASSERT_TRUE(cpu::bf16_dot_active()) << cpu::isa_name();
  const int64_t k = 1061, rows = 21;
  const auto x = random_values(static_cast<size_t>(40 * k), 39);
  const auto w = random_bf16(static_cast<size_t>(rows * k), 40);
  for (const int64_t tokens : {1, 40}) {
    std::vector<float> y(static_cast<size_t>(tokens * rows));
    cpu::matmul_rows(x.data(), tokens, k, w.data(), DType::kBF16, rows, y.data(), rows);
    EXPECT_EQ(y, emulated_matmul(x.data(), tokens, k, w.data(), rows)) << tokens << " tokens";
  }
}

}  // namespace
}  // namespace tessera
