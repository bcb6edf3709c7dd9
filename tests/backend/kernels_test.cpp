// CPU kernels and CpuDevice ops against plain double-precision loops, over
// sizes that leave SIMD remainders, and the promise that results do not depend
// on the thread count.
#include "backend/cpu/kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/bf16_dot_emulated.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/weight_layout.h"
#include "hwy/aligned_allocator.h"
#include "hwy/targets.h"
#include "support/random_tensors.h"
#include "support/rows_alone.h"

namespace tessera {
namespace {

using testing::encode;
using testing::random_values;

class MatmulTest : public ::testing::TestWithParam<DType> {};

// x as the matmul multiplies it on the target dispatch chose now: rounded to bf16 for
// bf16 weights where it takes AVX-512 BF16 dot products (bf16_dot_test.cpp tests that
// path bitwise), else as given.
std::vector<float> x_as_multiplied(const std::vector<float>& x, DType w_dtype) {
  if (w_dtype != DType::kBF16 || !cpu::bf16_dot_active()) return x;
  std::vector<float> out(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    out[i] = cpu::bf16_dot::EmulatedOps::widen(cpu::bf16_dot::EmulatedOps::round(x[i]));
  return out;
}

TEST_P(MatmulTest, MatchesNaiveLoopOnRaggedSizes) {
  for (const int64_t k : {1, 7, 16, 33, 64, 130}) {
    for (const int64_t rows : {1, 3, 4, 9}) {
      for (const int64_t tokens : {1, 2, 3, 5, 70}) {
        auto x = random_values(static_cast<size_t>(tokens * k), 1);
        auto w = random_values(static_cast<size_t>(rows * k), 2);
        const auto bytes = encode(w, GetParam());
        std::vector<float> y(static_cast<size_t>(tokens * rows));
        cpu::matmul_rows(x.data(), tokens, k, bytes.data(), GetParam(), rows, y.data(), rows);
        const auto xm = x_as_multiplied(x, GetParam());
        for (int64_t t = 0; t < tokens; ++t) {
          for (int64_t r = 0; r < rows; ++r) {
            double want = 0;
            for (int64_t i = 0; i < k; ++i) want += double{xm[t * k + i]} * w[r * k + i];
            ASSERT_NEAR(y[t * rows + r], want, 1e-5 * k) << "k=" << k << " rows=" << rows << " t=" << t;
          }
        }
      }
    }
  }
}

// Calls fn(target, f32 lanes) with dispatch narrowed to each x86 instruction set that
// this CPU supports and the build compiled, then restores it; returns how many ran.
template <typename Fn>
int for_each_target(Fn&& fn) {
  struct Target {
    int64_t bit;
    size_t lanes;
  };
  int targets_run = 0;
  const int64_t supported = hwy::SupportedTargets();  // before SetSupportedTargetsForTest narrows it
  for (const Target target : {Target{HWY_AVX3, 16}, Target{HWY_AVX2, 8}, Target{HWY_SSE4, 4}, Target{HWY_SSSE3, 4},
                              Target{HWY_EMU128, 4}, Target{HWY_SCALAR, 1}}) {
    if ((supported & target.bit) == 0 || (HWY_TARGETS & target.bit) == 0) continue;
    hwy::SetSupportedTargetsForTest(target.bit);
    EXPECT_EQ(std::string(cpu::isa_name()), hwy::TargetName(target.bit));
    fn(target.bit, target.lanes);
    ++targets_run;
  }
  hwy::SetSupportedTargetsForTest(0);
  return targets_run;
}

// Every instruction set this CPU supports computes the same products (within rounding).
TEST_P(MatmulTest, EveryCompiledTargetAgrees) {
  const int64_t tokens = 5, k = 67, rows = 9;
  auto x = random_values(static_cast<size_t>(tokens * k), 14);
  auto w = random_values(static_cast<size_t>(rows * k), 15);
  const auto bytes = encode(w, GetParam());
  const int targets_run = for_each_target([&](int64_t target, size_t) {
    std::vector<float> y(static_cast<size_t>(tokens * rows));
    cpu::matmul_rows(x.data(), tokens, k, bytes.data(), GetParam(), rows, y.data(), rows);
    const auto xm = x_as_multiplied(x, GetParam());
    for (int64_t t = 0; t < tokens; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double want = 0;
        for (int64_t i = 0; i < k; ++i) want += double{xm[t * k + i]} * w[r * k + i];
        ASSERT_NEAR(y[t * rows + r], want, 1e-4) << hwy::TargetName(target);
      }
  });
  EXPECT_GE(targets_run, 2);
}

// One output summed in the order matmul.cpp states, for `lanes` f32 lanes: lane j of the
// accumulator takes chunk after chunk by multiply-adds, fused where the target has FMA
// (a bf16 chunk: its even-indexed elements, then its odd-indexed ones), the lanes are
// added as a halving tree, then the elements past the last whole chunk one by one, each
// by a fused multiply-add.
float sum_in_stated_order(const float* x, const float* w, int64_t k, size_t lanes, bool fused, DType dtype) {
  const auto l = static_cast<int64_t>(lanes);
  const int64_t per_chunk = dtype == DType::kBF16 ? 2 : 1;
  const int64_t k_vec = k / (per_chunk * l) * (per_chunk * l);
  std::vector<float> acc(lanes, 0.0f);
  for (int64_t i = 0; i < k_vec; i += per_chunk * l)
    for (int64_t v = 0; v < per_chunk; ++v)
      for (int64_t j = 0; j < l; ++j) {
        const int64_t e = per_chunk == 2 ? i + 2 * j + v : i + j;
        float& a = acc[static_cast<size_t>(j)];
        if (fused) {
          a = std::fma(w[e], x[e], a);
        } else {
          const float product = w[e] * x[e];
          a = product + a;
        }
      }
  for (size_t h = lanes / 2; h >= 1; h /= 2)
    for (size_t j = 0; j < h; ++j) acc[j] = acc[j] + acc[j + h];
  float sum = acc[0];
  for (int64_t i = k_vec; i < k; ++i) sum = std::fma(w[i], x[i], sum);
  return sum;
}

// Decode (1 token) and the GEMM (40 tokens) give, on every target, bitwise the sums that
// matmul.cpp's stated order gives: 21 rows take every decode tile size and the last of
// them a partial GEMM panel; k = 1085 leaves a tail, and an odd number of chunks on every
// target (271, 135, 67 of 4, 8, 16 lanes), so decode's steps of two chunks end with one.
TEST_P(MatmulTest, SumsInTheStatedOrderOnEveryTarget) {
  const int64_t tokens = 40, k = 2 * 512 + 61, rows = 21;
  const auto x = random_values(static_cast<size_t>(tokens * k), 18);
  auto w = random_values(static_cast<size_t>(rows * k), 19);
  const auto bytes = encode(w, GetParam());
  const int targets_run = for_each_target([&](int64_t target, size_t lanes) {
    const bool fused = target == HWY_AVX3 || target == HWY_AVX2;
    // bf16 weights on AVX-512 BF16 follow bf16_dot_kernel.h's or columns_kernel.h's
    // order instead, 16-bit weights on AVX-512 and AVX2 columns_kernel.h's, tested bitwise
    // in bf16_dot_test.cpp and columns_test.cpp.
    if (GetParam() == DType::kBF16 && cpu::bf16_dot_active()) return;
    if (GetParam() != DType::kF32 && cpu::columns_active(GetParam())) return;
    for (const int64_t count : {int64_t{1}, tokens}) {
      std::vector<float> y(static_cast<size_t>(count * rows));
      cpu::matmul_rows(x.data(), count, k, bytes.data(), GetParam(), rows, y.data(), rows);
      for (int64_t t = 0; t < count; ++t)
        for (int64_t r = 0; r < rows; ++r)
          ASSERT_EQ(y[t * rows + r],
                    sum_in_stated_order(x.data() + t * k, w.data() + r * k, k, lanes, fused, GetParam()))
              << hwy::TargetName(target) << " tokens " << count << " t " << t << " row " << r;
    }
  });
  EXPECT_GE(targets_run, 2);
}

// Attention's scores (dot_rows: on AVX-512 tiles of 4 rows x 4 tokens summed in one tree,
// tiles of a vector's lanes of rows a token at a time for the tokens left, then smaller
// tiles for the rows left) sum in the same stated order on every target, whatever the
// weights' dtype: head sizes of 64 and 128 and one with a tail past the last chunk; 37 rows
// leave rows past the whole tiles; 1, 4 and 5 tokens (a GQA group of queries; 5: a group
// of 4 and one left). Failed first with the 4 x 4 tiles' tails summed backwards.
TEST_P(MatmulTest, DotRowsSumInTheStatedOrderOnEveryTarget) {
  const int64_t rows = 37;
  for (const int64_t k : {int64_t{64}, int64_t{128}, int64_t{2 * 64 + 13}}) {
    const int64_t tokens = 5;
    const auto x = random_values(static_cast<size_t>(tokens * k), 20);
    auto w = random_values(static_cast<size_t>(rows * k), 21);
    const auto bytes = encode(w, GetParam());
    const int targets_run = for_each_target([&](int64_t target, size_t lanes) {
      const bool fused = target == HWY_AVX3 || target == HWY_AVX2;
      for (const int64_t count : {int64_t{1}, int64_t{4}, tokens}) {
        std::vector<float> y(static_cast<size_t>(count * rows));
        cpu::dot_rows(x.data(), count, k, bytes.data(), GetParam(), rows, y.data(), rows);
        for (int64_t t = 0; t < count; ++t)
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(y[t * rows + r],
                      sum_in_stated_order(x.data() + t * k, w.data() + r * k, k, lanes, fused, GetParam()))
                << hwy::TargetName(target) << " k " << k << " tokens " << count << " t " << t << " row " << r;
      }
    });
    EXPECT_GE(targets_run, 2);
  }
}

// A token's row is bitwise the same alone (decode tiles) as among 301 tokens (the
// blocked GEMM) or 20, at 1, 2 and 3 threads: both paths sum every output in the one
// order matmul.cpp states. 301 tokens make two GEMM token blocks, the second not a
// whole number of token panels; k = 1061 makes three k blocks and a tail past the last
// chunk; 53 rows leave a partial panel and an uneven split over threads.
// k = 8229 also takes smaller GEMM token blocks (matmul.cpp's token_block: 90 tokens with
// AVX2, four blocks of 301 tokens, the last partial).
void rows_alone_or_in_a_batch(DType dtype, int64_t k) {
  SCOPED_TRACE("k " + std::to_string(k));
  const int64_t tokens = 301, n = 53;
  const auto x = random_values(static_cast<size_t>(tokens * k), 16);
  auto w = random_values(static_cast<size_t>(n * k), 17);
  const auto bytes = encode(w, dtype);
  const TensorView weight{dtype, {n, k}, bytes.data()};
  testing::expect_rows_alone_or_in_a_batch(weight, x, 20);
}

TEST_P(MatmulTest, RowsAreBitwiseTheSameAloneOrInABatch) {
  for (const int64_t k : {int64_t{2 * 512 + 37}, int64_t{8192 + 37}}) rows_alone_or_in_a_batch(GetParam(), k);
}

// CpuDevice::matmul cuts a GEMM call's tokens at the split's token blocks as well as its
// rows at the split's rows: every piece, computed by itself from the call's one packed x,
// gives bitwise the outputs of the whole call, on every target. 301 tokens (a last block
// not whole) x 117 rows (a last piece not whole, pieces of 32 rows or of 64); k = 8229
// takes shorter token blocks in the f32 GEMM (matmul.cpp's token_block).
TEST_P(MatmulTest, PiecesOfTokensAndRowsAreBitwiseTheWholeCall) {
  const DType dtype = GetParam();
  const int64_t tokens = 301, n = 117;
  for (const int64_t k : {int64_t{2 * 512 + 37}, int64_t{8192 + 37}}) {
    const auto x = random_values(static_cast<size_t>(tokens * k), 18);
    auto w = random_values(static_cast<size_t>(n * k), 19);
    const auto bytes = encode(w, dtype);
    const auto row_bytes = static_cast<int64_t>(dtype_size(dtype)) * k;
    const int targets_run = for_each_target([&](int64_t target, size_t) {
      std::vector<float> whole(static_cast<size_t>(tokens * n)), pieces(whole.size(), std::nanf(""));
      cpu::matmul_rows(x.data(), tokens, k, bytes.data(), dtype, n, whole.data(), n);
      const cpu::MatmulSplit split = cpu::matmul_split(k, dtype);
      ASSERT_GT(split.tokens, 0);
      ASSERT_GT(split.rows, 0);
      auto packed = hwy::AllocateAligned<float>(static_cast<size_t>(cpu::matmul_packed_floats(tokens, k, dtype)));
      cpu::matmul_pack_x(x.data(), tokens, k, dtype, 0, tokens, packed.get());
      int calls = 0;
      for (int64_t t0 = 0; t0 < tokens; t0 += split.tokens)
        for (int64_t r0 = 0; r0 < n; r0 += split.rows, ++calls)
          cpu::matmul_rows_packed(packed.get(), x.data(), tokens, t0, std::min(tokens, t0 + split.tokens), k,
                                  bytes.data() + r0 * row_bytes, dtype, std::min(split.rows, n - r0),
                                  pieces.data() + r0, n);
      EXPECT_GT(calls, 2) << hwy::TargetName(target) << " k " << k;
      EXPECT_EQ(0, std::memcmp(pieces.data(), whole.data(), whole.size() * sizeof(float)))
          << hwy::TargetName(target) << " k " << k << ", pieces of " << split.tokens << " tokens x " << split.rows
          << " rows";
    });
    EXPECT_GE(targets_run, 2);
  }
}

// Weights interleaved in groups of 4, 8 and 16 rows (weight_layout.h), as CpuDevice::place
// lays them out, give on every target the bits of the rows one after another: one token's
// tiles (of the group's rows, read side by side with groups left over: 56 rows are 7
// groups of 8 and 14 of 4), a few tokens' tiles of 4 rows, and the GEMM, whole and cut
// into the split's pieces of rows (48 rows: three pieces of 16, or one and a half of 32).
TEST_P(MatmulTest, InterleavedRowsGiveTheBitsOfRowsOneAfterAnother) {
  const DType dtype = GetParam();
  const int64_t k = 2 * 512 + 64, tokens = 40;
  for (const int64_t rows : {48, 56}) {
    const auto x = random_values(static_cast<size_t>(tokens * k), 20);
    auto w = random_values(static_cast<size_t>(rows * k), 21);
    const auto bytes = encode(w, dtype);
    const auto row_bytes = static_cast<int64_t>(dtype_size(dtype)) * k;
    const int targets_run = for_each_target([&](int64_t target, size_t) {
      for (const int64_t group : {4, 8, 16}) {
        if (rows % group != 0) continue;
        ASSERT_TRUE(cpu::can_interleave(dtype, rows, k, group));
        std::vector<uint8_t> lined(bytes.size());
        cpu::interleave_rows(bytes.data(), dtype, k, group, 0, rows, lined.data());
        for (const int64_t count : {int64_t{1}, int64_t{3}, tokens}) {
          std::vector<float> want(static_cast<size_t>(count * rows)), y(want.size()),
              pieces(want.size(), std::nanf(""));
          cpu::matmul_rows(x.data(), count, k, bytes.data(), dtype, rows, want.data(), rows);
          cpu::matmul_rows(x.data(), count, k, lined.data(), dtype, rows, y.data(), rows, group);
          ASSERT_EQ(0, std::memcmp(y.data(), want.data(), want.size() * sizeof(float)))
              << hwy::TargetName(target) << " rows " << rows << " group " << group << " tokens " << count;
          const int64_t packed_floats = cpu::matmul_packed_floats(count, k, dtype);
          if (packed_floats == 0) continue;
          auto packed = hwy::AllocateAligned<float>(static_cast<size_t>(packed_floats));
          cpu::matmul_pack_x(x.data(), count, k, dtype, 0, count, packed.get());
          const int64_t step = std::min<int64_t>(cpu::matmul_split(k, dtype).rows, 16);
          for (int64_t r0 = 0; r0 < rows; r0 += step)
            cpu::matmul_rows_packed(packed.get(), x.data(), count, 0, count, k, lined.data() + r0 * row_bytes, dtype,
                                    std::min(step, rows - r0), pieces.data() + r0, rows, group);
          ASSERT_EQ(0, std::memcmp(pieces.data(), want.data(), want.size() * sizeof(float)))
              << hwy::TargetName(target) << " rows " << rows << " group " << group << " GEMM pieces of " << step
              << " rows";
        }
      }
    });
    EXPECT_GE(targets_run, 2);
  }
}

// A group that no path reads (not 4, 8 or 16, or rows that are no whole groups) stops the
// matmul, naming it, rather than reading rows from the wrong places.
TEST(MatmulDeathTest, GroupsTheKernelsCannotReadStopTheMatmul) {
  const int64_t k = 64;
  auto w = random_values(static_cast<size_t>(24 * k), 22);
  const auto bytes = encode(w, DType::kBF16);
  const std::vector<float> x(static_cast<size_t>(k), 1.0f);
  std::vector<float> y(24);
  EXPECT_DEATH(cpu::matmul_rows(x.data(), 1, k, bytes.data(), DType::kBF16, 24, y.data(), 24, 3), "in groups of 3");
  EXPECT_DEATH(cpu::matmul_rows(x.data(), 1, k, bytes.data(), DType::kBF16, 20, y.data(), 24, 8), "20 x 64 bf16");
  // The column layout is 16-bit weights' alone (and their column order's).
  const auto floats = encode(w, DType::kF32);
  EXPECT_DEATH(cpu::matmul_rows(x.data(), 1, k, floats.data(), DType::kF32, 16, y.data(), 24, cpu::kColumns),
               "16 x 64 f32 rows in groups of -16");
  // 16-bit weights in columns handed to a kernel that reads rows: this file's order, on the
  // SSE4 target (where the CPU has it), stops too.
  if ((hwy::SupportedTargets() & HWY_SSE4) != 0 && (HWY_TARGETS & HWY_SSE4) != 0) {
    EXPECT_DEATH(
        {
          hwy::SetSupportedTargetsForTest(HWY_SSE4);
          cpu::matmul_rows(x.data(), 1, k, bytes.data(), DType::kBF16, 16, y.data(), 24, cpu::kColumns);
        },
        "16 x 64 bf16 rows in groups of -16");
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, MatmulTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(KernelsTest, DotAxpyAndConversion) {
  const auto a = random_values(37, 3), b = random_values(37, 4);
  double want = 0;
  for (size_t i = 0; i < a.size(); ++i) want += double{a[i]} * b[i];
  EXPECT_NEAR(cpu::dot(a.data(), b.data(), 37), want, 1e-5);
  auto y = b;
  cpu::axpy(0.5f, a.data(), y.data(), 37);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_FLOAT_EQ(y[i], b[i] + 0.5f * a[i]);
  auto w = random_values(19, 5);
  const auto bytes = encode(w, DType::kBF16);
  std::vector<float> out(19);
  cpu::to_f32(bytes.data(), DType::kBF16, 19, out.data());
  EXPECT_EQ(out, w);
  std::vector<uint64_t> words(1001, 3);
  for (const int streams : {4, 8, 16}) EXPECT_EQ(cpu::read_sum(words.data(), 1001, streams), 3003u) << streams;
}

// read_sum adds every word once in both layouts: sizes of whole blocks or parts, and
// of a part or block short, so the tail is summed too.
TEST(KernelsTest, ReadSumAddsEveryWordOnce) {
  for (const int64_t n : {1, 1001, 16 * 512, 16 * 512 + 77, 100'003}) {
    std::vector<uint64_t> words(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) words[static_cast<size_t>(i)] = static_cast<uint64_t>(i) * 7 + 1;
    const uint64_t want = static_cast<uint64_t>(n) * static_cast<uint64_t>(n - 1) / 2 * 7 + static_cast<uint64_t>(n);
    for (const int streams : {4, 8, 16})
      EXPECT_EQ(cpu::read_sum(words.data(), n, streams, cpu::ReadLayout::kRows), want)
          << n << " words, rows " << streams;
    for (const int streams : {1, 2, 4})
      EXPECT_EQ(cpu::read_sum(words.data(), n, streams, cpu::ReadLayout::kParts), want)
          << n << " words, parts " << streams;
  }
}

// axpy_rows gives the bits of one axpy per row of x, in row order, for each of m rows of y
// (a and y rows strided, as attention's scores and heads), on every target, for dtypes and
// sizes that take its groups of 8, 4, 2 and 1 vectors (on 16 lanes and on 8), a scalar tail,
// and m that takes its blocks of 4, 2 and 1 rows of y; and the same bits over its columns in
// two calls. Fail first: the a of row j + 1 used for row j's second block of 4 columns failed
// it, and so did x's rows read n (the call's columns) apart instead of ldx.
TEST(KernelsTest, AxpyRowsIsAxpyRowByRow) {
  const int targets_run = for_each_target([&](int64_t target, size_t) {
    for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (const int64_t n : {1, 7, 16, 48, 64, 112, 128, 200, 248}) {
        for (const int64_t m : {1, 3, 4, 7}) {
          const int64_t rows = 13, lda = rows + 2, ldy = n + 3;
          const auto a = random_values(static_cast<size_t>(m * lda), 20);
          auto x = random_values(static_cast<size_t>(rows * n), 21);
          const auto bytes = encode(x, dtype);
          const auto start = random_values(static_cast<size_t>(m * ldy), 22);
          auto want = start, got = start;
          for (int64_t j = 0; j < m; ++j)
            for (int64_t r = 0; r < rows; ++r)
              cpu::axpy(a[static_cast<size_t>(j * lda + r)],
                        bytes.data() + r * n * static_cast<int64_t>(dtype_size(dtype)), dtype, want.data() + j * ldy,
                        n);
          cpu::axpy_rows(a.data(), lda, m, bytes.data(), dtype, n, rows, got.data(), ldy, n);
          EXPECT_EQ(got, want) << hwy::TargetName(target) << " " << dtype_name(dtype) << " n=" << n << " m=" << m;
          // The same in two calls over the columns on either side of c (rows of x n apart).
          const int64_t c = n / 3, size = static_cast<int64_t>(dtype_size(dtype));
          auto halves = start;
          cpu::axpy_rows(a.data(), lda, m, bytes.data(), dtype, n, rows, halves.data(), ldy, c);
          cpu::axpy_rows(a.data(), lda, m, bytes.data() + c * size, dtype, n, rows, halves.data() + c, ldy, n - c);
          EXPECT_EQ(halves, want) << hwy::TargetName(target) << " " << dtype_name(dtype) << " n=" << n << " m=" << m
                                  << ", in two calls";
        }
      }
    }
  });
  EXPECT_GE(targets_run, 1);
}

// argmax is std::max_element's index on every target: ties (the first wins, -0 and +0
// among them), the largest in the tail after the last whole vector, and rows with a NaN
// or an infinity anywhere, where max_element's answer depends on the NaN's place.
TEST(KernelsTest, ArgmaxIsMaxElementsIndex) {
  const int targets_run = for_each_target([&](int64_t target, size_t) {
    for (const int64_t n : {1, 3, 16, 17, 40, 1000, 4099}) {
      const auto base = random_values(static_cast<size_t>(n), static_cast<uint32_t>(60 + n));
      std::vector<std::vector<float>> rows{base};
      for (const int64_t at : {int64_t{0}, n / 2, n - 1}) {
        auto row = base;
        row[static_cast<size_t>(at)] = 5.0f;
        rows.push_back(row);
        row[static_cast<size_t>(n - 1 - at)] = 5.0f;  // a tie: the first 5 wins
        rows.push_back(row);
        for (const float odd : {std::nanf(""), INFINITY, -INFINITY}) {
          row = base;
          row[static_cast<size_t>(at)] = odd;
          rows.push_back(row);
        }
      }
      std::vector<float> zeros(static_cast<size_t>(n), 0.0f);
      zeros[0] = -0.0f;
      rows.push_back(zeros);
      rows.push_back(std::vector<float>(static_cast<size_t>(n), -3.0f));
      for (size_t r = 0; r < rows.size(); ++r) {
        const std::vector<float>& row = rows[r];
        EXPECT_EQ(cpu::argmax(row.data(), n), std::max_element(row.begin(), row.end()) - row.begin())
            << hwy::TargetName(target) << ", n " << n << ", row " << r;
      }
    }
  });
  EXPECT_GE(targets_run, 2);
  // CpuDevice::argmax: each row's own index.
  CpuDevice device(2);
  const int64_t rows = 3, n = 4099;
  const auto x = random_values(static_cast<size_t>(rows * n), 70);
  std::vector<int32_t> ids(static_cast<size_t>(rows), -1);
  device.argmax(x.data(), rows, n, ids.data());
  for (int64_t r = 0; r < rows; ++r)
    EXPECT_EQ(ids[static_cast<size_t>(r)],
              std::max_element(x.begin() + r * n, x.begin() + (r + 1) * n) - (x.begin() + r * n));
}

struct NaiveAttention {
  const float* q;  // [tokens, heads, hd]
  const float* k;  // [positions, kv_heads, hd]
  const float* v;
  int64_t tokens, pos0, heads, kv_heads, hd, window;
  float scale;
};

// Naive causal attention with grouped heads and an optional window, over contiguous keys and values.
std::vector<float> naive_attention(const NaiveAttention& a) {
  std::vector<float> out(static_cast<size_t>(a.tokens * a.heads * a.hd));
  const int64_t group = a.heads / a.kv_heads, stride = a.kv_heads * a.hd;
  for (int64_t t = 0; t < a.tokens; ++t) {
    for (int64_t h = 0; h < a.heads; ++h) {
      const int64_t pos = a.pos0 + t, kv = h / group;
      std::vector<double> p;
      for (int64_t j = 0; j <= pos; ++j) {
        const bool visible = a.window == 0 || pos - j < a.window;
        double s = 0;
        for (int64_t d = 0; d < a.hd; ++d)
          s += double{a.q[(t * a.heads + h) * a.hd + d]} * a.k[j * stride + kv * a.hd + d];
        p.push_back(visible ? std::exp(s * a.scale) : 0.0);
      }
      double sum = 0;
      for (const double x : p) sum += x;
      for (int64_t d = 0; d < a.hd; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= pos; ++j) acc += p[static_cast<size_t>(j)] * a.v[j * stride + kv * a.hd + d];
        out[static_cast<size_t>((t * a.heads + h) * a.hd + d)] = static_cast<float>(acc / sum);
      }
    }
  }
  return out;
}

// Attention over `layer` of `pages` for `count` tokens from pos0.
AttentionArgs paged_args(const KvPages& pages, int64_t layer, std::span<const int32_t> blocks, int64_t heads,
                         int64_t window, float scale, const float* q, float* out, int64_t count, int64_t pos0) {
  return AttentionArgs{.q = q,
                       .out = out,
                       .pages = &pages,
                       .layer = layer,
                       .blocks = blocks,
                       .tokens = count,
                       .pos0 = pos0,
                       .n_heads = heads,
                       .sliding_window = window,
                       .scale = scale};
}

// Keys and values stored through kv_store into pages whose block table is out of
// order (blocks of 3 positions), in each KV dtype, then attended over: the same
// as the naive loop over the values the dtype holds.
class PagedAttentionTest : public ::testing::TestWithParam<DType> {};

TEST_P(PagedAttentionTest, MatchesNaiveWithGroupsWindowAndScatteredBlocks) {
  const DType dtype = GetParam();
  CpuDevice device(2);
  const int64_t tokens = 5, pos0 = 3, heads = 4, kv_heads = 2, hd = 8, total = pos0 + tokens, layers = 2;
  const auto q = random_values(static_cast<size_t>(tokens * heads * hd), 6);
  auto k = random_values(static_cast<size_t>(total * kv_heads * hd), 7);
  auto v = random_values(static_cast<size_t>(total * kv_heads * hd), 8);
  KvPages pages{.dtype = dtype, .blocks = 6, .block_size = 3, .layers = layers, .n_kv_heads = kv_heads, .head_dim = hd};
  auto memory = device.alloc(static_cast<size_t>(pages.blocks) * pages.block_bytes());
  ASSERT_TRUE(memory.ok());
  pages.base = memory->data();
  const std::vector<int32_t> blocks = {4, 0, 5};
  // Written in two calls (a prompt, then a chunk), into layer 1.
  device.kv_store(pages, 1, blocks, 0, 4, k.data(), v.data());
  device.kv_store(pages, 1, blocks, 4, total - 4, k.data() + 4 * kv_heads * hd, v.data() + 4 * kv_heads * hd);
  encode(k, dtype);  // what the pages hold
  encode(v, dtype);
  for (const int64_t window : {0, 1, 3}) {
    std::vector<float> out(q.size());
    device.attention(paged_args(pages, 1, blocks, heads, window, 0.35f, q.data(), out.data(), tokens, pos0));
    const auto want = naive_attention({q.data(), k.data(), v.data(), tokens, pos0, heads, kv_heads, hd, window, 0.35f});
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], want[i], 1e-5) << "window " << window;
  }
}

// A token's attention output is bitwise the same in a 41-token prompt (units of a tile
// of 8 tokens and a KV head's whole group of query heads, taken by two threads in chunks;
// the last tile a partial one) as alone (one head a unit), at the start, middle and end of
// the prompt, with and without a sliding window; head_dim 40 leaves a tail past the last
// whole chunk; blocks of 20 positions give the score tiles of 16 keys and the rows left.
TEST_P(PagedAttentionTest, ATokenIsBitwiseTheSameAloneOrInAPrompt) {
  const DType dtype = GetParam();
  CpuDevice device(2);
  const int64_t tokens = 41, heads = 8, kv_heads = 2, hd = 40;
  const auto q = random_values(static_cast<size_t>(tokens * heads * hd), 21);
  const auto k = random_values(static_cast<size_t>(tokens * kv_heads * hd), 22);
  const auto v = random_values(static_cast<size_t>(tokens * kv_heads * hd), 23);
  KvPages pages{.dtype = dtype, .blocks = 4, .block_size = 20, .layers = 1, .n_kv_heads = kv_heads, .head_dim = hd};
  auto memory = device.alloc(static_cast<size_t>(pages.blocks) * pages.block_bytes());
  ASSERT_TRUE(memory.ok());
  pages.base = memory->data();
  const std::vector<int32_t> blocks = {3, 1, 0};
  device.kv_store(pages, 0, blocks, 0, tokens, k.data(), v.data());
  for (const int64_t window : {0, 19}) {
    const auto args = [&](const float* query, float* out, int64_t count, int64_t pos0) {
      return paged_args(pages, 0, blocks, heads, window, 0.2f, query, out, count, pos0);
    };
    std::vector<float> all(q.size());
    device.attention(args(q.data(), all.data(), tokens, 0));
    const int64_t row = heads * hd;
    for (const int64_t t : {0, 17, 40}) {
      std::vector<float> alone(static_cast<size_t>(row));
      device.attention(args(q.data() + t * row, alone.data(), 1, t));
      EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + t * row, static_cast<size_t>(row) * sizeof(float)))
          << "token " << t << " window " << window;
    }
  }
}

// The test below on a device of `threads` threads; the chunked prompt's outputs, windows 0
// and 300 one after the other.
std::vector<float> expect_decode_is_chunked_prompt(DType dtype, size_t threads) {
  SCOPED_TRACE(::testing::Message() << threads << " threads");
  CpuDevice device(threads);
  const int64_t tokens = 1100, heads = 8, kv_heads = 2, hd = 64, bs = 32;
  const auto q = random_values(static_cast<size_t>(tokens * heads * hd), 31);
  auto k = random_values(static_cast<size_t>(tokens * kv_heads * hd), 32);
  auto v = random_values(static_cast<size_t>(tokens * kv_heads * hd), 33);
  for (float& x : k) x *= 4.0f;  // scores that do not all tie
  KvPages pages{
      .dtype = dtype, .blocks = tokens / bs + 3, .block_size = bs, .layers = 1, .n_kv_heads = kv_heads, .head_dim = hd};
  auto memory = device.alloc(static_cast<size_t>(pages.blocks) * pages.block_bytes());
  if (!memory.ok()) {
    ADD_FAILURE() << "no memory for the pages";
    return {};
  }
  std::vector<int32_t> blocks;
  for (int32_t b = static_cast<int32_t>(pages.blocks) - 1; b >= 2; --b) blocks.push_back(b);  // out of order
  const int64_t row = heads * hd, kv_row = kv_heads * hd;
  std::vector<float> outputs;
  for (const int64_t window : {0, 300}) {
    const auto args = [&](const float* query, float* out, int64_t count, int64_t pos0) {
      return paged_args(pages, 0, blocks, heads, window, 0.125f, query, out, count, pos0);
    };
    const auto store = [&](int64_t pos0, int64_t count) {
      device.kv_store(pages, 0, blocks, pos0, count, k.data() + pos0 * kv_row, v.data() + pos0 * kv_row);
    };
    pages.base = memory->data();
    std::memset(pages.base, 0xFF, memory->bytes());  // NaN in every dtype
    std::vector<float> all(q.size());
    for (const auto& [pos0, count] : {std::pair<int64_t, int64_t>{0, 290}, {290, 800}, {1090, 10}}) {
      store(pos0, count);
      device.attention(args(q.data() + pos0 * row, all.data() + pos0 * row, count, pos0));
    }
    std::memset(pages.base, 0xFF, memory->bytes());
    for (int64_t t = 0; t < tokens; ++t) {
      store(t, 1);
      if (t != 0 && t != 255 && t != 256 && t != 289 && t != 290 && t != 1023 && t != 1024 && t != 1099) continue;
      std::vector<float> alone(static_cast<size_t>(row));
      device.attention(args(q.data() + t * row, alone.data(), 1, t));
      EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + t * row, static_cast<size_t>(row) * sizeof(float)))
          << "token " << t << " window " << window;
    }
    auto kd = k, vd = v;
    encode(kd, dtype);  // what the pages hold
    encode(vd, dtype);
    const auto want = naive_attention({q.data(), kd.data(), vd.data(), tokens, 0, heads, kv_heads, hd, window, 0.125f});
    double worst = 0;
    for (size_t i = 0; i < all.size(); ++i) {
      const double diff = std::abs(double{all[i]} - want[i]);
      if (!(diff <= worst)) worst = diff;  // a NaN too
    }
    EXPECT_LE(worst, 1e-4) << "window " << window;
    outputs.insert(outputs.end(), all.begin(), all.end());
  }
  return outputs;
}

// The same over a long prompt in the shapes AMX attention takes on CPUs with the tiles
// (head_dim 64, blocks of 32: a bf16 cache's values stored by pairs of positions, as the
// tiles load them), chunked in three calls as a scheduler may chunk it, against each token
// decoded alone over a cache written up to it and NaN past it (as a reused block may hold),
// and the naive loop. On 16 threads, calls of fewer units than threads from about 900 positions
// (the lone tokens there, and the last chunk) go in steps shared out among the threads.
// Fail first: each piece's last position left out of the value tiles that calls made then
// (since replaced by values stored as the tiles load them) failed it, so did the values
// past a lone token read from the cache instead of as zeros, and so did every unit's steps
// on the first unit's shared scratch.
TEST_P(PagedAttentionTest, ATokenIsBitwiseTheSameDecodedAloneOrInALongChunkedPrompt) {
  const auto two = expect_decode_is_chunked_prompt(GetParam(), 2);
  const auto sixteen = expect_decode_is_chunked_prompt(GetParam(), 16);
  EXPECT_EQ(0, std::memcmp(two.data(), sixteen.data(), two.size() * sizeof(float))) << "2 threads against 16";
}

INSTANTIATE_TEST_SUITE_P(DTypes, PagedAttentionTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CpuDeviceTest, RopeRotatesHalvesAtEachPosition) {
  CpuDevice device(1);
  const int64_t tokens = 3, heads = 2, hd = 4, pos0 = 5;
  auto x = random_values(static_cast<size_t>(tokens * heads * hd), 9);
  const auto original = x;
  const std::vector<float> inv_freq = {1.0f, 0.01f};
  device.rope(x.data(), tokens, heads, hd, pos0, {.inv_freq = inv_freq.data()});
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < 2; ++i) {
        const double angle = double(pos0 + t) * inv_freq[static_cast<size_t>(i)];
        const size_t base = static_cast<size_t>((t * heads + h) * hd);
        const double a = original[base + i], b = original[base + i + 2];
        EXPECT_NEAR(x[base + i], a * std::cos(angle) - b * std::sin(angle), 1e-5);
        EXPECT_NEAR(x[base + i + 2], b * std::cos(angle) + a * std::sin(angle), 1e-5);
      }
}

TEST(CpuDeviceTest, RmsNormMatchesFormula) {
  CpuDevice device(1);
  const auto x = random_values(10, 10);
  auto w = random_values(5, 11);
  const auto w_bytes = encode(w, DType::kF32);
  const TensorView weight{DType::kF32, {5}, w_bytes.data()};
  std::vector<float> y(10);
  device.rms_norm(x.data(), 2, 5, weight, 1e-5f, y.data());
  for (int r = 0; r < 2; ++r) {
    double ms = 0;
    for (int i = 0; i < 5; ++i) ms += double{x[r * 5 + i]} * x[r * 5 + i];
    const double inv = 1 / std::sqrt(ms / 5 + 1e-5);
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(y[r * 5 + i], w[i] * x[r * 5 + i] * inv, 1e-6);
  }
}

// The element-wise ops split large calls over the threads (units of 32768 elements);
// every element comes out the same at any thread count.
TEST(CpuDeviceTest, ElementWiseOpsAreBitwiseIndependentOfThreadCount) {
  const int64_t rows = 70, dim = 1000, heads = 4, head_dim = 250, n = rows * dim;
  const auto x = random_values(static_cast<size_t>(n), 23);
  const auto u = random_values(static_cast<size_t>(n), 24);
  auto norm = random_values(static_cast<size_t>(dim), 25);
  const auto norm_bytes = encode(norm, DType::kF32);
  const TensorView weight{DType::kF32, {dim}, norm_bytes.data()};
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / head_dim);
  std::vector<std::vector<float>> reference;
  for (const size_t threads : {1, 3}) {
    CpuDevice device(threads);
    std::vector<float> normed(static_cast<size_t>(n)), silu(static_cast<size_t>(n)), sum = u, rotated = x;
    device.rms_norm(x.data(), rows, dim, weight, 1e-5f, normed.data());
    device.silu_mul(x.data(), u.data(), n, silu.data());
    device.add(x.data(), n, sum.data());
    device.rope(rotated.data(), rows, heads, head_dim, 5, {.inv_freq = inv_freq.data()});
    const std::vector<std::vector<float>> results{normed, silu, sum, rotated};
    if (reference.empty()) reference = results;
    for (size_t op = 0; op < results.size(); ++op)
      EXPECT_EQ(results[op], reference[op]) << "op " << op << ", " << threads << " threads";
  }
}

// 37 rows run on the calling thread alone; 2,777 (533 KB of bf16, more than a decode
// matmul takes there: kCallerBytes) split over the threads.
TEST(CpuDeviceTest, MatmulIsBitwiseIndependentOfThreadCount) {
  const int64_t tokens = 3, k = 96;
  const auto x = random_values(static_cast<size_t>(tokens * k), 12);
  for (const int64_t n : {37, 2777}) {
    auto w = random_values(static_cast<size_t>(n * k), 13);
    const auto bytes = encode(w, DType::kBF16);
    const TensorView weight{DType::kBF16, {n, k}, bytes.data()};
    std::vector<float> reference;
    for (const size_t threads : {1, 2, 3, 5}) {
      CpuDevice device(threads);
      std::vector<float> y(static_cast<size_t>(tokens * n));
      device.matmul(x.data(), tokens, weight, {}, y.data());
      if (reference.empty()) reference = y;
      EXPECT_EQ(y, reference) << n << " rows, " << threads << " threads";
    }
  }
}

// A prompt's GEMM, cut by CpuDevice into pieces of the kernel's token blocks (400 tokens:
// two of 192 in the column kernels, and the rest) and rows, gives each token's row bitwise
// what that token alone gives it (decode), for placed weights at 1 and 2 threads.
TEST(CpuDeviceTest, APromptsRowsAreBitwiseEachTokenAlone) {
  const int64_t k = 256, n = 192, tokens = 400;
  const auto x = random_values(static_cast<size_t>(tokens * k), 24);
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto w = random_values(static_cast<size_t>(n * k), 25);
    const auto bytes = encode(w, dtype);
    for (const size_t threads : {1, 2}) {
      CpuDevice device(threads);
      const TensorView weight = device.place(TensorView{dtype, {n, k}, bytes.data()}).value();
      std::vector<float> all(static_cast<size_t>(tokens * n)), alone(static_cast<size_t>(n));
      device.matmul(x.data(), tokens, weight, {}, all.data());
      for (const int64_t t : {0, 191, 192, 383, 384, 399}) {
        device.matmul(x.data() + t * k, 1, weight, {}, alone.data());
        EXPECT_EQ(0, std::memcmp(alone.data(), all.data() + t * n, alone.size() * sizeof(float)))
            << dtype_name(dtype) << ", token " << t << ", " << threads << " threads";
      }
    }
  }
}

// CpuDevice::place copies a 2-D f32, bf16 or f16 weight into its matmuls' layout (rows
// interleaved in groups: weight_layout.h, where the kernel takes them) when its shape
// allows it, and leaves any other tensor a view of its bytes; the matmul (decode, a few
// tokens, prefill; 1 and 3 threads) and the embedding lookup give the placed weight the
// bits the view gives.
TEST(CpuDeviceTest, PlacedWeightsGiveTheBitsOfTheirViews) {
  const int64_t k = 256, n = 2 * 1024;
  const auto x = random_values(static_cast<size_t>(40 * k), 22);
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto w = random_values(static_cast<size_t>(n * k), 23);
    const auto bytes = encode(w, dtype);
    const TensorView host{dtype, {n, k}, bytes.data()};
    for (const size_t threads : {1, 3}) {
      CpuDevice device(threads);
      const auto placed = device.place(host);
      ASSERT_TRUE(placed.ok()) << placed.status().message();
      // Interleaved in groups of 8 where the decode tiles read them (1: as mapped, for AMX
      // tiles, or with TESSERA_INTERLEAVE=0).
      const int64_t group = cpu::matmul_row_group(dtype);
      ASSERT_EQ(placed->row_group, group);
      ASSERT_EQ(placed->data == host.data, group == 1);
      EXPECT_EQ(placed->shape, host.shape);
      for (const int64_t tokens : {1, 3, 40}) {
        std::vector<float> want(static_cast<size_t>(tokens * n)), y(want.size());
        device.matmul(x.data(), tokens, host, {}, want.data());
        device.matmul(x.data(), tokens, *placed, {}, y.data());
        EXPECT_EQ(0, std::memcmp(y.data(), want.data(), want.size() * sizeof(float)))
            << dtype_name(dtype) << ", " << tokens << " tokens, " << threads << " threads";
      }
      const std::vector<int32_t> ids{0, 7, 1999, 2047, 7};
      std::vector<float> want(ids.size() * k), y(want.size());
      device.embed(host, ids, want.data());
      device.embed(*placed, ids, y.data());
      EXPECT_EQ(y, want) << dtype_name(dtype) << ": the embedding";
    }
    // Rows that are no whole group, a row that is no whole line, and a norm: the views.
    CpuDevice device(1);
    const std::vector<TensorView> others{TensorView{dtype, {n - 3, k}, bytes.data()},
                                         TensorView{dtype, {n / 2, 2 * k - 8}, bytes.data()},
                                         TensorView{dtype, {k}, bytes.data()}};
    for (const TensorView& other : others) {
      const auto placed = device.place(other);
      ASSERT_TRUE(placed.ok());
      EXPECT_EQ(placed->data, other.data) << shape_string(other.shape);
      EXPECT_EQ(placed->row_group, 1) << shape_string(other.shape);
    }
  }
}

// CpuDevice::matmuls and matmuls_each deal the rows of all their weights out in one
// region when a few tokens meet f32, bf16 or f16 weights: each output bitwise what
// matmul gives it, with a norm (matmuls) and biases, at any thread count; weights of
// ragged heights (chunks span weights).
TEST(CpuDeviceTest, MatmulsAreBitwiseEachWeightsMatmul) {
  const int64_t k = 200;
  const std::vector<int64_t> heights{37, 5, 70, 16, 1};
  const auto x = random_values(static_cast<size_t>(25 * k), 26);
  auto norm = random_values(static_cast<size_t>(k), 27);
  const auto norm_bytes = encode(norm, DType::kF32);
  const TensorView norm_weight{DType::kF32, {k}, norm_bytes.data()};
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<std::vector<uint8_t>> bytes, bias_bytes;
    std::vector<TensorView> weights, biases;
    for (size_t i = 0; i < heights.size(); ++i) {
      auto w = random_values(static_cast<size_t>(heights[i] * k), static_cast<uint32_t>(30 + i));
      bytes.push_back(encode(w, dtype));
      auto b = random_values(static_cast<size_t>(heights[i]), static_cast<uint32_t>(40 + i));
      bias_bytes.push_back(encode(b, DType::kF32));
    }
    for (size_t i = 0; i < heights.size(); ++i) {
      weights.push_back({dtype, {heights[i], k}, bytes[i].data()});
      biases.push_back(i % 2 == 0 ? TensorView{} : TensorView{DType::kF32, {heights[i]}, bias_bytes[i].data()});
    }
    for (const int64_t tokens : {1, 3, 20}) {
      for (const size_t threads : {1, 2, 3}) {
        CpuDevice device(threads);
        std::vector<float> normed(static_cast<size_t>(tokens * k)), scratch(normed.size());
        device.rms_norm(x.data(), tokens, k, norm_weight, 1e-5f, normed.data());
        std::vector<std::vector<float>> each, together;
        std::vector<Device::Projection> outs;
        for (size_t i = 0; i < heights.size(); ++i) {
          each.emplace_back(static_cast<size_t>(tokens * heights[i]));
          together.emplace_back(each.back().size(), std::nanf(""));
          device.matmul(normed.data(), tokens, weights[i], biases[i], each.back().data());
        }
        for (size_t i = 0; i < heights.size(); ++i) outs.push_back({&weights[i], &biases[i], together[i].data()});
        device.matmuls(x.data(), tokens, outs, {&norm_weight, 1e-5f, scratch.data()});
        for (size_t i = 0; i < heights.size(); ++i)
          EXPECT_EQ(0, std::memcmp(each[i].data(), together[i].data(), each[i].size() * sizeof(float)))
              << dtype_name(dtype) << ", weight " << i << ", " << tokens << " tokens, " << threads << " threads";
        // matmuls_each: weight i's x starts i rows further into x.
        std::vector<const float*> xs;
        for (size_t i = 0; i < heights.size(); ++i) {
          xs.push_back(x.data() + static_cast<int64_t>(i) * k);
          device.matmul(xs.back(), tokens, weights[i], biases[i], each[i].data());
          std::fill(together[i].begin(), together[i].end(), std::nanf(""));
        }
        device.matmuls_each(tokens, xs, outs);
        for (size_t i = 0; i < heights.size(); ++i)
          EXPECT_EQ(0, std::memcmp(each[i].data(), together[i].data(), each[i].size() * sizeof(float)))
              << dtype_name(dtype) << ", each x, weight " << i << ", " << tokens << " tokens, " << threads
              << " threads";
      }
    }
  }
}

// gate_up: out = silu(x * gate^T) * (x * up^T), up = x * up^T, bitwise what the norm, two
// matmuls and silu_mul give, for a decode step's few tokens and a prefill's (one GEMM
// region for both weights), the weights as placed (CpuDevice::place's layouts), at any
// thread count.
TEST(CpuDeviceTest, GateUpIsBitwiseItsTwoMatmulsAndSiluMul) {
  const int64_t k = 256, n = 192;
  const auto x = random_values(static_cast<size_t>(40 * k), 51);
  auto norm = random_values(static_cast<size_t>(k), 52);
  const auto norm_bytes = encode(norm, DType::kF32);
  const TensorView norm_weight{DType::kF32, {k}, norm_bytes.data()};
  const TensorView no_bias{};
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto gate_values = random_values(static_cast<size_t>(n * k), 53), up_values = random_values(gate_values.size(), 54);
    const auto gate_bytes = encode(gate_values, dtype), up_bytes = encode(up_values, dtype);
    for (const size_t threads : {1, 2, 3}) {
      CpuDevice device(threads);
      const TensorView gate = device.place(TensorView{dtype, {n, k}, gate_bytes.data()}).value();
      const TensorView up = device.place(TensorView{dtype, {n, k}, up_bytes.data()}).value();
      for (const int64_t tokens : {1, 3, 20, 40}) {
        const auto size = static_cast<size_t>(tokens * n);
        std::vector<float> normed(static_cast<size_t>(tokens * k)), scratch(normed.size());
        std::vector<float> want(size), want_up(size), got(size, std::nanf("")), got_up(size, std::nanf(""));
        device.rms_norm(x.data(), tokens, k, norm_weight, 1e-5f, normed.data());
        device.matmul(normed.data(), tokens, gate, no_bias, want.data());
        device.matmul(normed.data(), tokens, up, no_bias, want_up.data());
        device.silu_mul(want.data(), want_up.data(), static_cast<int64_t>(size), want.data());
        device.gate_up(x.data(), tokens, gate, no_bias, up, no_bias, got_up.data(), got.data(),
                       {&norm_weight, 1e-5f, scratch.data()});
        const std::string what = std::string(dtype_name(dtype)) + ", " + std::to_string(tokens) + " tokens, " +
                                 std::to_string(threads) + " threads";
        EXPECT_EQ(0, std::memcmp(want.data(), got.data(), size * sizeof(float))) << what;
        EXPECT_EQ(0, std::memcmp(want_up.data(), got_up.data(), size * sizeof(float))) << what;
      }
    }
  }
}

}  // namespace
}  // namespace tessera
