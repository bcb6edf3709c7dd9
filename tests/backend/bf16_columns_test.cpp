// The matmul of bf16 weights in column order (backend/cpu/bf16_columns_kernel.h):
//   - every output is summed in the order the kernel states (one lane along k), bitwise,
//     for one token and many, across k blocks and partial columns, run with the portable
//     emulation of the instruction (bf16_dot_emulated.h) on every machine;
//   - weights in the column layout (weight_layout.h's kPairColumns) or in groups of lines
//     give the bits of rows one after another;
//   - the instruction gives bitwise what the emulation gives, whole and in the GEMM's
//     pieces, and the dispatched matmul takes it: only on a CPU with AVX-512 BF16 and
//     without AMX (the Zen 5 dev VM); others skip, saying so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/bf16_reference.h"
#include "backend/cpu/bf16_dot.h"
#include "backend/cpu/bf16_dot_emulated.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/weight_layout.h"
#include "hwy/aligned_allocator.h"
#include "support/random_tensors.h"

// After bf16_matmul.h (through bf16_dot.h), as the kernel asks.
#include "backend/cpu/bf16_columns_kernel.h"

namespace tessera {
namespace {

using Emulated = cpu::bf16_dot::EmulatedOps;
namespace kernel = cpu::bf16_dot::column_kernel;
using testing::random_bf16;
using testing::random_values;

#define SKIP_WITHOUT_THE_COLUMNS()                                                         \
  if (cpu::bf16_dot::columns() == nullptr) GTEST_SKIP() << "this CPU has no AVX-512 BF16"; \
  static_assert(true)

// The kernel run with the emulation, as bf16_dot.cpp runs it with the instruction: x
// rounded token by token, then every column, decode's hint 2,048 bytes ahead.
std::vector<float> emulated_matmul(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows,
                                   int64_t group = 1) {
  std::vector<float> y(static_cast<size_t>(tokens * rows), std::nanf(""));
  std::vector<uint16_t> xp(static_cast<size_t>(tokens * kernel::padded_k(k)));
  kernel::pack_x<Emulated>(x, k, 0, tokens, xp.data());
  auto scratch = hwy::AllocateAligned<uint32_t>(kernel::kMaxColumns * kernel::kKcPairs * kernel::kColumn);
  kernel::matmul<Emulated>(reinterpret_cast<const uint32_t*>(xp.data()), tokens, {w, k, rows, group}, y.data(), rows,
                           scratch.get(), group == cpu::kPairColumns ? 2048 : 0);
  return y;
}

// One output in the order the kernel states: pair after pair, the odd product first.
float in_stated_order(const float* x, const uint16_t* w, int64_t k) {
  float acc = 0.0f;
  for (int64_t p = 0; 2 * p < k; ++p)
    for (const int64_t i : {2 * p + 1, 2 * p}) {  // past k: the zero padding
      const float wi = i < k ? Emulated::widen(w[i]) : 0.0f, xi = i < k ? Emulated::widen(Emulated::round(x[i])) : 0.0f;
      acc = Emulated::flush(std::fma(wi, xi, acc));
    }
  return acc;
}

// Every output of the emulated kernel is the stated sum, bitwise: one token and several
// (a partial tile of tokens), k within one block and across three (pairs from y between
// blocks: fails when a block after the first starts from zero), a k not whole chunks (the
// copied columns' zeros), and rows not whole columns or groups of four (partial tiles).
TEST(Bf16ColumnsTest, EachOutputIsItsSumAlongKInTheStatedOrder) {
  for (const int64_t k : {int64_t{64}, int64_t{1061}, 2 * 2 * kernel::kKcPairs + 96}) {
    const int64_t rows = 85, tokens = 20;
    const auto x = random_values(static_cast<size_t>(tokens * k), 61);
    const auto w = random_bf16(static_cast<size_t>(rows * k), 62);
    for (const int64_t count : {1, 7, 20}) {
      const auto y = emulated_matmul(x.data(), count, k, w.data(), rows);
      for (int64_t t = 0; t < count; ++t)
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(y[static_cast<size_t>(t * rows + r)], in_stated_order(x.data() + t * k, w.data() + r * k, k))
              << "k " << k << " tokens " << count << " token " << t << " row " << r;
    }
  }
}

// The column layout and groups of lines give the bits of rows one after another (48 rows:
// three columns; 56: three and a half, lines only).
TEST(Bf16ColumnsTest, LayoutsGiveTheBitsOfRowsOneAfterAnother) {
  const int64_t k = 2 * 2 * kernel::kKcPairs + 64;
  for (const int64_t rows : {48, 56}) {
    const auto x = random_values(static_cast<size_t>(20 * k), 63);
    const auto w = random_bf16(static_cast<size_t>(rows * k), 64);
    for (const int64_t group : {int64_t{4}, int64_t{8}, int64_t{16}, cpu::kPairColumns}) {
      if (!cpu::can_interleave(DType::kBF16, rows, k, group)) {
        ASSERT_NE(rows % cpu::group_rows(group), 0) << "rows " << rows << " group " << group;
        continue;
      }
      std::vector<uint16_t> laid(w.size());
      cpu::interleave_rows(w.data(), DType::kBF16, k, group, 0, rows, laid.data());
      ASSERT_NE(laid, w);
      for (const int64_t tokens : {1, 3, 20}) {
        const auto want = emulated_matmul(x.data(), tokens, k, w.data(), rows);
        ASSERT_EQ(emulated_matmul(x.data(), tokens, k, laid.data(), rows, group), want)
            << "rows " << rows << " group " << group << " tokens " << tokens;
        if (cpu::bf16_dot::columns() == nullptr) continue;
        std::vector<float> y(want.size());
        cpu::bf16_dot::columns()->matmul_rows(x.data(), tokens, k, laid.data(), rows, y.data(), rows, group);
        ASSERT_EQ(y, want) << "the instruction, rows " << rows << " group " << group << " tokens " << tokens;
      }
    }
  }
}

// The column layout holds only bf16 rows in whole columns of whole lines, and an
// embedding's lookup reads a row back from it.
TEST(Bf16ColumnsTest, ColumnLayoutTakesWholeColumnsAndGivesRowsBack) {
  EXPECT_FALSE(cpu::can_interleave(DType::kF16, 32, 64, cpu::kPairColumns));
  EXPECT_FALSE(cpu::can_interleave(DType::kF32, 32, 64, cpu::kPairColumns));
  EXPECT_FALSE(cpu::can_interleave(DType::kBF16, 40, 64, cpu::kPairColumns));
  EXPECT_FALSE(cpu::can_interleave(DType::kBF16, 32, 48, cpu::kPairColumns));
  const int64_t rows = 32, k = 96;
  const auto w = random_bf16(static_cast<size_t>(rows * k), 65);
  ASSERT_TRUE(cpu::can_interleave(DType::kBF16, rows, k, cpu::kPairColumns));
  std::vector<uint16_t> laid(w.size());
  cpu::interleave_rows(w.data(), DType::kBF16, k, cpu::kPairColumns, 0, rows, laid.data());
  // Pair p of row r at u32 16 p + r of its column: row 21 is row 5 of column 1.
  EXPECT_EQ(laid[static_cast<size_t>(16 * k + 2 * (16 * 3 + 5) + 1)], w[static_cast<size_t>(21 * k + 2 * 3 + 1)]);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> want(static_cast<size_t>(k)), got(want.size());
    cpu::to_f32(w.data() + r * k, DType::kBF16, k, want.data());
    cpu::interleaved_row_to_f32(laid.data(), DType::kBF16, k, cpu::kPairColumns, r, got.data());
    ASSERT_EQ(got, want) << "row " << r;
  }
}

// The instruction gives the emulated bits, for a call as matmul_rows takes it and cut into
// the pieces CpuDevice cuts a GEMM into (tokens at the split's blocks, rows at its rows),
// each from the call's one packed x.
TEST(Bf16ColumnsTest, InstructionGivesTheEmulatedBitsWholeAndInPieces) {
  SKIP_WITHOUT_THE_COLUMNS();
  const cpu::bf16::Matmul& m = *cpu::bf16_dot::columns();
  const int64_t k = 1061, rows = 150, tokens = 2 * m.split_tokens + 17;
  const auto x = random_values(static_cast<size_t>(tokens * k), 66);
  const auto w = random_bf16(static_cast<size_t>(rows * k), 67);
  for (const int64_t count : {int64_t{1}, int64_t{5}, tokens}) {
    const auto want = emulated_matmul(x.data(), count, k, w.data(), rows);
    std::vector<float> y(want.size());
    m.matmul_rows(x.data(), count, k, w.data(), rows, y.data(), rows, 1);
    ASSERT_EQ(y, want) << count << " tokens";
  }
  const auto want = emulated_matmul(x.data(), tokens, k, w.data(), rows);
  auto packed = hwy::AllocateAligned<float>(static_cast<size_t>(m.packed_floats(tokens, k)));
  m.pack_x(x.data(), tokens, k, 0, 100, packed.get());  // two ranges, as two threads would
  m.pack_x(x.data(), tokens, k, 100, tokens, packed.get());
  std::vector<float> pieces(want.size(), std::nanf(""));
  for (int64_t t0 = 0; t0 < tokens; t0 += m.split_tokens)
    for (int64_t r0 = 0; r0 < rows; r0 += m.split_rows)
      m.matmul_rows_packed(packed.get(), tokens, t0, std::min(tokens, t0 + m.split_tokens), k, w.data() + r0 * k,
                           std::min(m.split_rows, rows - r0), pieces.data() + r0, rows, 1);
  EXPECT_EQ(pieces, want);
}

// Dispatch sends bf16 weights to the column order where the CPU has AVX-512 BF16 and no
// AMX, and lays them out in columns for it.
TEST(Bf16ColumnsTest, DispatchedMatmulTakesTheColumnOrder) {
  SKIP_WITHOUT_THE_COLUMNS();
  if (cpu::amx_active()) GTEST_SKIP() << "this CPU has AMX-BF16: bf16 weights take the tiles (amx_test.cpp)";
  if (!cpu::bf16_dot::columns_enabled()) GTEST_SKIP() << "TESSERA_BF16_COLUMNS=0: the row order (bf16_dot_test.cpp)";
  ASSERT_TRUE(cpu::bf16_dot_active()) << cpu::isa_name();
  EXPECT_EQ(cpu::matmul_row_group(DType::kBF16), cpu::kPairColumns);
  const int64_t k = 1061, rows = 21;
  const auto x = random_values(static_cast<size_t>(40 * k), 68);
  const auto w = random_bf16(static_cast<size_t>(rows * k), 69);
  for (const int64_t tokens : {1, 40}) {
    std::vector<float> y(static_cast<size_t>(tokens * rows));
    cpu::matmul_rows(x.data(), tokens, k, w.data(), DType::kBF16, rows, y.data(), rows);
    EXPECT_EQ(y, emulated_matmul(x.data(), tokens, k, w.data(), rows)) << tokens << " tokens";
  }
}

}  // namespace
}  // namespace tessera
