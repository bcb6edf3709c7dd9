// The CPU matmul on GGUF's quantized blocks (backend/cpu/quant_matmul.h, with the
// integer dot products of quant_dot.h on activations rounded as quant_act.h says)
// against references nobody here wrote: dequantization bitwise io/gguf_quant's (itself
// bitwise gguf-py's, tests/io/gguf_test.cpp); the Q8_0 rounding of the activations
// bitwise gguf-py's quantizer, the Q8_K one ggml's quantize_row_q8_K_ref (restated in
// NumPy); the products within f32 rounding of the f64 sums of gguf-py's dequantized
// weights times the rounded activations (tests/fixtures/gguf/quant_dot.gguf, written by
// make_quant_dot_fixture.py); the same bits on every instruction set; and rows bitwise
// the same alone or in any batch at any thread count.
// quant_dot.cpp compiles Highway's AVX3_DL target (VNNI) too: so HWY_TARGETS names it here.
#define HWY_WANT_AVX3_DL
#include "backend/cpu/quant_matmul.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/amx_emulated.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/quant_act.h"
#include "backend/cpu/quant_dot.h"
#include "backend/cpu/weight_layout.h"
#include "core/dtype.h"
#include "hwy/targets.h"
#include "io/gguf.h"
#include "io/gguf_quant.h"
#include "support/random_tensors.h"
#include "support/rows_alone.h"
// amx_int8_kernel.h after what it needs (its header comment).
#include "backend/cpu/amx_int8_kernel.h"

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

using testing::bits;

// Calls fn(target) with dispatch narrowed to each x86 instruction set that this CPU
// supports and the build compiled (as kernels_test does), then restores it.
template <typename Fn>
int for_each_target(Fn&& fn) {
  int targets_run = 0;
  const int64_t supported = hwy::SupportedTargets();
  for (const int64_t target : {int64_t{HWY_AVX3_DL}, int64_t{HWY_AVX3}, int64_t{HWY_AVX2}, int64_t{HWY_SSE4},
                               int64_t{HWY_SSSE3}, int64_t{HWY_EMU128}, int64_t{HWY_SCALAR}}) {
    if ((supported & target) == 0 || (HWY_TARGETS & target) == 0) continue;
    hwy::SetSupportedTargetsForTest(target);
    fn(target);
    ++targets_run;
  }
  hwy::SetSupportedTargetsForTest(0);
  return targets_run;
}

// The fixture of make_quant_dot_fixture.py.
class QuantDotFixture {
 public:
  QuantDotFixture() {
    auto file = GgufFile::open(std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/gguf/quant_dot.gguf");
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    if (file.ok()) file_.emplace(std::move(*file));
  }
  bool ok() const { return file_.has_value(); }
  std::span<const uint8_t> bytes(const std::string& name) const {
    const GgufTensorInfo* tensor = file_->find(name);
    EXPECT_NE(tensor, nullptr) << name;
    return tensor ? file_->bytes(*tensor) : std::span<const uint8_t>{};
  }
  std::vector<float> floats(const std::string& name) const {
    const auto b = bytes(name);
    std::vector<float> out(b.size() / sizeof(float));
    std::memcpy(out.data(), b.data(), out.size() * sizeof(float));
    return out;
  }

 private:
  std::optional<GgufFile> file_;
};

constexpr int64_t kFixtureK = 1024, kFixtureTokens = 3, kFixtureRows = 13;

// Q8_0 activations are gguf-py's Q8_0 blocks (ggml's quantize_row_q8_0_ref: ties away
// from zero, d an f16); Q8_K ones are ggml's quantize_row_q8_K_ref (ties to even, the
// first largest |x| sets the sign of the scale, bsums the sums of 16).
TEST(QuantActTest, RoundingIsGgmlsReference) {
  const QuantDotFixture fixture;
  ASSERT_TRUE(fixture.ok());
  const auto x = fixture.floats("x");
  const auto q8_0 = fixture.bytes("x.q8_0");
  const auto q8_k = fixture.floats("x.q8_k.qs");
  const auto q8_k_d = fixture.floats("x.q8_k.d");
  for (int64_t t = 0; t < kFixtureTokens; ++t) {
    std::vector<cpu::Q8Block> got(kFixtureK / 32);
    cpu::quantize_q8_0(x.data() + t * kFixtureK, kFixtureK, got.data());
    for (int64_t b = 0; b < kFixtureK / 32; ++b) {
      const uint8_t* want = q8_0.data() + (t * kFixtureK / 32 + b) * 34;
      const float d = f16_to_f32(static_cast<uint16_t>(want[0] | want[1] << 8));
      ASSERT_EQ(std::bit_cast<uint32_t>(got[b].d), std::bit_cast<uint32_t>(d)) << "token " << t << " block " << b;
      ASSERT_EQ(std::memcmp(got[b].qs, want + 2, 32), 0) << "token " << t << " block " << b;
    }
    std::vector<cpu::Q8KBlock> got_k(kFixtureK / 256);
    cpu::quantize_q8_K(x.data() + t * kFixtureK, kFixtureK, got_k.data());
    for (int64_t b = 0; b < kFixtureK / 256; ++b) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got_k[b].d), std::bit_cast<uint32_t>(q8_k_d[t * 4 + b])) << t << " " << b;
      for (int j = 0; j < 256; ++j) {
        ASSERT_EQ(static_cast<float>(got_k[b].qs[j]), q8_k[t * kFixtureK + b * 256 + j])
            << "token " << t << " element " << j;
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += got_k[b].qs[16 * (j / 16) + i];
        ASSERT_EQ(got_k[b].bsums[j / 16], sum);
      }
    }
  }
  // The fixture's tie rows did round differently in the two schemes (else they test
  // nothing): token 1's 0.5 steps, away from zero in Q8_0, to even in Q8_K.
  int ties = 0;
  for (int64_t i = 0; i < kFixtureK; ++i)
    ties += std::abs(float(static_cast<int8_t>(q8_0[(kFixtureK / 32 + i / 32) * 34 + 2 + i % 32])) +
                     q8_k[kFixtureK + i]) > 0.0f;  // Q8_K's scale is -1 there: q = -x rounded
  EXPECT_GT(ties, 100);
}

// quantize_activations rounds a token in vectors where the target has them (quant_dot.cpp's
// RoundQ8_0 and RoundQ8_K): the bytes of quantize_q8_0 and quantize_q8_K (gguf-py's,
// above) on every target, for the fixture's x (its ties among them), random values, and
// blocks of 256 of zeros, of subnormals (1 / d and Q8_K's scale overflow), of 0.5 steps
// whose largest |x| comes first negative then positive, and with infinities and a NaN.
TEST(QuantActTest, RoundingInVectorsIsTheReferencesOnEveryTarget) {
  const QuantDotFixture fixture;
  ASSERT_TRUE(fixture.ok());
  std::vector<float> x = fixture.floats("x");
  const auto more = random_values(256 * 5, 21);
  x.insert(x.end(), more.begin(), more.end());
  std::vector<float> odd(256 * 4, 0.0f);
  for (int j = 0; j < 256; ++j) {
    odd[256 + j] = 1e-40f * static_cast<float>(j - 128);
    odd[512 + j] = 0.5f * static_cast<float>(j - 128);
    odd[768 + j] = static_cast<float>(j);
  }
  odd[512 + 10] = -70.0f;
  odd[512 + 20] = 70.0f;
  odd[768 + 5] = std::numeric_limits<float>::infinity();
  odd[768 + 100] = std::nanf("");
  odd[768 + 200] = -std::numeric_limits<float>::infinity();
  x.insert(x.end(), odd.begin(), odd.end());
  const auto k = static_cast<int64_t>(x.size());
  std::vector<cpu::Q8Block> want(static_cast<size_t>(k / 32));
  cpu::quantize_q8_0(x.data(), k, want.data());
  std::vector<cpu::Q8KBlock> want_k(static_cast<size_t>(k / 256));
  cpu::quantize_q8_K(x.data(), k, want_k.data());
  const int targets = for_each_target([&](int64_t target) {
    for (const DType dtype : {DType::kQ8_0, DType::kQ4_0}) {
      std::vector<cpu::Q8Block> got(want.size());
      cpu::quantize_activations(dtype, x.data(), 1, k, got.data());
      for (size_t b = 0; b < want.size(); ++b) {
        ASSERT_EQ(std::bit_cast<uint32_t>(got[b].d), std::bit_cast<uint32_t>(want[b].d))
            << hwy::TargetName(target) << " block " << b;
        ASSERT_EQ(std::memcmp(got[b].qs, want[b].qs, 32), 0) << hwy::TargetName(target) << " block " << b;
      }
    }
    std::vector<cpu::Q8KBlock> got(want_k.size());
    cpu::quantize_activations(DType::kQ4_K, x.data(), 1, k, got.data());
    for (size_t b = 0; b < want_k.size(); ++b) {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[b].d), std::bit_cast<uint32_t>(want_k[b].d))
          << hwy::TargetName(target) << " K block " << b;
      ASSERT_EQ(std::memcmp(got[b].qs, want_k[b].qs, 256), 0) << hwy::TargetName(target) << " K block " << b;
      ASSERT_EQ(std::memcmp(got[b].bsums, want_k[b].bsums, sizeof got[b].bsums), 0)
          << hwy::TargetName(target) << " K block " << b;
    }
  });
  EXPECT_GE(targets, 2);
}

// A block of activations holding an infinity or a NaN (where ggml is undefined) gives a
// NaN scale, so the products are NaN as the f32 matmul's would be.
TEST(QuantActTest, NonFiniteActivationsGiveNaN) {
  for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
    std::vector<float> x(256, 0.25f);
    x[7] = bad;
    std::vector<cpu::Q8Block> q(8);
    cpu::quantize_q8_0(x.data(), 256, q.data());
    EXPECT_TRUE(std::isnan(q[0].d)) << bad;
    EXPECT_FALSE(std::isnan(q[1].d)) << bad;
    cpu::Q8KBlock qk;
    cpu::quantize_q8_K(x.data(), 256, &qk);
    EXPECT_TRUE(std::isnan(qk.d)) << bad;
  }
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

// The fixture's weights times its activations: within f32 rounding (1e-5 of the sum of
// |products|) of gguf-py's f64 sums, the same bits on every instruction set, one token
// at a time or all three. 13 rows leave a partial group of 4.
TEST_P(QuantMatmulTest, ProductsAreGgufPysSumsOnEveryTarget) {
  const DType dtype = GetParam();
  const QuantDotFixture fixture;
  ASSERT_TRUE(fixture.ok());
  const std::string name(dtype_name(dtype));
  const auto x = fixture.floats("x");
  const auto blocks = fixture.bytes("w." + name);
  const auto want = fixture.floats("want." + name);
  const auto magnitude = fixture.floats("magnitude." + name);
  const TensorView weight{dtype, {kFixtureRows, kFixtureK}, const_cast<uint8_t*>(blocks.data())};
  std::vector<uint32_t> first;
  const int targets = for_each_target([&](int64_t target) {
    CpuDevice device(2);
    std::vector<float> got(static_cast<size_t>(kFixtureTokens * kFixtureRows));
    device.matmul(x.data(), kFixtureTokens, weight, {}, got.data());
    for (int64_t i = 0; i < kFixtureTokens * kFixtureRows; ++i)
      ASSERT_NEAR(got[i], want[i], 1e-5 * magnitude[i]) << hwy::TargetName(target) << " output " << i;
    for (int64_t t = 0; t < kFixtureTokens; ++t) {
      std::vector<float> alone(static_cast<size_t>(kFixtureRows));
      device.matmul(x.data() + t * kFixtureK, 1, weight, {}, alone.data());
      ASSERT_EQ(bits(alone.data(), kFixtureRows), bits(got.data() + t * kFixtureRows, kFixtureRows))
          << hwy::TargetName(target) << " token " << t;
    }
    if (first.empty()) first = bits(got.data(), kFixtureTokens * kFixtureRows);
    ASSERT_EQ(bits(got.data(), kFixtureTokens * kFixtureRows), first) << hwy::TargetName(target);
  });
  EXPECT_GE(targets, 2);
}

// A token's row is bitwise the same alone (decode) as among 301 tokens (several token
// tiles) or 5, at 1, 2 and 3 threads, on every instruction set (each has its own decode
// and prefill kernels). 70 rows leave a partial chunk and an uneven split; Q8_0's and
// Q4_0's rows of 17 blocks leave the decode's two-block steps one more.
TEST_P(QuantMatmulTest, RowsAreBitwiseTheSameAloneOrInABatchOnEveryTarget) {
  const DType dtype = GetParam();
  const int64_t tokens = 301, k = dtype_block_elements(dtype) == 32 ? 544 : 512, n = 70;
  const auto x = random_values(static_cast<size_t>(tokens * k), 4);
  const auto blocks = random_blocks(dtype, n, k, 5);
  const TensorView weight{dtype, {n, k}, blocks.data()};
  const int targets = for_each_target([&](int64_t target) {
    SCOPED_TRACE(hwy::TargetName(target));
    testing::expect_rows_alone_or_in_a_batch(weight, x, 5);
  });
  EXPECT_GE(targets, 2);
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

// CpuDevice::matmuls deals the rows of several GGUF weights of one x out in one region,
// x rounded once for each kind of activations (Q8_0 for Q8_0 and Q4_0, Q8_K for the K
// types), and gate_up computes gate and up in one region, each thread applying silu_mul
// to its rows: each output bitwise what matmul (and silu_mul) give it, with a norm, at
// any thread count and token count; weights of ragged heights and mixed types.
TEST(QuantMatmulsTest, MatmulsAndGateUpAreBitwiseEachWeightsMatmul) {
  const int64_t k = 512;
  const std::vector<std::pair<DType, int64_t>> weights_of{
      {DType::kQ4_K, 37}, {DType::kQ8_0, 5}, {DType::kQ6_K, 70}, {DType::kQ4_0, 16}, {DType::kQ5_K, 1}};
  const auto x = random_values(static_cast<size_t>(20 * k), 7);
  const auto norm = random_values(static_cast<size_t>(k), 8);
  const TensorView norm_weight{DType::kF32, {k}, const_cast<float*>(norm.data())};
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<TensorView> weights;
  for (size_t i = 0; i < weights_of.size(); ++i)
    blocks.push_back(random_blocks(weights_of[i].first, weights_of[i].second, k, static_cast<uint32_t>(10 + i)));
  for (size_t i = 0; i < weights_of.size(); ++i)
    weights.push_back({weights_of[i].first, {weights_of[i].second, k}, blocks[i].data()});
  // gate and up: 70 rows (a partial unit of 16), of one kind of activations or of two.
  const auto gate_blocks = random_blocks(DType::kQ4_K, 70, k, 20);
  const TensorView gate{DType::kQ4_K, {70, k}, gate_blocks.data()};
  const auto up_blocks = random_blocks(DType::kQ4_0, 70, k, 21);
  const TensorView up_q4_0{DType::kQ4_0, {70, k}, up_blocks.data()};
  const TensorView no_bias{};
  for (const int64_t tokens : {1, 3, 20}) {
    for (const size_t threads : {1, 2, 3}) {
      CpuDevice device(threads);
      std::vector<float> normed(static_cast<size_t>(tokens * k)), scratch(normed.size());
      device.rms_norm(x.data(), tokens, k, norm_weight, 1e-5f, normed.data());
      std::vector<std::vector<float>> each, together;
      std::vector<Device::Projection> outs;
      for (const TensorView& w : weights) {
        each.emplace_back(static_cast<size_t>(tokens * w.dim(0)));
        together.emplace_back(each.back().size(), std::nanf(""));
        device.matmul(normed.data(), tokens, w, {}, each.back().data());
      }
      for (size_t i = 0; i < weights.size(); ++i) outs.push_back({&weights[i], &no_bias, together[i].data()});
      device.matmuls(x.data(), tokens, outs, {&norm_weight, 1e-5f, scratch.data()});
      for (size_t i = 0; i < weights.size(); ++i)
        EXPECT_EQ(bits(each[i].data(), static_cast<int64_t>(each[i].size())),
                  bits(together[i].data(), static_cast<int64_t>(together[i].size())))
            << "weight " << i << ", " << tokens << " tokens, " << threads << " threads";
      for (const TensorView* up :
           {static_cast<const TensorView*>(&weights[2]), &gate, &up_q4_0}) {  // Q8_K activations as gate's, then Q8_0
        const auto n = static_cast<size_t>(tokens * 70);
        std::vector<float> want(n), want_up(n), got(n, std::nanf("")), got_up(n);
        device.matmul(normed.data(), tokens, gate, {}, want.data());
        device.matmul(normed.data(), tokens, *up, {}, want_up.data());
        device.silu_mul(want.data(), want_up.data(), tokens * 70, want.data());
        device.gate_up(x.data(), tokens, gate, no_bias, *up, no_bias, got_up.data(), got.data(),
                       {&norm_weight, 1e-5f, scratch.data()});
        EXPECT_EQ(bits(want.data(), tokens * 70), bits(got.data(), tokens * 70))
            << "gate_up, up " << dtype_name(up->dtype) << ", " << tokens << " tokens, " << threads << " threads";
      }
    }
  }
}

// Q8_0, Q4_0 and the K types' rows in weight_layout.h's groups of 16 (quant_groups.cpp's
// kernels) give the bits of the same rows left plain, on every instruction set: those pass
// through a group at a time (40 tokens), or take Q8_0's and Q4_0's plain-row decode kernel
// (plain32, 1 token) or (the K types, 1 and 5 tokens) quant_dot.cpp's row kernels; for decode
// (80 rows: the streams of groups, then groups alone) and tiles of tokens. Fail first:
// plain32's rows 14 and 15 swapped (VNNI) and Q4_0's bias off by one (AVX2) failed it.
// CpuDevice::place makes Q8_0's and Q4_0's groups (the others' rows stay as mapped, for the
// row kernels' decode), and the embedding's rows from them are the plain ones'.
class QuantGroupsTest : public ::testing::TestWithParam<DType> {};

TEST_P(QuantGroupsTest, RowsPlacedInGroupsAreBitwiseThePlainRows) {
  const DType dtype = GetParam();
  const bool block32 = dtype_block_elements(dtype) == 32;
  const int64_t n = 80, k = block32 ? 544 : 768;
  const auto blocks = random_blocks(dtype, n, k, 30);
  std::vector<uint8_t> grouped(blocks.size());
  cpu::interleave_rows(blocks.data(), dtype, k, cpu::kQuantGroup, 0, n, grouped.data());
  const TensorView plain{dtype, {n, k}, const_cast<uint8_t*>(blocks.data())};
  const auto x = random_values(static_cast<size_t>(40 * k), 31);
  std::vector<uint8_t> xq(cpu::quant_act_bytes(dtype, k) * 40);
  cpu::quantize_activations(dtype, x.data(), 40, k, xq.data());
  const int targets = for_each_target([&](int64_t target) {
    for (const int64_t tokens : {1, 5, 40}) {
      std::vector<float> want(static_cast<size_t>(tokens * n)), got(want.size(), std::nanf(""));
      cpu::quant_dot_rows(dtype, blocks.data(), n, k, xq.data(), tokens, want.data(), n);
      cpu::quant_dot_rows(dtype, grouped.data(), n, k, xq.data(), tokens, got.data(), n, cpu::kQuantGroup);
      ASSERT_EQ(bits(want.data(), tokens * n), bits(got.data(), tokens * n))
          << hwy::TargetName(target) << ", " << tokens << " tokens";
    }
    CpuDevice device(2);
    auto placed = device.place(plain);
    ASSERT_TRUE(placed.ok()) << placed.status().to_string();
    ASSERT_EQ(placed->row_group, block32 ? cpu::kQuantGroup : 1);
    const TensorView grouped_view{dtype, {n, k}, grouped.data(), cpu::kQuantGroup};
    std::vector<float> want(static_cast<size_t>(n)), got(want.size(), std::nanf(""));
    device.matmul(x.data(), 1, plain, {}, want.data());
    device.matmul(x.data(), 1, grouped_view, {}, got.data());
    ASSERT_EQ(bits(want.data(), n), bits(got.data(), n)) << hwy::TargetName(target);
    const std::vector<int32_t> ids = {79, 0, 17};
    std::vector<float> rows_want(ids.size() * static_cast<size_t>(k)), rows_got(rows_want.size());
    device.embed(plain, ids, rows_want.data());
    device.embed(grouped_view, ids, rows_got.data());
    ASSERT_EQ(bits(rows_want.data(), static_cast<int64_t>(rows_want.size())),
              bits(rows_got.data(), static_cast<int64_t>(rows_got.size())))
        << hwy::TargetName(target);
  });
  EXPECT_GE(targets, 2);
}

// Placed Q8_0 and Q4_0 rows by AMX-INT8 tile products (amx_int8_kernel.h), emulated on every
// machine and the instruction where the CPU has it, are bitwise the plain rows' outputs (which
// never take the tiles): 3 groups, 17 units (the last pair half zeros), 32 and 48 tokens.
// Fail first: Q4_0's high nibbles' B rows swapped with the low ones' failed it; Q8_0's slices
// copied one unit's B half off (rows 8 (u + 1) % 2) failed it.
template <DType kT>
void expect_tile_products_are_the_plain_rows() {
  SCOPED_TRACE(dtype_name(kT));
  const int64_t n = 48, k = 544, units = k / 32;
  const auto blocks = random_blocks(kT, n, k, 40);
  std::vector<uint8_t> grouped(blocks.size());
  cpu::interleave_rows(blocks.data(), kT, k, cpu::kQuantGroup, 0, n, grouped.data());
  const auto x = random_values(static_cast<size_t>(48 * k), 41);
  std::vector<uint8_t> xq(cpu::quant_act_bytes(kT, k) * 48);
  cpu::quantize_activations(kT, x.data(), 48, k, xq.data());
  const auto* xb = reinterpret_cast<const cpu::Q8Block*>(xq.data());
  for (const int64_t tokens : {32, 48}) {
    std::vector<float> want(static_cast<size_t>(tokens * n)), got(want.size(), std::nanf(""));
    cpu::quant_dot_rows(kT, blocks.data(), n, k, xq.data(), tokens, want.data(), n);
    std::vector<int8_t> b(static_cast<size_t>(units * cpu::amx::int8::kTileBytes));
    std::vector<int8_t> xa(static_cast<size_t>(tokens * cpu::amx::int8::pairs_of(units) * 64));
    std::vector<float> dw(static_cast<size_t>(units * cpu::kQuantGroup)), xd(tokens * units);
    alignas(64) int32_t p[512];
    cpu::amx::int8::pack_x(xb, tokens, units, xa.data(), xd.data());
    cpu::amx::int8::rows_of<cpu::amx::EmulatedInt8Ops, kT>(grouped.data(), n, units, xa.data(), xd.data(), tokens,
                                                           got.data(), n, b.data(), dw.data(), p);
    EXPECT_EQ(bits(want.data(), tokens * n), bits(got.data(), tokens * n)) << "emulated, " << tokens << " tokens";
    if (!cpu::amx::int8_runs()) continue;
    std::fill(got.begin(), got.end(), std::nanf(""));
    cpu::amx::block32_rows(kT, grouped.data(), n, units, xq.data(), tokens, got.data(), n);
    EXPECT_EQ(bits(want.data(), tokens * n), bits(got.data(), tokens * n)) << "AMX-INT8, " << tokens << " tokens";
  }
}

TEST(QuantAmxTest, Q8_0AndQ4_0TileProductsAreBitwiseThePlainRows) {
  expect_tile_products_are_the_plain_rows<DType::kQ8_0>();
  expect_tile_products_are_the_plain_rows<DType::kQ4_0>();
}

// CpuDevice's matmuls and gate_up pack x once a call for every placed Q8_0 and Q4_0 weight
// that takes AMX-INT8 tiles (quant_matmul.cpp), where each thread's call packed its own: each
// output bitwise the plain rows' (which never take the tiles), 40 tokens, 1-3 threads, with a
// Q8_0 weight of 5 rows (not placed) beside them. Where the CPU has no AMX-INT8 nothing is
// packed and the test checks the vector kernels alone. Fail first: x packed with one block
// a token fewer failed it.
TEST(QuantAmxTest, PlacedQ8_0AndQ4_0WeightsOfOneCallShareOnePackedX) {
  const int64_t k = 544, tokens = 40;
  const auto x = random_values(static_cast<size_t>(tokens * k), 50);
  const std::vector<std::pair<DType, int64_t>> shapes{
      {DType::kQ4_0, 32}, {DType::kQ8_0, 5}, {DType::kQ4_0, 48}, {DType::kQ8_0, 32}};
  std::vector<std::vector<uint8_t>> blocks;
  for (size_t i = 0; i < shapes.size(); ++i)
    blocks.push_back(random_blocks(shapes[i].first, shapes[i].second, k, static_cast<uint32_t>(51 + i)));
  for (const size_t threads : {1, 2, 3}) {
    CpuDevice device(threads);
    std::vector<TensorView> plain, placed;
    for (size_t i = 0; i < shapes.size(); ++i) {
      plain.push_back({shapes[i].first, {shapes[i].second, k}, blocks[i].data()});
      auto p = device.place(plain.back());
      ASSERT_TRUE(p.ok()) << p.status().to_string();
      placed.push_back(*p);
    }
    ASSERT_EQ(placed[0].row_group, cpu::kQuantGroup);
    ASSERT_EQ(placed[3].row_group, cpu::kQuantGroup);
    const TensorView no_bias{};
    std::vector<std::vector<float>> want, got;
    std::vector<CpuDevice::Projection> outs;
    for (size_t i = 0; i < shapes.size(); ++i) {
      want.emplace_back(static_cast<size_t>(tokens * shapes[i].second));
      got.emplace_back(want.back().size(), std::nanf(""));
      device.matmul(x.data(), tokens, plain[i], {}, want.back().data());
    }
    for (size_t i = 0; i < shapes.size(); ++i) outs.push_back({&placed[i], &no_bias, got[i].data()});
    device.matmuls(x.data(), tokens, outs);
    for (size_t i = 0; i < shapes.size(); ++i)
      EXPECT_EQ(bits(want[i].data(), static_cast<int64_t>(want[i].size())),
                bits(got[i].data(), static_cast<int64_t>(got[i].size())))
          << "weight " << i << ", " << threads << " threads";
    // gate_up: gate placed Q4_0, up placed Q8_0 (one x, packed once), 32 rows each.
    std::vector<float> gate_want(static_cast<size_t>(tokens * 32)), up_want(gate_want.size());
    std::vector<float> gate_got(gate_want.size(), std::nanf("")), up_got(gate_want.size());
    const TensorView gate_plain{DType::kQ4_0, {32, k}, blocks[2].data()};  // the first 32 rows of the 48
    auto gate_placed = device.place(gate_plain);
    ASSERT_TRUE(gate_placed.ok());
    device.matmul(x.data(), tokens, gate_plain, {}, gate_want.data());
    device.matmul(x.data(), tokens, plain[3], {}, up_want.data());
    device.silu_mul(gate_want.data(), up_want.data(), tokens * 32, gate_want.data());
    device.gate_up(x.data(), tokens, *gate_placed, no_bias, placed[3], no_bias, up_got.data(), gate_got.data(), {});
    EXPECT_EQ(bits(gate_want.data(), tokens * 32), bits(gate_got.data(), tokens * 32)) << threads << " threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Types, QuantGroupsTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

INSTANTIATE_TEST_SUITE_P(Types, QuantMatmulTest,
                         ::testing::Values(DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace tessera
