// The matmul of 16-bit weights in column order (backend/cpu/columns_kernel.h), for bf16
// (vdpbf16ps) and f16 (FMAs on F16C's widening, on AVX-512 and on AVX2 in the same order),
// and for bf16 on AVX2 (FMAs on the weights widened, element by element):
//   - every output is summed in the order the kernel states (one lane along k), bitwise,
//     for one token and many, across k blocks and partial columns, run with the portable
//     emulations (bf16_dot_emulated.h, f16_columns_emulated.h) on every machine;
//   - weights in the column layout (weight_layout.h's kColumns) or in groups of lines
//     give the bits of rows one after another;
//   - the instructions give bitwise what the emulations give, whole and in the GEMM's
//     pieces, and the dispatched matmul takes them: bf16 on a CPU with AVX-512 BF16 and
//     without AMX (the Zen 5 dev VM), f16 on any AVX-512 CPU, and with dispatch narrowed
//     to AVX2 both on any AVX2 CPU; others skip, saying so.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/bf16_columns_avx2.h"
#include "backend/cpu/bf16_columns_avx2_emulated.h"
#include "backend/cpu/bf16_dot.h"
#include "backend/cpu/bf16_dot_emulated.h"
#include "backend/cpu/f16_columns.h"
#include "backend/cpu/f16_columns_emulated.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/weight_layout.h"
#include "core/check.h"
#include "hwy/aligned_allocator.h"
#include "hwy/targets.h"
#include "support/random_tensors.h"

// After bf16_matmul.h, core/check.h, kernels.h and the allocator, as the kernel asks.
#include "backend/cpu/columns_kernel.h"

namespace tessera {
namespace {

namespace columns = cpu::columns;
using testing::random_values;

// What differs between the kernels: the dtype, the emulation, the instructions, the target
// dispatch takes them on (0: the one it chose), and one step of the stated order.
struct Bf16 {
  using Ops = cpu::bf16_dot::EmulatedOps;
  static constexpr DType kDType = DType::kBF16;
  static constexpr int64_t kTarget = 0;
  static const cpu::bf16::Matmul* instructions() { return cpu::bf16_dot::columns(); }
  static bool dispatched() { return cpu::bf16_dot_active() && !cpu::amx_active() && cpu::bf16_dot::columns_enabled(); }
  // The sum of w and x's pair p, the odd product first, x rounded to bf16.
  static float step(float acc, const uint16_t* w, const float* x, int64_t k, int64_t p) {
    for (const int64_t i : {2 * p + 1, 2 * p}) {  // past k: the zero padding
      const float wi = i < k ? Ops::widen(w[i]) : 0.0f, xi = i < k ? Ops::widen(Ops::round(x[i])) : 0.0f;
      acc = Ops::flush(std::fma(wi, xi, acc));
    }
    return acc;
  }
};
struct F16 {
  using Ops = cpu::f16_columns::EmulatedOps;
  static constexpr DType kDType = DType::kF16;
  static constexpr int64_t kTarget = 0;
  static const cpu::bf16::Matmul* instructions() { return cpu::f16_columns::instructions(); }
  static bool dispatched() { return cpu::columns_active(kDType); }
  static float step(float acc, const uint16_t* w, const float* x, int64_t k, int64_t i) {
    return i < k ? std::fma(Ops::widen(w[i]), x[i], acc) : std::fma(0.0f, 0.0f, acc);
  }
};
// AVX2's f16: the same steps and order as AVX-512's, so the same bits, in tiles of one
// column as the AVX2 kernel takes them.
struct F16Avx2 : F16 {
  struct Ops : cpu::f16_columns::EmulatedOps {
    static constexpr int kTileColumns = 1;
  };
  static constexpr int64_t kTarget = HWY_AVX2;
  static const cpu::bf16::Matmul* instructions() { return cpu::f16_columns::avx2_instructions(); }
};
// AVX2's bf16: each pair's even element, then its odd one, widened, x as it is.
struct Bf16Avx2 {
  using Ops = cpu::bf16_columns_avx2::EmulatedOps;
  static constexpr DType kDType = DType::kBF16;
  static constexpr int64_t kTarget = HWY_AVX2;
  static const cpu::bf16::Matmul* instructions() { return cpu::bf16_columns_avx2::instructions(); }
  static bool dispatched() { return cpu::columns_active(kDType); }
  static float step(float acc, const uint16_t* w, const float* x, int64_t k, int64_t p) {
    for (const int64_t i : {2 * p, 2 * p + 1})  // past k: the zero padding
      acc = i < k ? std::fma(Ops::widen(w[i]), x[i], acc) : std::fma(0.0f, 0.0f, acc);
    return acc;
  }
};

template <typename D>
class ColumnsTest : public ::testing::Test {};
using Dtypes = ::testing::Types<Bf16, F16, F16Avx2, Bf16Avx2>;
TYPED_TEST_SUITE(ColumnsTest, Dtypes);

// n random weights of the dtype (their bits).
template <typename D>
std::vector<uint16_t> random_weights(size_t n, uint32_t seed) {
  const auto values = random_values(n, seed);
  std::vector<uint16_t> out(n);
  cpu::from_f32(values.data(), static_cast<int64_t>(n), D::kDType, out.data());
  return out;
}

// The kernel run with the emulation, as the instructions' file runs it: x packed token by
// token, then every column, decode's hint 2,048 bytes ahead for the column layout.
template <typename D>
std::vector<float> emulated_matmul(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows,
                                   int64_t group = 1) {
  using Ops = typename D::Ops;
  std::vector<float> y(static_cast<size_t>(tokens * rows), std::nanf(""));
  std::vector<uint32_t> xp(static_cast<size_t>(tokens * columns::words<Ops>(k)));
  columns::pack_x<Ops>(x, k, 0, tokens, xp.data());
  auto scratch = hwy::AllocateAligned<uint16_t>(columns::kScratch<Ops>);
  columns::matmul<Ops>(xp.data(), tokens, {w, k, rows, group}, y.data(), rows, scratch.get(),
                       group == cpu::kColumns ? 2048 : 0);
  return y;
}

// One output in the order the kernel states: unit after unit from zero, nothing blocked.
template <typename D>
float in_stated_order(const float* x, const uint16_t* w, int64_t k) {
  float acc = 0.0f;
  for (int64_t u = 0; u < columns::units<typename D::Ops>(k); ++u) acc = D::step(acc, w, x, k, u);
  return acc;
}

// Every output of the emulated kernel is the stated sum, bitwise: one token and several
// (a partial tile of tokens), k within one block and across three (sums from y between
// blocks: fails when a block after the first starts from zero), a k not whole chunks (the
// copied columns' zeros), rows not whole columns or groups of four (partial tiles), and a
// k from which a GEMM takes its groups in pairs (fails when the pair's second group starts
// its first block from y).
TYPED_TEST(ColumnsTest, EachOutputIsItsSumAlongKInTheStatedOrder) {
  for (const int64_t k : {int64_t{64}, int64_t{1061}, 2 * columns::kKcElements + 96, columns::kPairedK + 96}) {
    const int64_t rows = 85, tokens = 20;
    const auto x = random_values(static_cast<size_t>(tokens * k), 61);
    const auto w = random_weights<TypeParam>(static_cast<size_t>(rows * k), 62);
    for (const int64_t count : {1, 7, 20}) {
      const auto y = emulated_matmul<TypeParam>(x.data(), count, k, w.data(), rows);
      for (int64_t t = 0; t < count; ++t)
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(y[static_cast<size_t>(t * rows + r)],
                    in_stated_order<TypeParam>(x.data() + t * k, w.data() + r * k, k))
              << "k " << k << " tokens " << count << " token " << t << " row " << r;
    }
  }
}

// The column layout and groups of lines give the bits of rows one after another (48 rows:
// three columns; 56: three and a half, lines only).
TYPED_TEST(ColumnsTest, LayoutsGiveTheBitsOfRowsOneAfterAnother) {
  const int64_t k = 2 * columns::kKcElements + 64;
  for (const int64_t rows : {48, 56}) {
    const auto x = random_values(static_cast<size_t>(20 * k), 63);
    const auto w = random_weights<TypeParam>(static_cast<size_t>(rows * k), 64);
    for (const int64_t group : {int64_t{4}, int64_t{8}, int64_t{16}, cpu::kColumns}) {
      if (!cpu::can_interleave(TypeParam::kDType, rows, k, group)) {
        ASSERT_NE(rows % cpu::group_rows(group), 0) << "group " << group;
        continue;
      }
      std::vector<uint16_t> laid(w.size());
      cpu::interleave_rows(w.data(), TypeParam::kDType, k, group, 0, rows, laid.data());
      ASSERT_NE(laid, w);
      for (const int64_t tokens : {1, 3, 20}) {
        const auto want = emulated_matmul<TypeParam>(x.data(), tokens, k, w.data(), rows);
        ASSERT_EQ(emulated_matmul<TypeParam>(x.data(), tokens, k, laid.data(), rows, group), want)
            << "rows " << rows << " group " << group << " tokens " << tokens;
        if (TypeParam::instructions() == nullptr) continue;
        std::vector<float> y(want.size());
        TypeParam::instructions()->matmul_rows(x.data(), tokens, k, laid.data(), rows, y.data(), rows, group);
        ASSERT_EQ(y, want) << "the instructions, rows " << rows << " group " << group << " tokens " << tokens;
      }
    }
  }
}

// The column layout holds only 16-bit rows in whole columns of whole lines, and an
// embedding's lookup reads a row back from it.
TYPED_TEST(ColumnsTest, ColumnLayoutTakesWholeColumnsAndGivesRowsBack) {
  const DType dtype = TypeParam::kDType;
  EXPECT_FALSE(cpu::can_interleave(DType::kF32, 32, 64, cpu::kColumns));
  EXPECT_FALSE(cpu::can_interleave(dtype, 40, 64, cpu::kColumns));
  EXPECT_FALSE(cpu::can_interleave(dtype, 32, 48, cpu::kColumns));
  const int64_t rows = 32, k = 96, unit = TypeParam::Ops::kUnit;
  const auto w = random_weights<TypeParam>(static_cast<size_t>(rows * k), 65);
  ASSERT_TRUE(cpu::can_interleave(dtype, rows, k, cpu::kColumns));
  std::vector<uint16_t> laid(w.size());
  cpu::interleave_rows(w.data(), dtype, k, cpu::kColumns, 0, rows, laid.data());
  // Unit u of row r at 16 u + r units of its column: row 21 is row 5 of column 1.
  EXPECT_EQ(laid[static_cast<size_t>(16 * k + unit * (16 * 3 + 5))], w[static_cast<size_t>(21 * k + unit * 3)]);
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> want(static_cast<size_t>(k)), got(want.size());
    cpu::to_f32(w.data() + r * k, dtype, k, want.data());
    cpu::interleaved_row_to_f32(laid.data(), dtype, k, cpu::kColumns, r, got.data());
    ASSERT_EQ(got, want) << "row " << r;
  }
}

// The instructions give the emulated bits, for a call as matmul_rows takes it and cut into
// the pieces CpuDevice cuts a GEMM into (tokens at the split's blocks, rows at its rows),
// each from the call's one packed x.
TYPED_TEST(ColumnsTest, InstructionsGiveTheEmulatedBitsWholeAndInPieces) {
  if (TypeParam::instructions() == nullptr) GTEST_SKIP() << "this CPU lacks the instructions";
  const cpu::bf16::Matmul& m = *TypeParam::instructions();
  const int64_t k = 1061, rows = 150, tokens = 2 * m.split_tokens + 17;
  const auto x = random_values(static_cast<size_t>(tokens * k), 66);
  const auto w = random_weights<TypeParam>(static_cast<size_t>(rows * k), 67);
  for (const int64_t count : {int64_t{1}, int64_t{5}, tokens}) {
    const auto want = emulated_matmul<TypeParam>(x.data(), count, k, w.data(), rows);
    std::vector<float> y(want.size());
    m.matmul_rows(x.data(), count, k, w.data(), rows, y.data(), rows, 1);
    ASSERT_EQ(y, want) << count << " tokens";
  }
  const auto want = emulated_matmul<TypeParam>(x.data(), tokens, k, w.data(), rows);
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

// Dispatch sends the dtype's weights to the column order where the CPU has the
// instructions (and, for bf16, no AMX), and lays them out in columns for it.
TYPED_TEST(ColumnsTest, DispatchedMatmulTakesTheColumnOrder) {
  if (TypeParam::instructions() == nullptr) GTEST_SKIP() << "this CPU lacks the instructions";
  if (TypeParam::kTarget != 0) hwy::SetSupportedTargetsForTest(TypeParam::kTarget);
  const bool dispatched = TypeParam::dispatched();
  if (dispatched) {
    const DType dtype = TypeParam::kDType;
    EXPECT_EQ(cpu::matmul_row_group(dtype), cpu::kColumns);
    const int64_t k = 1061, rows = 21;
    const auto x = random_values(static_cast<size_t>(40 * k), 68);
    const auto w = random_weights<TypeParam>(static_cast<size_t>(rows * k), 69);
    for (const int64_t tokens : {1, 40}) {
      std::vector<float> y(static_cast<size_t>(tokens * rows));
      cpu::matmul_rows(x.data(), tokens, k, w.data(), dtype, rows, y.data(), rows);
      EXPECT_EQ(y, emulated_matmul<TypeParam>(x.data(), tokens, k, w.data(), rows)) << tokens << " tokens";
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  if (!dispatched)
    GTEST_SKIP() << "this process takes another order (AMX, or TESSERA_BF16_COLUMNS / TESSERA_F16_COLUMNS=0)";
}

}  // namespace
}  // namespace tessera
