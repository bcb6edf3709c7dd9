// The CPU matmul on GGUF's quantized blocks (backend/cpu/quant_matmul.h) against
// the references: dequantization bitwise equal to io/gguf_quant's (itself bitwise
// gguf-py's, tests/io/gguf_test.cpp), products bitwise equal to the f32 matmul of the
// dequantized rows on every instruction set, and rows bitwise the same alone or in
// any batch at any thread count.
#include "backend/cpu/quant_matmul.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_device.h"
#include "backend/cpu/kernels.h"
#include "hwy/targets.h"
#include "io/gguf_quant.h"
#include "support/random_tensors.h"

namespace tessera {
namespace {

using testing::random_values;

// `rows` rows of k elements of random blocks: random bytes, with each block's f16
// scales (d, and dmin for Q4_K/Q5_K) set to finite values of either sign below 0.05.
std::vector<uint8_t> random_blocks(DType dtype, int64_t rows, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> bytes(dtype_bytes(dtype, rows * k));
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-0.05f, 0.05f);
  const size_t block = dtype_block_bytes(dtype);
  std::vector<size_t> scale_at = {0};
  if (dtype == DType::kQ4_K || dtype == DType::kQ5_K) scale_at = {0, 2};
  if (dtype == DType::kQ6_K) scale_at = {208};
  for (size_t at = 0; at < bytes.size(); at += block)
    for (const size_t s : scale_at) {
      const uint16_t bits = f32_to_f16(scale(rng));
      std::memcpy(bytes.data() + at + s, &bits, 2);
    }
  return bytes;
}

std::vector<float> reference_dequantized(DType dtype, const std::vector<uint8_t>& blocks, int64_t elements) {
  std::vector<float> out(static_cast<size_t>(elements));
  dequantize_gguf(*ggml_type_of(dtype), blocks, out);
  return out;
}

std::vector<uint32_t> bits(const float* y, int64_t count) {
  std::vector<uint32_t> out(static_cast<size_t>(count));
  std::memcpy(out.data(), y, out.size() * sizeof(float));
  return out;
}

// Calls fn(target) with dispatch narrowed to each x86 instruction set that this CPU
// supports and the build compiled (as kernels_test does), then restores it.
template <typename Fn>
int for_each_target(Fn&& fn) {
  int targets_run = 0;
  const int64_t supported = hwy::SupportedTargets();
  for (const int64_t target : {int64_t{HWY_AVX3}, int64_t{HWY_AVX2}, int64_t{HWY_SSE4}, int64_t{HWY_SSSE3},
                               int64_t{HWY_EMU128}, int64_t{HWY_SCALAR}}) {
    if ((supported & target) == 0 || (HWY_TARGETS & target) == 0) continue;
    hwy::SetSupportedTargetsForTest(target);
    fn(target);
    ++targets_run;
  }
  hwy::SetSupportedTargetsForTest(0);
  return targets_run;
}

class QuantMatmulTest : public ::testing::TestWithParam<DType> {};

// Every block of 3 rows of 2 K-blocks (16 Q8_0/Q4_0 blocks) dequantizes bit for bit as
// gguf_quant's reference, on every instruction set.
TEST_P(QuantMatmulTest, DequantizationIsBitwiseTheReferences) {
  const DType dtype = GetParam();
  const int64_t rows = 3, k = 512;
  const auto blocks = random_blocks(dtype, rows, k, 1);
  const auto want = reference_dequantized(dtype, blocks, rows * k);
  const int targets = for_each_target([&](int64_t target) {
    std::vector<float> got(static_cast<size_t>(rows * k));
    cpu::dequantize_rows(blocks.data(), dtype, rows, k, got.data());
    ASSERT_EQ(bits(got.data(), rows * k), bits(want.data(), rows * k)) << hwy::TargetName(target);
  });
  EXPECT_GE(targets, 2);
}

// Decode on the blocks gives bitwise what the f32 matmul gives on the dequantized rows
// (the order matmul.cpp states), and stays within 1e-5 of the row's magnitude of a
// double-precision sum; on every instruction set. 13 rows leave a partial tile.
TEST_P(QuantMatmulTest, MatvecIsTheF32MatmulOfTheDequantizedRows) {
  const DType dtype = GetParam();
  const int64_t rows = 13, k = 1024;
  const auto blocks = random_blocks(dtype, rows, k, 2);
  const auto w = reference_dequantized(dtype, blocks, rows * k);
  const auto x = random_values(static_cast<size_t>(k), 3);
  const int targets = for_each_target([&](int64_t target) {
    std::vector<float> got(static_cast<size_t>(rows)), want(static_cast<size_t>(rows));
    cpu::quant_matvec(x.data(), k, blocks.data(), dtype, rows, got.data());
    cpu::matmul_rows(x.data(), 1, k, w.data(), DType::kF32, rows, want.data(), rows);
    ASSERT_EQ(bits(got.data(), rows), bits(want.data(), rows)) << hwy::TargetName(target);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0, magnitude = 0;
      for (int64_t i = 0; i < k; ++i) {
        sum += double{x[i]} * w[r * k + i];
        magnitude += std::abs(double{x[i]} * w[r * k + i]);
      }
      ASSERT_NEAR(got[r], sum, 1e-5 * magnitude) << hwy::TargetName(target) << " row " << r;
    }
  });
  EXPECT_GE(targets, 2);
}

// A token's row is bitwise the same alone (decode) as among 301 tokens (the packed
// GEMM) or 5 (dequantized scratch rows), at 1, 2 and 3 threads, and equals the f32
// matmul of the dequantized weights. 70 rows leave a partial chunk and an uneven split.
TEST_P(QuantMatmulTest, RowsAreBitwiseTheSameAloneOrInABatch) {
  const DType dtype = GetParam();
  const int64_t tokens = 301, k = 512, n = 70;
  const auto x = random_values(static_cast<size_t>(tokens * k), 4);
  const auto blocks = random_blocks(dtype, n, k, 5);
  const auto w = reference_dequantized(dtype, blocks, n * k);
  const TensorView weight{dtype, {n, k}, blocks.data()};
  const TensorView widened{DType::kF32, {n, k}, w.data()};
  std::vector<uint32_t> reference;
  for (const size_t threads : {1, 2, 3}) {
    CpuDevice device(threads);
    std::vector<float> all(static_cast<size_t>(tokens * n));
    device.matmul(x.data(), tokens, weight, {}, all.data());
    if (reference.empty()) {
      reference = bits(all.data(), tokens * n);
      std::vector<float> f32(all.size());
      device.matmul(x.data(), tokens, widened, {}, f32.data());
      EXPECT_EQ(reference, bits(f32.data(), tokens * n)) << "against the f32 matmul";
    }
    EXPECT_EQ(bits(all.data(), tokens * n), reference) << threads << " threads";
    for (const int64_t t : {0, 1, 150, 300}) {
      std::vector<float> alone(static_cast<size_t>(n));
      device.matmul(x.data() + t * k, 1, weight, {}, alone.data());
      EXPECT_EQ(bits(alone.data(), n), bits(all.data() + t * n, n)) << "token " << t << ", " << threads << " threads";
    }
    std::vector<float> some(static_cast<size_t>(5 * n));
    device.matmul(x.data() + 100 * k, 5, weight, {}, some.data());
    EXPECT_EQ(bits(some.data(), 5 * n), bits(all.data() + 100 * n, 5 * n)) << threads << " threads";
  }
}

// An embedding table in blocks gives each id's dequantized row.
TEST_P(QuantMatmulTest, EmbedDequantizesTheRowsAsked) {
  const DType dtype = GetParam();
  const int64_t vocab = 7, hidden = 256;
  const auto blocks = random_blocks(dtype, vocab, hidden, 6);
  const auto w = reference_dequantized(dtype, blocks, vocab * hidden);
  CpuDevice device(1);
  const std::vector<int32_t> ids = {6, 0, 3, 3};
  std::vector<float> y(ids.size() * static_cast<size_t>(hidden));
  device.embed(TensorView{dtype, {vocab, hidden}, blocks.data()}, ids, y.data());
  for (size_t t = 0; t < ids.size(); ++t)
    EXPECT_EQ(bits(y.data() + t * hidden, hidden), bits(w.data() + ids[t] * hidden, hidden)) << "id " << ids[t];
}

INSTANTIATE_TEST_SUITE_P(Types, QuantMatmulTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tessera
