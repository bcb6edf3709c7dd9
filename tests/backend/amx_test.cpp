// The matmul of bf16 weights by AMX tile products (backend/cpu/amx_kernel.h), and up to 8
// tokens' by vector steps over the column layout (amx_columns.h):
//   - its decode (both ways) and GEMM sum every output in the order the kernel states,
//     bitwise, run with the portable emulation of the tiles and the steps
//     (amx_emulated.h) on every machine;
//   - the instructions themselves (AMX-BF16's tdpbf16ps) give the emulation's bits, and so a
//     token's row bitwise the same alone and in any batch, whichever layout decode reads,
//     and the dispatched matmul takes them: only on a CPU that has them (the dev VM's and
//     the GPU host's Xeons); elsewhere these skip, saying so.
// kernels_test.cpp's batch tests (rows alone or in a batch, any thread count) run the
// dispatched matmul, so on such a CPU they cover this kernel through CpuDevice.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/bf16_reference.h"
#include "backend/cpu/amx.h"
#include "backend/cpu/amx_emulated.h"
#include "backend/cpu/amx_kernel.h"
#include "core/check.h"
// (after amx_kernel.h and core/check.h)
#include "backend/cpu/amx_columns.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/weight_layout.h"
#include "support/random_tensors.h"

namespace tessera {
namespace {

using Emulated = cpu::amx::EmulatedOps;
using Dot = cpu::bf16_dot::EmulatedOps;
namespace kernel = cpu::amx::kernel;
using testing::random_bf16;
using testing::random_values;
using testing::rounded_x_dot;

// The kernel run with the emulation, as amx.cpp runs it with the instructions: one token
// by decode (up to kColumnTokens by the column steps in the column layout), more packed (in two ranges, as threads pack
// them) and the GEMM, in two calls past 32 tokens (tokens [0, 32) and the rest, as threads may cut a call: amx.cpp's
// offset into the packed x), blocked as `tuning` says; w's rows in groups of `group`
// (weight_layout.h).
std::vector<float> emulated_matmul(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows,
                                   kernel::GemmTuning tuning = {}, int64_t group = 1) {
  std::vector<float> y(static_cast<size_t>(tokens * rows));
  const int64_t kp = kernel::padded_k(k);
  std::vector<uint16_t> scratch(static_cast<size_t>(2 * kernel::kTileRows * kp));
  if (group == cpu::kColumns && tokens <= kernel::kColumnTokens) {
    std::vector<uint16_t> xb(static_cast<size_t>(tokens * kp));
    for (int64_t t = 0; t < tokens; ++t) kernel::round_row<Emulated>(x + t * k, k, xb.data() + t * kp);
    std::vector<float> xs(static_cast<size_t>(tokens * k));
    kernel::decode_columns<Emulated>(xb.data(), tokens, k, w, rows, y.data(), rows, xs.data(), 2048);
    return y;
  }
  if (tokens == 1) {
    std::vector<uint16_t> xb(static_cast<size_t>(kp));
    kernel::round_row<Emulated>(x, k, xb.data());
    kernel::decode<Emulated>(xb.data(), k, w, rows, group, y.data(), scratch.data());
    return y;
  }
  std::vector<uint32_t> packed(static_cast<size_t>(kernel::packed_elements(tokens, k) / 2), 0xFFFFFFFFu);
  std::vector<uint16_t> rows16(static_cast<size_t>(kernel::kTileTokens * kp));
  const int64_t split = tokens / 3;
  kernel::pack_x<Emulated>(x, tokens, k, split, tokens, packed.data(), rows16.data());
  kernel::pack_x<Emulated>(x, tokens, k, 0, split, packed.data(), rows16.data());
  std::vector<float> acc(static_cast<size_t>(kernel::kAccFloats));
  std::vector<uint16_t> a(static_cast<size_t>(kernel::kPackedRowElements));
  const int64_t cut = tokens > 32 ? 32 : tokens;
  kernel::gemm<Emulated>(packed.data(), cut, k, w, rows, group, y.data(), rows, acc.data(), a.data(), tuning);
  if (cut < tokens)
    kernel::gemm<Emulated>(packed.data() + cpu::bf16::packed_offset(cut, k), tokens - cut, k, w, rows, group,
                           y.data() + cut * rows, rows, acc.data(), a.data(), tuning);
  return y;
}

// Weights interleaved in groups of 16 rows (an A tile, read in place by decode) and of 8
// (copied into whole tiles), and in the column layout (decode's vector steps; the GEMM's A
// tiles transposed out of it), as CpuDevice::place lays them out: decode and the GEMM give
// the bits of the rows one after another (48 rows: a pair of tile groups and a lone one,
// three columns; 80: four columns and one).
TEST(AmxTest, InterleavedRowsGiveTheBitsOfRowsOneAfterAnother) {
  for (const int64_t k : {64, 2 * 512 + 64}) {
    for (const int64_t rows : {48, 80}) {
      const auto x = random_values(static_cast<size_t>(40 * k), 53);
      const auto w = random_bf16(static_cast<size_t>(rows * k), 54);
      for (const int64_t group : {int64_t{8}, int64_t{16}, cpu::kColumns}) {
        std::vector<uint16_t> lined(w.size());
        cpu::interleave_rows(w.data(), DType::kBF16, k, group, 0, rows, lined.data());
        for (const int64_t tokens : {1, 2, 3, 4, 5, 8, 9, 40})
          ASSERT_EQ(emulated_matmul(x.data(), tokens, k, lined.data(), rows, {}, group),
                    emulated_matmul(x.data(), tokens, k, w.data(), rows))
              << "k " << k << " rows " << rows << " group " << group << " tokens " << tokens;
      }
    }
  }
}

// One output in the order amx_kernel.h states, written here from that statement: each
// chunk's even and odd products in two chains from zero, then acc += even + odd, every
// product and sum rounded on its own, subnormal inputs read as zero, subnormal results
// flushed.
float sum_in_stated_order(const float* x, const uint16_t* w, int64_t k) {
  const int64_t kp = kernel::padded_k(k);
  std::vector<uint16_t> xb(static_cast<size_t>(kp)), wb(static_cast<size_t>(kp), 0);
  kernel::round_row<Emulated>(x, k, xb.data());
  std::copy(w, w + k, wb.begin());
  const auto product = [&](int64_t i) {
    return Dot::flush(Dot::widen(wb[static_cast<size_t>(i)]) * Dot::widen(xb[static_cast<size_t>(i)]));
  };
  float acc = 0.0f;
  for (int64_t c = 0; c < kp; c += kernel::kChunk) {
    float even = 0.0f, odd = 0.0f;
    for (int64_t i = c; i < c + kernel::kChunk; i += 2) {
      even = Dot::flush(even + product(i));
      odd = Dot::flush(odd + product(i + 1));
    }
    acc = Dot::flush(acc + Dot::flush(even + odd));
  }
  return acc;
}

// Decode (1 token), the GEMM for a few tokens (2, 15: one token tile, padded) and for
// many (16, 17, 40, 301: an odd number of token tiles, the last not whole; 530: two token
// blocks), k with and without a partial last chunk and over several k blocks (1061:
// three), rows leaving partial row groups, and 300 rows (three row blocks, the last of
// an odd number of groups): every output bitwise in the stated order, so a row is the
// same alone or in any batch. The GEMM's tuning changes no bit: the default blocking of
// k, blocks of 5 chunks (k = 1061's 34 chunks in 7 blocks, the last partial) with the B
// tiles' streaming hint, and blocks of one chunk.
TEST(AmxTest, EmulatedKernelSumsInTheStatedOrder) {
  struct Case {
    int64_t k, rows;
    std::vector<int64_t> tokens;
  };
  const kernel::GemmTuning tunings[] = {{}, {5, true}, {1, false}};
  for (const Case& c : {Case{7, 21, {1, 2, 16, 40}}, Case{64, 53, {1, 2, 15, 16, 17, 40, 301, 530}},
                        Case{2 * 512 + 37, 21, {1, 3, 16, 301}}, Case{64, 300, {1, 20}}}) {
    const auto x = random_values(static_cast<size_t>(530 * c.k), 41);
    const auto w = random_bf16(static_cast<size_t>(c.rows * c.k), 42);
    for (const int64_t tokens : c.tokens) {
      for (const kernel::GemmTuning& tuning : tunings) {
        if (tokens == 1 && tuning.k_chunks != kernel::kKcChunks) continue;  // decode has no tuning
        const auto y = emulated_matmul(x.data(), tokens, c.k, w.data(), c.rows, tuning);
        for (int64_t t = 0; t < tokens; ++t)
          for (int64_t r = 0; r < c.rows; ++r)
            ASSERT_EQ(y[static_cast<size_t>(t * c.rows + r)],
                      sum_in_stated_order(x.data() + t * c.k, w.data() + r * c.k, c.k))
                << "k " << c.k << " rows " << c.rows << " tokens " << tokens << " t " << t << " row " << r
                << " k_chunks " << tuning.k_chunks << " stream_b " << tuning.stream_b;
      }
    }
  }
}

// The emulated products are those of the weights and x rounded to bf16, summed in f32.
TEST(AmxTest, EmulationSumsTheProductsOfXRoundedToBf16) {
  const int64_t tokens = 3, k = 1061, rows = 5;
  const auto x = random_values(static_cast<size_t>(tokens * k), 43);
  const auto w = random_bf16(static_cast<size_t>(rows * k), 44);
  const auto y = emulated_matmul(x.data(), tokens, k, w.data(), rows);
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < rows; ++r)
      EXPECT_NEAR(y[static_cast<size_t>(t * rows + r)], rounded_x_dot(x.data() + t * k, w.data() + r * k, k), 1e-5 * k)
          << "t " << t << " row " << r;
}

// The GEMM's transposition on the CPU (AVX2 shuffles): 16 x 16 32-bit elements, any
// strides, their bits as they were, nothing else written.
TEST(AmxTest, Transpose16MovesEveryElement) {
#if defined(__x86_64__) && defined(__linux__)
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "this CPU has no AVX2";
#else
  GTEST_SKIP() << "x86-64 Linux only";
#endif
  const int64_t ss = 37, ds = 21;
  std::vector<uint32_t> src(static_cast<size_t>(16 * ss)), dst(static_cast<size_t>(17 * ds), 0xFFFFFFFFu);
  for (size_t i = 0; i < src.size(); ++i) src[i] = 0x7FC00000u + static_cast<uint32_t>(i);  // NaN bit patterns
  cpu::amx::transpose16(reinterpret_cast<const float*>(src.data()), ss, reinterpret_cast<float*>(dst.data()), ds);
  for (int64_t j = 0; j < 17; ++j)
    for (int64_t i = 0; i < ds; ++i)
      ASSERT_EQ(dst[static_cast<size_t>(j * ds + i)],
                j < 16 && i < 16 ? src[static_cast<size_t>(i * ss + j)] : 0xFFFFFFFFu)
          << "row " << j << " column " << i;
}

#define SKIP_WITHOUT_THE_INSTRUCTION()                                                                   \
  if (cpu::amx::instructions() == nullptr)                                                               \
  GTEST_SKIP() << "this CPU (or OS) has no AMX-BF16 tiles; they are tested on the GPU host's Xeon (see " \
                  "docs/benchmarks.md)"

// The instructions give the emulation's bits, through decode and the GEMM, subnormal
// inputs and underflowing products included: the order amx_kernel.h states is the
// hardware's (bits compared as integers, so that a zero's sign counts).
TEST(AmxTest, InstructionGivesTheEmulationsBits) {
  SKIP_WITHOUT_THE_INSTRUCTION();
  for (const int64_t k : {7, 64, 2 * 512 + 37, 2048}) {
    const int64_t rows = 53;
    auto x = random_values(static_cast<size_t>(301 * k), 45);
    auto w = random_bf16(static_cast<size_t>(rows * k), 46);
    if (k == 64) {  // subnormal inputs, and products that underflow
      for (size_t i = 0; i < x.size(); i += 3) x[i] = (i % 2 ? 1e-39f : -3e-40f);
      for (size_t i = 0; i < w.size(); i += 5) w[i] = static_cast<uint16_t>(i % 2 ? 0x0001 : 0x8040);
      for (size_t i = 1; i < w.size(); i += 7) w[i] = 0x0080;
    }
    for (const int64_t tokens : {1, 2, 15, 16, 40, 301}) {
      std::vector<float> y(static_cast<size_t>(tokens * rows));
      cpu::amx::instructions()->matmul_rows(x.data(), tokens, k, w.data(), rows, y.data(), rows, 1);
      const auto want = emulated_matmul(x.data(), tokens, k, w.data(), rows);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(want[i]))
            << "k " << k << " tokens " << tokens << " at " << i << ": " << y[i] << " against " << want[i];
    }
  }
}

// What batch invariance needs of the hardware: each token's row bitwise the same alone
// (decode's one-token tiles) and among 2, 15, 40 or 301 tokens (the GEMM, padded token
// tiles, several token and k blocks), on every row group, partial ones included.
TEST(AmxTest, InstructionGivesARowBitwiseAloneOrInABatch) {
  SKIP_WITHOUT_THE_INSTRUCTION();
  for (const int64_t k : {7, 2 * 512 + 37, 2048}) {
    const int64_t rows = 300;
    const auto x = random_values(static_cast<size_t>(301 * k), 51);
    const auto w = random_bf16(static_cast<size_t>(rows * k), 52);
    std::vector<float> alone(static_cast<size_t>(301 * rows));
    for (int64_t t = 0; t < 301; ++t)
      cpu::amx::instructions()->matmul_rows(x.data() + t * k, 1, k, w.data(), rows, alone.data() + t * rows, rows, 1);
    for (const int64_t tokens : {2, 15, 40, 301}) {
      std::vector<float> y(static_cast<size_t>(tokens * rows));
      cpu::amx::instructions()->matmul_rows(x.data(), tokens, k, w.data(), rows, y.data(), rows, 1);
      for (size_t i = 0; i < y.size(); ++i)
        ASSERT_EQ(y[i], alone[i]) << "k " << k << " tokens " << tokens << " at " << i;
    }
  }
}

// The instructions read interleaved rows (weight_layout.h: groups of 16, an A tile read in
// place by decode, and of 8) and the column layout (decode's vector steps) for the bits of
// the rows one after another.
TEST(AmxTest, InstructionGivesInterleavedRowsTheBitsOfRowsOneAfterAnother) {
  SKIP_WITHOUT_THE_INSTRUCTION();
  const int64_t k = 2 * 512 + 64, rows = 48;
  const auto x = random_values(static_cast<size_t>(40 * k), 55);
  const auto w = random_bf16(static_cast<size_t>(rows * k), 56);
  for (const int64_t group : {int64_t{8}, int64_t{16}, cpu::kColumns}) {
    std::vector<uint16_t> lined(w.size());
    cpu::interleave_rows(w.data(), DType::kBF16, k, group, 0, rows, lined.data());
    for (const int64_t tokens : {1, 2, 3, 4, 5, 8, 9, 40}) {
      std::vector<float> want(static_cast<size_t>(tokens * rows)), y(want.size());
      cpu::amx::instructions()->matmul_rows(x.data(), tokens, k, w.data(), rows, want.data(), rows, 1);
      cpu::amx::instructions()->matmul_rows(x.data(), tokens, k, lined.data(), rows, y.data(), rows, group);
      ASSERT_EQ(y, want) << "group " << group << " tokens " << tokens;
    }
  }
}

// Dispatch sends bf16 weights to the tiles where the CPU has them (and the target is
// AVX-512): the library's matmul gives the tiles' bits, alone and in a batch.
TEST(AmxTest, DispatchedMatmulTakesTheTiles) {
  SKIP_WITHOUT_THE_INSTRUCTION();
  ASSERT_TRUE(cpu::amx_active()) << cpu::isa_name() << " (TESSERA_AMX=0 or TESSERA_BF16_DOT=0 set?)";
  const int64_t k = 1061, rows = 21;
  const auto x = random_values(static_cast<size_t>(40 * k), 49);
  const auto w = random_bf16(static_cast<size_t>(rows * k), 50);
  for (const int64_t tokens : {1, 40}) {
    std::vector<float> y(static_cast<size_t>(tokens * rows)), tiles(y.size());
    cpu::matmul_rows(x.data(), tokens, k, w.data(), DType::kBF16, rows, y.data(), rows);
    cpu::amx::instructions()->matmul_rows(x.data(), tokens, k, w.data(), rows, tiles.data(), rows, 1);
    EXPECT_EQ(y, tiles) << tokens << " tokens";
  }
}

// The peak loop runs and sums what it should: 4 x 16 x 16 x 32 products of 1 x 2^-24
// an iteration, each output taking 32 of them per iteration.
TEST(AmxTest, PeakLoopSumsItsProducts) {
  EXPECT_EQ(kernel::dot_loop<Emulated>(10), 10 * 32 * 0x1p-24f);
  SKIP_WITHOUT_THE_INSTRUCTION();
  EXPECT_EQ(cpu::amx::dot_loop(1000), 1000 * 32 * 0x1p-24f);
}

// The ladder of the GEMM's inner loop (its benchmark's rungs) runs and sums what it
// should: each block's steps (16, or 5 with a tuning of 5 chunks) of 32 products of 1 x
// 2^-24 into every output, from zeros at rungs 0-2 and 5; at rung 3 added to acc, where
// the last of five passes took the first pass's row pair (p mod 4), so its C tiles hold
// two blocks' sums; rung 4 (loads alone) leaves zeros. The instruction's ladder blocks as
// the switches of the environment say (ladder_flops tells how many steps).
TEST(AmxTest, LadderSumsItsProducts) {
  std::vector<uint16_t> a(static_cast<size_t>(kernel::kPackedRowElements), 0x3F80);     // 1
  std::vector<uint32_t> b(static_cast<size_t>(kernel::kLadderBElements), 0x33803380u);  // pairs of 2^-24
  for (const kernel::GemmTuning& tuning : {kernel::GemmTuning{}, kernel::GemmTuning{5, false}}) {
    std::vector<float> acc(static_cast<size_t>(kernel::kAccFloats), 0.0f);
    const float block = static_cast<float>(tuning.k_chunks) * 0x1p-19f;  // steps x 32 x 2^-24
    for (const int rung : {0, 1, 2, 5})
      EXPECT_EQ(kernel::ladder<Emulated>(rung, 1, a.data(), b.data(), acc.data(), tuning), block)
          << "rung " << rung << " k_chunks " << tuning.k_chunks;
    EXPECT_EQ(kernel::ladder<Emulated>(3, 5, a.data(), b.data(), acc.data(), tuning), 2 * block)
        << "k_chunks " << tuning.k_chunks;
    EXPECT_EQ(kernel::ladder<Emulated>(4, 1, a.data(), b.data(), acc.data(), tuning), 0.0f);
  }
  SKIP_WITHOUT_THE_INSTRUCTION();
  const int64_t steps =
      cpu::amx::ladder_flops(1) / (kernel::kTokBlock / (2 * kernel::kTileTokens)) / cpu::amx::dot_loop_flops(1);
  const float block = static_cast<float>(steps) * 0x1p-19f;
  for (const int rung : {0, 1, 2, 5}) EXPECT_EQ(cpu::amx::ladder(rung, 2), block) << "rung " << rung;
  EXPECT_EQ(cpu::amx::ladder(3, 5), 2 * block);  // this thread's first rung-3 call: its acc was zeros
  EXPECT_EQ(cpu::amx::ladder(4, 1), 0.0f);
}

// The GEMM without its tiles runs its work around them, writing every output (with
// what acc held: finite).
TEST(AmxTest, OutsideRunsWithoutTheTiles) {
  if (!cpu::amx::outside_runs()) GTEST_SKIP() << "this CPU has no AVX-512 BF16 (or no AVX2)";
  const int64_t tokens = 40, k = 1061, rows = 53;
  const auto x = random_values(static_cast<size_t>(tokens * k), 45);
  const auto w = random_bf16(static_cast<size_t>(rows * k), 46);
  std::vector<float> y(static_cast<size_t>(tokens * rows), std::nanf(""));
  cpu::amx::outside(x.data(), tokens, k, w.data(), rows, y.data(), rows);
  EXPECT_TRUE(std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); }));
}

}  // namespace
}  // namespace tessera
