// The CUDA device's operations against the CPU device's on the same inputs
// (ragged shapes, every weight and KV dtype, grouped heads, a sliding window,
// scattered blocks, more positions than one attention chunk), and the bitwise
// guarantees: a row of a matmul or a token of attention is the same alone as in
// a larger call. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <tuple>
#include <vector>

#include "backend/device.h"
#include "core/dtype.h"
#include "support/gpu.h"
#include "support/random_tensors.h"

namespace tessera {
namespace {

using testing::random_values;

Buffer put(Device& device, const void* data, size_t bytes) {
  auto buffer = device.alloc(bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status().to_string();
  device.upload(data, bytes, buffer->data());
  return std::move(buffer).value();
}

Buffer put(Device& device, const std::vector<float>& v) { return put(device, v.data(), v.size() * sizeof(float)); }

Buffer zeros(Device& device, size_t floats) { return put(device, std::vector<float>(floats, 0.0f)); }

std::vector<float> get(Device& device, const Buffer& buffer, size_t floats) {
  std::vector<float> out(floats);
  device.download(buffer.data(), floats * sizeof(float), out.data());
  return out;
}

TensorView view(DType dtype, std::vector<int64_t> shape, const void* data) { return {dtype, std::move(shape), data}; }

// Seeded random bf16 weights of `shape` ([n] or [n, k]), placed on the device.
TensorView place_random(Device& device, std::vector<int64_t> shape, uint32_t seed) {
  const DType dtype = DType::kBF16;
  const auto values =
      testing::random_weights(static_cast<size_t>(shape[0] * (shape.size() > 1 ? shape[1] : 1)), dtype, seed);
  auto placed = device.place(view(dtype, shape, values.data()));
  EXPECT_TRUE(placed.ok());
  return *placed;
}

// |got - want| within `relative` of `scale` at every element.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double relative, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1e-30;
  for (float w : want) scale = std::max(scale, double{std::fabs(w)});
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::fabs(double{got[i]} - want[i]), relative * scale) << what << " element " << i;
}

class CudaMatmulTest : public ::testing::TestWithParam<DType> {};

TEST_P(CudaMatmulTest, MatchesTheCpuOnRaggedShapesWithBias) {
  TESSERA_CUDA_OR_SKIP(gpu);
  auto cpu = make_cpu_device(2);
  const DType dtype = GetParam();
  for (const auto& [tokens, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 64, 9},
                                     {37, 67, 130},
                                     {5, 4096, 33},
                                     {300, 256, 7},
                                     {2, 13, 3},
                                     {20, 128, 50}}) {
    const auto x = random_values(static_cast<size_t>(tokens * k), 1);
    const auto w = testing::random_weights(static_cast<size_t>(n * k), dtype, 2);
    const auto b = testing::random_weights(static_cast<size_t>(n), dtype, 3);
    std::vector<float> want(static_cast<size_t>(tokens * n));
    cpu->matmul(x.data(), tokens, view(dtype, {n, k}, w.data()), view(dtype, {n}, b.data()), want.data());

    auto gw = gpu->place(view(dtype, {n, k}, w.data()));
    auto gb = gpu->place(view(dtype, {n}, b.data()));
    ASSERT_TRUE(gw.ok() && gb.ok());
    const Buffer gx = put(*gpu, x), gy = zeros(*gpu, want.size());
    gpu->matmul(gx.f32(), tokens, *gw, *gb, gy.f32());
    // bf16 weights run on tensor cores with x rounded to bf16 (as a bf16 model runs in
    // transformers): products carry x's rounding, about 2^-9 each.
    const double tolerance = dtype == DType::kBF16 ? 1e-2 : 1e-5;
    expect_close(get(*gpu, gy, want.size()), want, tolerance, "matmul");
  }
}

// Rows of a 300-token call are bitwise the rows computed alone or in another
// group of tokens: the sum's order depends only on k (batch invariance). k 1024
// takes tensor cores for bf16, k 1000 the FMA kernel; the groups span every token tile.
TEST_P(CudaMatmulTest, RowsAreBitwiseTheSameAloneAndInAnyBatch) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const DType dtype = GetParam();
  // k of 5, 16 and 45 chunks of 64 (the sums of the chunks split eight ways,
  // unevenly or with some empty) and one that is not a multiple of 64; 64 rows or
  // more take the tiled kernel (one sum per block, or with 8192 weight rows whole
  // outputs per block), fewer the other, and all give the same bits.
  for (const auto& [k, n] :
       {std::pair<int64_t, int64_t>{1000, 70}, {1024, 70}, {320, 300}, {2880, 200}, {1024, 8192}}) {
    const int64_t tokens = 300;
    const auto x = random_values(static_cast<size_t>(tokens * k), 4);
    const auto w = testing::random_weights(static_cast<size_t>(n * k), dtype, 5);
    auto gw = gpu->place(view(dtype, {n, k}, w.data()));
    ASSERT_TRUE(gw.ok());
    const Buffer gx = put(*gpu, x), gy = zeros(*gpu, static_cast<size_t>(tokens * n));
    gpu->matmul(gx.f32(), tokens, *gw, {}, gy.f32());
    const auto all = get(*gpu, gy, static_cast<size_t>(tokens * n));
    for (const auto& [first, count] : {std::pair<int64_t, int64_t>{0, 1},
                                       {150, 1},
                                       {299, 1},
                                       {145, 9},
                                       {3, 8},
                                       {40, 33},
                                       {10, 64},
                                       {1, 128},
                                       {100, 200}}) {
      const Buffer part = zeros(*gpu, static_cast<size_t>(count * n));
      gpu->matmul(gx.f32() + first * k, count, *gw, {}, part.f32());
      const auto got = get(*gpu, part, static_cast<size_t>(count * n));
      for (int64_t i = 0; i < count * n; ++i)
        ASSERT_EQ(got[static_cast<size_t>(i)], all[static_cast<size_t>(first * n + i)])
            << "k " << k << ", rows " << first << "+" << count << " element " << i;
    }
  }
}

// The fused calls (q, k and v in one launch; gate and up with SiLU in one; the
// residual add in the matmul's epilogue) give bitwise what the separate calls give,
// for every token tile (on tensor cores for bf16; by the defaults otherwise).
TEST_P(CudaMatmulTest, FusedCallsAreBitwiseTheSeparateCalls) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const DType dtype = GetParam();
  const int64_t k = 1024;
  struct Weight {
    TensorView w, b;
  };
  const auto weight = [&](int64_t n, uint32_t seed) {
    const auto w = testing::random_weights(static_cast<size_t>(n * k), dtype, seed);
    const auto b = testing::random_weights(static_cast<size_t>(n), dtype, seed + 1);
    auto gw = gpu->place(view(dtype, {n, k}, w.data()));
    auto gb = gpu->place(view(dtype, {n}, b.data()));
    EXPECT_TRUE(gw.ok() && gb.ok());
    return Weight{*gw, *gb};
  };
  // Small weights, and large ones: at 100 and 300 tokens the tiled kernel runs
  // their fused calls with whole outputs per block, the small ones (too few blocks
  // to fill the device) with one of the eight sums per block.
  for (const int64_t scale : {1, 64}) {
    const Weight q = weight(70 * scale, 10), kk = weight(33 * scale, 20), v = weight(33 * scale, 30),
                 gate = weight(90 * scale, 40), up = weight(90 * scale, 50);
    for (const int64_t tokens : {1, 5, 40, 100, 300}) {
      const Buffer x = put(*gpu, random_values(static_cast<size_t>(tokens * k), 6));
      const auto run = [&](const Weight& w, const Buffer& out) { gpu->matmul(x.f32(), tokens, w.w, w.b, out.f32()); };
      const auto rows = [&](const Weight& w) { return static_cast<size_t>(tokens * w.w.dim(0)); };
      // q, k, v
      const Buffer q1 = zeros(*gpu, rows(q)), k1 = zeros(*gpu, rows(kk)), v1 = zeros(*gpu, rows(v));
      const Buffer q2 = zeros(*gpu, rows(q)), k2 = zeros(*gpu, rows(kk)), v2 = zeros(*gpu, rows(v));
      run(q, q1), run(kk, k1), run(v, v1);
      const Device::Projection qkv[] = {{&q.w, &q.b, q2.f32()}, {&kk.w, &kk.b, k2.f32()}, {&v.w, &v.b, v2.f32()}};
      gpu->matmuls(x.f32(), tokens, qkv);
      EXPECT_EQ(get(*gpu, q2, rows(q)), get(*gpu, q1, rows(q))) << tokens << " tokens, q";
      EXPECT_EQ(get(*gpu, k2, rows(kk)), get(*gpu, k1, rows(kk))) << tokens << " tokens, k";
      EXPECT_EQ(get(*gpu, v2, rows(v)), get(*gpu, v1, rows(v))) << tokens << " tokens, v";
      // gate, up, SiLU
      const Buffer g1 = zeros(*gpu, rows(gate)), u1 = zeros(*gpu, rows(up)), g2 = zeros(*gpu, rows(gate)),
                   scratch = zeros(*gpu, rows(up));
      run(gate, g1), run(up, u1);
      gpu->silu_mul(g1.f32(), u1.f32(), static_cast<int64_t>(rows(gate)), g1.f32());
      gpu->gate_up(x.f32(), tokens, gate.w, gate.b, up.w, up.b, scratch.f32(), g2.f32());
      EXPECT_EQ(get(*gpu, g2, rows(gate)), get(*gpu, g1, rows(gate))) << tokens << " tokens, gate/up";
      // matmul then add
      const auto residual = random_values(rows(q), 7);
      const Buffer r1 = put(*gpu, residual), r2 = put(*gpu, residual), tmp = zeros(*gpu, rows(q));
      run(q, tmp);
      gpu->add(tmp.f32(), static_cast<int64_t>(rows(q)), r1.f32());
      gpu->matmul_add(x.f32(), tokens, q.w, q.b, tmp.f32(), r2.f32());
      EXPECT_EQ(get(*gpu, r2, rows(q)), get(*gpu, r1, rows(q))) << tokens << " tokens, matmul_add";
    }
  }
}

// A RowNorm before matmuls or gate_up gives bitwise rms_norm and then the call:
// the decode kernel normalizes x as it loads it (bf16 weights, up to 8 tokens)
// with rms_norm's own sums, for rows rms_norm holds in registers (k up to 4096)
// and rows it loops over (5120); the tiled kernel (40 tokens) as it rounds x to
// bf16; 31 tokens normalize first.
TEST(CudaDeviceTest, NormalizedMatmulsAreBitwiseTheNormThenTheMatmuls) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const float eps = 1e-5f;
  for (const int64_t k : {512, 4096, 5120}) {
    const auto place = [&](std::vector<int64_t> shape, uint32_t seed) { return place_random(*gpu, shape, seed); };
    const TensorView norm = place({k}, 1), wq = place({96, k}, 2), wk = place({32, k}, 3), bk = place({32}, 4),
                     gate = place({160, k}, 5), up = place({160, k}, 6), none{};
    for (const int64_t tokens : {1, 7, 31, 40}) {
      const Buffer x = put(*gpu, random_values(static_cast<size_t>(tokens * k), 7));
      const auto n = [&](int64_t rows) { return static_cast<size_t>(tokens * rows); };
      const Buffer normed = zeros(*gpu, n(k)), scratch = zeros(*gpu, n(k)), up_scratch = zeros(*gpu, n(160));
      const Buffer q1 = zeros(*gpu, n(96)), k1 = zeros(*gpu, n(32)), g1 = zeros(*gpu, n(160));
      const Buffer q2 = zeros(*gpu, n(96)), k2 = zeros(*gpu, n(32)), g2 = zeros(*gpu, n(160));
      gpu->rms_norm(x.f32(), tokens, k, norm, eps, normed.f32());
      const Device::Projection separate[] = {{&wq, &none, q1.f32()}, {&wk, &bk, k1.f32()}};
      gpu->matmuls(normed.f32(), tokens, separate);
      gpu->gate_up(normed.f32(), tokens, gate, none, up, none, up_scratch.f32(), g1.f32());
      const Device::Projection together[] = {{&wq, &none, q2.f32()}, {&wk, &bk, k2.f32()}};
      gpu->matmuls(x.f32(), tokens, together, {&norm, eps, scratch.f32()});
      gpu->gate_up(x.f32(), tokens, gate, none, up, none, up_scratch.f32(), g2.f32(), {&norm, eps, scratch.f32()});
      EXPECT_EQ(get(*gpu, q2, n(96)), get(*gpu, q1, n(96))) << "k " << k << ", " << tokens << " tokens, q";
      EXPECT_EQ(get(*gpu, k2, n(32)), get(*gpu, k1, n(32))) << "k " << k << ", " << tokens << " tokens, k";
      EXPECT_EQ(get(*gpu, g2, n(160)), get(*gpu, g1, n(160))) << "k " << k << ", " << tokens << " tokens, gate/up";
    }
  }
}

// matmul_add told the norm of the next call (a split tiled matmul normalizes its
// output for it while it adds the eight sums: 32-64 tokens on few rows) gives
// bitwise the residual, and then the q/k and gate/up of it, that the calls give
// untold: for rows rms_norm holds in registers (512, 4096) and rows it loops over
// (5120), a bias, tokens that take the decode kernel (31) or whole outputs (300:
// told, nothing changes), and a next call whose norm is not the one told (its eps).
TEST(CudaDeviceTest, MatmulAddToldTheNextNormIsBitwiseTheCallsUntold) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const float eps = 1e-5f;
  const int64_t k = 1024;
  for (const int64_t width : {512, 4096, 5120}) {
    const auto place = [&](std::vector<int64_t> shape, uint32_t seed) { return place_random(*gpu, shape, seed); };
    const TensorView wo = place({width, k}, 1), bo = place({width}, 2), norm = place({width}, 3),
                     wq = place({96, width}, 4), bq = place({96}, 5), gate = place({160, width}, 6),
                     up = place({160, width}, 7), none{};
    for (const int64_t tokens : {31, 32, 40, 64, 300}) {
      const Buffer x = put(*gpu, random_values(static_cast<size_t>(tokens * k), 8));
      const auto n = [&](int64_t rows) { return static_cast<size_t>(tokens * rows); };
      const auto residual = random_values(n(width), 9);
      const Buffer scratch = zeros(*gpu, n(width)), up_scratch = zeros(*gpu, n(160));
      // The residual after matmul_add, then q of it (next_eps told) and gate/up of it (told each time).
      const auto run = [&](float next_eps) {
        const RowNorm told{next_eps > 0 ? &norm : nullptr, next_eps, scratch.f32()}, next{&norm, eps, scratch.f32()};
        const Buffer r = put(*gpu, residual), q = zeros(*gpu, n(96)), g = zeros(*gpu, n(160));
        gpu->matmul_add(x.f32(), tokens, wo, bo, scratch.f32(), r.f32(), told);
        const Device::Projection qs[] = {{&wq, &bq, q.f32()}};
        gpu->matmuls(r.f32(), tokens, qs, next);
        const std::vector<float> after = get(*gpu, r, n(width));
        const Buffer r2 = put(*gpu, residual);
        gpu->matmul_add(x.f32(), tokens, wo, bo, scratch.f32(), r2.f32(), told);
        gpu->gate_up(r2.f32(), tokens, gate, none, up, none, up_scratch.f32(), g.f32(), next);
        EXPECT_EQ(get(*gpu, r2, n(width)), after);
        return std::tuple{after, get(*gpu, q, n(96)), get(*gpu, g, n(160))};
      };
      const auto [r1, q1, g1] = run(0.0f);
      for (const float told_eps : {eps, 1e-2f}) {
        const auto [r2, q2, g2] = run(told_eps);
        const auto at = [&] {
          return ::testing::Message() << "width " << width << ", " << tokens << " tokens, eps told " << told_eps;
        };
        EXPECT_EQ(r2, r1) << at() << ", residual";
        EXPECT_EQ(q2, q1) << at() << ", q";
        EXPECT_EQ(g2, g1) << at() << ", gate/up";
      }
    }
  }
}

// A split tiled matmul's blocks may each run 1, 2, 4 or all 8 of the eight sums
// (TESSERA_CUDA_GEMM_SUMS, else chosen so that the blocks make one wave), at 40
// tokens (tiles of 32, the second part empty) and 100 (tiles of 64): every choice
// gives bitwise what each token gets alone from the decode kernel, for q/k/v-like
// jobs and gate/up, with k's chunks dealt evenly (1024) or not (576: sum
// 0 takes two chunks, the rest one) and rows that leave a tile part empty.
TEST(CudaDeviceTest, TiledMatmulsAreBitwiseTheSameWhateverSumsABlockRuns) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const DType dtype = DType::kBF16;
  for (const auto& [tokens, k] : {std::pair<int64_t, int64_t>{40, 576}, {40, 1024}, {100, 1024}}) {
    const auto place = [&](int64_t rows, uint32_t seed) {
      const auto values = testing::random_weights(static_cast<size_t>(rows * k), dtype, seed);
      auto placed = gpu->place(view(dtype, {rows, k}, values.data()));
      EXPECT_TRUE(placed.ok());
      return *placed;
    };
    const TensorView wq = place(200, 1), wk = place(72, 2), gate = place(90, 3), up = place(90, 4), none{};
    const Buffer x = put(*gpu, random_values(static_cast<size_t>(tokens * k), 5));
    const auto n = [&](int64_t rows) { return static_cast<size_t>(tokens * rows); };
    const Buffer q = zeros(*gpu, n(200)), kk = zeros(*gpu, n(72)), g = zeros(*gpu, n(90)),
                 up_scratch = zeros(*gpu, n(90));
    const auto run = [&] {
      const Device::Projection qk[] = {{&wq, &none, q.f32()}, {&wk, &none, kk.f32()}};
      gpu->matmuls(x.f32(), tokens, qk);
      gpu->gate_up(x.f32(), tokens, gate, none, up, none, up_scratch.f32(), g.f32());
      return std::tuple{get(*gpu, q, n(200)), get(*gpu, kk, n(72)), get(*gpu, g, n(90))};
    };
    // Each token alone (one token takes the decode kernel).
    std::vector<float> q1(n(200)), k1(n(72)), g1(n(90));
    for (int64_t t = 0; t < tokens; ++t) {
      const Buffer qt = zeros(*gpu, 200), kt = zeros(*gpu, 72), gt = zeros(*gpu, 90), ut = zeros(*gpu, 90);
      const Device::Projection qk[] = {{&wq, &none, qt.f32()}, {&wk, &none, kt.f32()}};
      gpu->matmuls(x.f32() + t * k, 1, qk);
      gpu->gate_up(x.f32() + t * k, 1, gate, none, up, none, ut.f32(), gt.f32());
      std::ranges::copy(get(*gpu, qt, 200), q1.begin() + t * 200);
      std::ranges::copy(get(*gpu, kt, 72), k1.begin() + t * 72);
      std::ranges::copy(get(*gpu, gt, 90), g1.begin() + t * 90);
    }
    for (const char* sums : {"", "1", "2", "4", "8"}) {
      ASSERT_EQ(setenv("TESSERA_CUDA_GEMM_SUMS", sums, 1), 0);
      const auto [q2, k2, g2] = run();
      const auto at = [&] { return ::testing::Message() << tokens << " tokens, k " << k << ", sums a block " << sums; };
      EXPECT_EQ(q2, q1) << at() << ", q";
      EXPECT_EQ(k2, k1) << at() << ", k";
      EXPECT_EQ(g2, g1) << at() << ", gate/up";
    }
    unsetenv("TESSERA_CUDA_GEMM_SUMS");
  }
}

// Up to 8 tokens, the decode kernel sums gate's and up's chunks in one pass: bitwise
// gate's and up's separate matmuls and SiLU·mul, with the norm in the matmul and
// without, for few rows (a block an SM at most: 90) and many (2,200), k's chunks in
// whole rounds of eight or not (576), and 1, 3 and 8 tokens.
TEST(CudaDeviceTest, DecodeGateUpInOnePassIsBitwiseTheSeparateMatmuls) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const float eps = 1e-5f;
  for (const int64_t k : {576, 4096}) {
    const TensorView norm = place_random(*gpu, {k}, 1), none{};
    for (const int64_t rows : {90, 2200}) {
      const TensorView gate = place_random(*gpu, {rows, k}, 2), up = place_random(*gpu, {rows, k}, 3);
      for (const int64_t tokens : {1, 3, 8}) {
        const Buffer x = put(*gpu, random_values(static_cast<size_t>(tokens * k), 4));
        const auto n = static_cast<size_t>(tokens * rows);
        const auto fused = [&](bool normalize) {
          const Buffer g = zeros(*gpu, n), up_scratch = zeros(*gpu, n),
                       scratch = zeros(*gpu, static_cast<size_t>(tokens * k));
          gpu->gate_up(x.f32(), tokens, gate, none, up, none, up_scratch.f32(), g.f32(),
                       normalize ? RowNorm{&norm, eps, scratch.f32()} : RowNorm{});
          return get(*gpu, g, n);
        };
        const auto separate = [&](bool normalize) {
          const Buffer g = zeros(*gpu, n), u = zeros(*gpu, n), normed = zeros(*gpu, static_cast<size_t>(tokens * k));
          const float* in = x.f32();
          if (normalize) gpu->rms_norm(x.f32(), tokens, k, norm, eps, normed.f32()), in = normed.f32();
          gpu->matmul(in, tokens, gate, none, g.f32());
          gpu->matmul(in, tokens, up, none, u.f32());
          gpu->silu_mul(g.f32(), u.f32(), static_cast<int64_t>(n), g.f32());
          return get(*gpu, g, n);
        };
        const auto at = [&] {
          return ::testing::Message() << "k " << k << ", " << rows << " rows, " << tokens << " tokens";
        };
        EXPECT_EQ(fused(false), separate(false)) << at();
        EXPECT_EQ(fused(true), separate(true)) << at() << ", normalized";
      }
    }
  }
}

// gate/up's tiled blocks of 32 tokens hold 56 rows of gate and of up where that
// evens out the SMs' work, 64 otherwise: either way each token's outputs are bitwise
// what it gets alone from the decode kernel, with the eight sums split (90 rows) or
// whole outputs a block (4,000 rows: 72 tiles of 56, the last part empty), at 40
// tokens (56 rows), 64 and 100 (64 rows), with k's chunks dealt evenly (1024) or
// not (576).
TEST(CudaDeviceTest, GateUpTilesOf56Or64RowsAreBitwiseEachTokenAlone) {
  TESSERA_CUDA_OR_SKIP(gpu);
  for (const int64_t k : {576, 1024}) {
    for (const int64_t rows : {90, 4000}) {
      const TensorView gate = place_random(*gpu, {rows, k}, 1), up = place_random(*gpu, {rows, k}, 2), none{};
      for (const int64_t tokens : {40, 64, 100}) {
        const Buffer x = put(*gpu, random_values(static_cast<size_t>(tokens * k), 3));
        const auto n = static_cast<size_t>(tokens * rows);
        const Buffer g = zeros(*gpu, n), up_scratch = zeros(*gpu, n);
        gpu->gate_up(x.f32(), tokens, gate, none, up, none, up_scratch.f32(), g.f32());
        const auto together = get(*gpu, g, n);
        std::vector<float> alone(n);
        const Buffer gt = zeros(*gpu, static_cast<size_t>(rows)), ut = zeros(*gpu, static_cast<size_t>(rows));
        for (int64_t t = 0; t < tokens; ++t) {
          gpu->gate_up(x.f32() + t * k, 1, gate, none, up, none, ut.f32(), gt.f32());
          std::ranges::copy(get(*gpu, gt, static_cast<size_t>(rows)), alone.begin() + t * rows);
        }
        EXPECT_EQ(together, alone) << "k " << k << ", " << rows << " rows, " << tokens << " tokens";
      }
    }
  }
}

// Tiles of 128 tokens with whole outputs a block run on wgmma where the device has
// it: bitwise what the mma.sync kernel gives (TESSERA_CUDA_WGMMA=0), for q/k-like
// jobs with a bias, gate/up, and matmul_add, with k's chunks dealt evenly (1024) or
// not (576), rows that leave a tile part empty, and a last token tile part empty.
TEST(CudaDeviceTest, TiledMatmulsOnWgmmaAreBitwiseTheMmaSyncKernels) {
  TESSERA_CUDA_OR_SKIP(gpu);
  for (const int64_t k : {576, 1024}) {
    const auto place = [&](std::vector<int64_t> shape, uint32_t seed) { return place_random(*gpu, shape, seed); };
    const TensorView wq = place({3000, k}, 1), bq = place({3000}, 2), wk = place({520, k}, 3),
                     gate = place({1500, k}, 4), up = place({1500, k}, 5), none{};
    for (const int64_t tokens : {300, 513}) {
      const Buffer x = put(*gpu, random_values(static_cast<size_t>(tokens * k), 6));
      const auto n = [&](int64_t rows) { return static_cast<size_t>(tokens * rows); };
      const auto residual = random_values(n(3000), 7);
      const auto run = [&](const char* wgmma) {
        EXPECT_EQ(setenv("TESSERA_CUDA_WGMMA", wgmma, 1), 0);
        const Buffer q = zeros(*gpu, n(3000)), kk = zeros(*gpu, n(520)), g = zeros(*gpu, n(1500)),
                     up_scratch = zeros(*gpu, n(1500)), r = put(*gpu, residual), tmp = zeros(*gpu, n(3000));
        const Device::Projection qk[] = {{&wq, &bq, q.f32()}, {&wk, &none, kk.f32()}};
        gpu->matmuls(x.f32(), tokens, qk);
        gpu->gate_up(x.f32(), tokens, gate, none, up, none, up_scratch.f32(), g.f32());
        gpu->matmul_add(x.f32(), tokens, wq, bq, tmp.f32(), r.f32());
        unsetenv("TESSERA_CUDA_WGMMA");
        return std::tuple{get(*gpu, q, n(3000)), get(*gpu, kk, n(520)), get(*gpu, g, n(1500)), get(*gpu, r, n(3000))};
      };
      const auto [q1, k1, g1, r1] = run("0");
      const auto [q2, k2, g2, r2] = run("1");
      EXPECT_EQ(q2, q1) << "k " << k << ", " << tokens << " tokens, q";
      EXPECT_EQ(k2, k1) << "k " << k << ", " << tokens << " tokens, k";
      EXPECT_EQ(g2, g1) << "k " << k << ", " << tokens << " tokens, gate/up";
      EXPECT_EQ(r2, r1) << "k " << k << ", " << tokens << " tokens, matmul_add";
    }
  }
}

// A tiled matmul right after gate_up reads gate_up's output as gate_up also wrote it
// rounded to bf16, instead of rounding it again: bitwise the matmul of a copy of it
// (rounded by the matmul), with whole outputs a block (8192 rows; at 300 tokens on
// wgmma where the device has it) and split ones.
TEST(CudaDeviceTest, MatmulAfterGateUpIsBitwiseTheMatmulOfACopy) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const int64_t k = 512;
  for (const auto& shape : {std::pair<int64_t, int64_t>{128, 40}, {8192, 40}, {8192, 300}}) {
    const int64_t rows = shape.first, tokens = shape.second;
    const auto place = [&](std::vector<int64_t> shape, uint32_t seed) { return place_random(*gpu, shape, seed); };
    const TensorView gate = place({rows, k}, 1), up = place({rows, k}, 2), down = place({96, rows}, 3), none{};
    const Buffer x = put(*gpu, random_values(static_cast<size_t>(tokens * k), 4));
    const auto n = [&](int64_t width) { return static_cast<size_t>(tokens * width); };
    const Buffer g = zeros(*gpu, n(rows)), copied = zeros(*gpu, n(rows)), up_scratch = zeros(*gpu, n(rows));
    const Buffer y1 = zeros(*gpu, n(96)), y2 = zeros(*gpu, n(96));
    gpu->gate_up(x.f32(), tokens, gate, none, up, none, up_scratch.f32(), g.f32());
    gpu->matmul(g.f32(), tokens, down, none, y1.f32());
    gpu->copy(g.data(), n(rows) * sizeof(float), copied.data());
    gpu->matmul(copied.f32(), tokens, down, none, y2.f32());
    EXPECT_EQ(get(*gpu, y1, n(96)), get(*gpu, y2, n(96))) << rows << " rows, " << tokens << " tokens";
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaMatmulTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(CudaDeviceTest, NormEmbedRopeSiluAndAddMatchTheCpu) {
  TESSERA_CUDA_OR_SKIP(gpu);
  auto cpu = make_cpu_device(1);
  const int64_t rows = 5, dim = 200, heads = 3, head_dim = 40;
  const auto x = random_values(static_cast<size_t>(rows * dim), 6);
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const auto weight = testing::random_weights(static_cast<size_t>(dim), dtype, 7);
    std::vector<float> want(x.size());
    cpu->rms_norm(x.data(), rows, dim, view(dtype, {dim}, weight.data()), 1e-5f, want.data());
    auto gw = gpu->place(view(dtype, {dim}, weight.data()));
    ASSERT_TRUE(gw.ok());
    const Buffer gx = put(*gpu, x), gy = zeros(*gpu, x.size());
    gpu->rms_norm(gx.f32(), rows, dim, *gw, 1e-5f, gy.f32());
    expect_close(get(*gpu, gy, x.size()), want, 1e-6, "rms_norm");

    const std::vector<int32_t> ids = {4, 0, 4, 2};
    const auto table = testing::random_weights(static_cast<size_t>(5 * dim), dtype, 8);
    std::vector<float> embedded(ids.size() * dim);
    cpu->embed(view(dtype, {5, dim}, table.data()), ids, embedded.data());
    auto gt = gpu->place(view(dtype, {5, dim}, table.data()));
    ASSERT_TRUE(gt.ok());
    const Buffer ge = zeros(*gpu, embedded.size());
    gpu->embed(*gt, ids, ge.f32());
    EXPECT_EQ(get(*gpu, ge, embedded.size()), embedded) << "embed " << dtype_name(dtype);
  }

  const auto inv_freq = random_values(static_cast<size_t>(head_dim / 2), 9);
  const auto q = random_values(static_cast<size_t>(rows * heads * head_dim), 10);
  std::vector<float> rotated = q;
  cpu->rope(rotated.data(), rows, heads, head_dim, 1000, {.inv_freq = inv_freq.data()});
  const Buffer gq = put(*gpu, q), gf = put(*gpu, inv_freq);
  gpu->rope(gq.f32(), rows, heads, head_dim, 1000, {.inv_freq = gf.f32()});
  expect_close(get(*gpu, gq, q.size()), rotated, 1e-5, "rope");

  const auto up = random_values(x.size(), 11);
  std::vector<float> gated(x.size()), summed = up;
  cpu->silu_mul(x.data(), up.data(), static_cast<int64_t>(x.size()), gated.data());
  cpu->add(x.data(), static_cast<int64_t>(x.size()), summed.data());
  const Buffer gx = put(*gpu, x), gu = put(*gpu, up), gg = zeros(*gpu, x.size());
  gpu->silu_mul(gx.f32(), gu.f32(), static_cast<int64_t>(x.size()), gg.f32());
  gpu->add(gx.f32(), static_cast<int64_t>(x.size()), gu.f32());
  expect_close(get(*gpu, gg, x.size()), gated, 1e-6, "silu_mul");
  EXPECT_EQ(get(*gpu, gu, x.size()), summed) << "add";
}

// Keys and values of `positions` positions stored through kv_store into
// scattered blocks of layer 1, then attention for the last `tokens` of them.
struct AttentionCase {
  DType dtype;
  int64_t head_dim, positions, tokens, window;
};

std::vector<float> run_attention(Device& device, const AttentionCase& c, int64_t first_query, int64_t tokens) {
  const int64_t n_heads = 4, n_kv = 2, block_size = 16;
  const int64_t needed = (c.positions + block_size - 1) / block_size;
  std::vector<int32_t> blocks(static_cast<size_t>(needed + 5));  // distinct blocks in a scattered order
  std::iota(blocks.begin(), blocks.end(), 0);
  std::shuffle(blocks.begin(), blocks.end(), std::mt19937(15));
  blocks.resize(static_cast<size_t>(needed));
  KvPages pages{.dtype = c.dtype,
                .blocks = needed + 5,
                .block_size = block_size,
                .layers = 2,
                .n_kv_heads = n_kv,
                .head_dim = c.head_dim};
  auto memory = device.alloc(static_cast<size_t>(pages.blocks) * pages.block_bytes());
  EXPECT_TRUE(memory.ok());
  pages.base = memory->data();
  const auto k = random_values(static_cast<size_t>(c.positions * n_kv * c.head_dim), 12);
  const auto v = random_values(k.size(), 13);
  const Buffer gk = put(device, k), gv = put(device, v);
  device.kv_store(pages, 1, blocks, 0, c.positions, gk.f32(), gv.f32());
  const auto q = random_values(static_cast<size_t>(c.tokens * n_heads * c.head_dim), 14);
  const Buffer gq = put(device, q), out = zeros(device, q.size());
  const int64_t skip = first_query - (c.positions - c.tokens);  // queries before first_query are not asked for
  device.attention(AttentionArgs{.q = gq.f32() + skip * n_heads * c.head_dim,
                                 .out = out.f32(),
                                 .pages = &pages,
                                 .layer = 1,
                                 .blocks = blocks,
                                 .tokens = tokens,
                                 .pos0 = first_query,
                                 .n_heads = n_heads,
                                 .sliding_window = c.window,
                                 .scale = 0.125f});
  return get(device, out, static_cast<size_t>(tokens * n_heads * c.head_dim));
}

class CudaAttentionTest : public ::testing::TestWithParam<DType> {};

TEST_P(CudaAttentionTest, MatchesTheCpuWithGroupsWindowScatteredBlocksAndLongContexts) {
  TESSERA_CUDA_OR_SKIP(gpu);
  auto cpu = make_cpu_device(2);
  // The last case: a 130-token prompt chunk.
  for (const AttentionCase c : {AttentionCase{GetParam(), 64, 23, 3, 0}, AttentionCase{GetParam(), 80, 300, 4, 0},
                                AttentionCase{GetParam(), 128, 290, 5, 133}, AttentionCase{GetParam(), 8, 9, 9, 4},
                                AttentionCase{GetParam(), 128, 200, 130, 0}}) {
    const int64_t first = c.positions - c.tokens;
    // 16-bit pages with head_dim 64 or 128 and no window take tensor cores: q and
    // the weights rounded to the pages' 16 bits (as transformers computes them).
    const bool rounded = c.dtype != DType::kF32 && c.window == 0 && (c.head_dim == 64 || c.head_dim == 128);
    const double tolerance = !rounded ? 1e-5 : c.dtype == DType::kBF16 ? 2e-2 : 4e-3;
    expect_close(run_attention(*gpu, c, first, c.tokens), run_attention(*cpu, c, first, c.tokens), tolerance,
                 "attention");
  }
}

// A token's output is bitwise the same asked alone or with other tokens of its sequence.
TEST_P(CudaAttentionTest, TokenIsBitwiseTheSameAloneAndWithOthers) {
  TESSERA_CUDA_OR_SKIP(gpu);
  // A short step and a 200-token prompt chunk; the first, a middle and the last
  // token asked alone.
  for (const AttentionCase c :
       {AttentionCase{GetParam(), 64, 300, 4, 0}, AttentionCase{GetParam(), 128, 300, 200, 0}}) {
    const int64_t first = c.positions - c.tokens;
    const auto together = run_attention(*gpu, c, first, c.tokens);
    for (const int64_t pos : {first, first + c.tokens / 2, c.positions - 1}) {
      const auto alone = run_attention(*gpu, c, pos, 1);
      const auto at =
          together.begin() + static_cast<std::ptrdiff_t>((pos - first) * static_cast<int64_t>(alone.size()));
      EXPECT_EQ(alone, std::vector<float>(at, at + static_cast<std::ptrdiff_t>(alone.size())))
          << c.tokens << " tokens, position " << pos;
    }
  }
}

// A block may take several partitions one after another (TESSERA_CUDA_ATTENTION_SPAN,
// else chosen by the number of blocks): every span gives bitwise the outputs of
// one partition a block, also when the last block's span is cut short (3 of 5),
// and so does a block that takes all its tokens' partitions and merges them
// itself (span 0) instead of the combine kernel; 3 tokens at 600 positions merge
// 10 partitions, and so does a lone decode token at 600 or 150 (what a decode
// step of head_dim 128 and few sequences takes whole by default): its block
// spreads the partitions over its warps four at a time, or takes them in one
// warp (TESSERA_CUDA_ATTENTION_SPREAD=0); its spread blocks run in clusters that
// share the partitions, block 0 merging them all (5 blocks of two partitions at
// 600 positions, 8 of three at 1,100), or alone. The merge kernel loads 16 partitions
// ahead (18 at 1,100 positions: two rounds) or each in turn
// (TESSERA_CUDA_COMBINE_AHEAD=0), the same bits.
TEST_P(CudaAttentionTest, OutputsAreBitwiseTheSameWhateverPartitionsABlockTakes) {
  TESSERA_CUDA_OR_SKIP(gpu);
  for (const AttentionCase c : {AttentionCase{GetParam(), 128, 300, 200, 0}, AttentionCase{GetParam(), 64, 300, 3, 0},
                                AttentionCase{GetParam(), 128, 600, 3, 0}, AttentionCase{GetParam(), 128, 600, 1, 0},
                                AttentionCase{GetParam(), 64, 600, 1, 0}, AttentionCase{GetParam(), 64, 150, 1, 0},
                                AttentionCase{GetParam(), 64, 1100, 1, 0}}) {
    const int64_t first = c.positions - c.tokens;
    ASSERT_EQ(setenv("TESSERA_CUDA_ATTENTION_SPAN", "1", 1), 0);
    const auto one = run_attention(*gpu, c, first, c.tokens);
    // The merge kernel waiting for each partition's loads in turn.
    ASSERT_EQ(setenv("TESSERA_CUDA_COMBINE_AHEAD", "0", 1), 0);
    EXPECT_EQ(run_attention(*gpu, c, first, c.tokens), one) << c.tokens << " tokens, the merge without loads ahead";
    unsetenv("TESSERA_CUDA_COMBINE_AHEAD");
    for (const char* span : {"2", "3", "4", "8", "0"}) {
      ASSERT_EQ(setenv("TESSERA_CUDA_ATTENTION_SPAN", span, 1), 0);
      EXPECT_EQ(run_attention(*gpu, c, first, c.tokens), one) << c.tokens << " tokens, span " << span;
    }
    // A lone token's spread blocks in clusters of other sizes (by default as many as take four partitions each):
    // none, and 2 (1,100 positions: 18 partitions in three rounds of 8).
    for (const char* cluster : {"0", "2"}) {
      ASSERT_EQ(setenv("TESSERA_CUDA_ATTENTION_CLUSTER", cluster, 1), 0);
      EXPECT_EQ(run_attention(*gpu, c, first, c.tokens), one) << c.tokens << " tokens, clusters of " << cluster;
    }
    unsetenv("TESSERA_CUDA_ATTENTION_CLUSTER");
    // The whole in one warp (a lone token's block spreads its partitions over its warps by default).
    ASSERT_EQ(setenv("TESSERA_CUDA_ATTENTION_SPREAD", "0", 1), 0);
    EXPECT_EQ(run_attention(*gpu, c, first, c.tokens), one) << c.tokens << " tokens, the whole in one warp";
    unsetenv("TESSERA_CUDA_ATTENTION_SPREAD");
    unsetenv("TESSERA_CUDA_ATTENTION_SPAN");
  }
}

// A step's q, k and v with rope and the KV store in the matmuls (project_attend:
// rotate-half over whole heads, 16-bit pages; up to 8 tokens in the decode
// kernel's epilogue, 32 and more where the tiled matmul splits the sums, in the
// launch that adds them) give bitwise what the matmuls and then attend give
// (TESSERA_CUDA_ROPE_IN_MATMUL=0): q and k turned, v, every byte of the pages and
// the attention's output, for sequences at scattered positions and blocks (three
// of 1, 2 and 1 tokens, one alone, 33 and 60 sequences of a token and one of 2 or
// 4), with biases and a scaled rope, head_dim 64 and 128, bf16 and f16 pages.
TEST(CudaDeviceTest, RopeAndKvStoreInTheQkvMatmulsAreBitwiseTheSeparateLaunches) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const int64_t k = 512, block_size = 16;
  const float eps = 1e-5f;
  struct Case {
    DType pages;
    int64_t head_dim, n_heads, n_kv;
    bool bias;
    std::vector<int64_t> tokens;  // each sequence's tokens in the step
    float scaling;
  };
  const auto many = [](int64_t sequences, int64_t last) {
    std::vector<int64_t> tokens(static_cast<size_t>(sequences), 1);
    tokens.push_back(last);
    return tokens;
  };
  for (const Case& c :
       {Case{DType::kBF16, 128, 4, 2, false, {1, 2, 1}, 1.0f}, Case{DType::kF16, 64, 8, 2, true, {1, 2, 1}, 0.75f},
        Case{DType::kBF16, 64, 4, 1, true, {1}, 1.0f}, Case{DType::kBF16, 128, 4, 2, true, many(33, 2), 1.0f},
        Case{DType::kF16, 64, 8, 2, false, many(60, 4), 0.75f}}) {
    const int64_t hd = c.head_dim, n_q = c.n_heads * hd, n_kv = c.n_kv * hd;
    const auto place = [&](std::vector<int64_t> shape, uint32_t seed) { return place_random(*gpu, shape, seed); };
    const TensorView norm = place({k}, 1), wq = place({n_q, k}, 2), wk = place({n_kv, k}, 3), wv = place({n_kv, k}, 4);
    const TensorView none{}, bq = c.bias ? place({n_q}, 5) : none, bk = c.bias ? place({n_kv}, 6) : none,
                             bv = c.bias ? place({n_kv}, 7) : none;
    // Sequence s at positions [37 + 23 s, ...), its blocks distinct and out of order.
    const auto pos0_of = [](size_t s) { return 37 + 23 * static_cast<int64_t>(s); };
    std::vector<std::vector<int32_t>> tables;
    std::vector<SeqSlice> parts;
    int64_t tokens = 0;
    int32_t blocks = 0;
    for (size_t s = 0; s < c.tokens.size(); ++s) {
      std::vector<int32_t> table(static_cast<size_t>((pos0_of(s) + c.tokens[s] + block_size - 1) / block_size));
      std::iota(table.begin(), table.end(), blocks);
      std::shuffle(table.begin(), table.end(), std::mt19937(static_cast<uint32_t>(20 + s)));
      blocks += static_cast<int32_t>(table.size());
      tables.push_back(std::move(table));
      tokens += c.tokens[s];
    }
    for (size_t s = 0; s < c.tokens.size(); ++s) parts.push_back({c.tokens[s], pos0_of(s), tables[s]});
    std::vector<float> inv_freq(static_cast<size_t>(hd / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i)
      inv_freq[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / static_cast<float>(hd));
    const Buffer freq = put(*gpu, inv_freq), x = put(*gpu, random_values(static_cast<size_t>(tokens * k), 8));
    KvPages pages{.dtype = c.pages,
                  .blocks = blocks,
                  .block_size = block_size,
                  .layers = 2,
                  .n_kv_heads = c.n_kv,
                  .head_dim = hd};
    const size_t page_bytes = static_cast<size_t>(blocks) * pages.block_bytes();
    struct Outputs {
      std::vector<float> q, k, v, out;
      std::vector<uint8_t> pages;
    };
    const auto run = [&](const char* fused) {
      EXPECT_EQ(setenv("TESSERA_CUDA_ROPE_IN_MATMUL", fused, 1), 0);
      const Buffer memory = put(*gpu, std::vector<uint8_t>(page_bytes).data(), page_bytes);
      pages.base = memory.data();
      const auto n = [&](int64_t rows) { return static_cast<size_t>(tokens * rows); };
      const Buffer q = zeros(*gpu, n(n_q)), kk = zeros(*gpu, n(n_kv)), v = zeros(*gpu, n(n_kv)),
                   out = zeros(*gpu, n(n_q)), scratch = zeros(*gpu, n(k));
      const Device::Projection qkv[] = {{&wq, &bq, q.f32()}, {&wk, &bk, kk.f32()}, {&wv, &bv, v.f32()}};
      gpu->project_attend(x.f32(), tokens, qkv, {&norm, eps, scratch.f32()},
                          AttendArgs{.q = q.f32(),
                                     .k = kk.f32(),
                                     .v = v.f32(),
                                     .out = out.f32(),
                                     .pages = &pages,
                                     .layer = 1,
                                     .parts = parts,
                                     .n_heads = c.n_heads,
                                     .scale = 1.0f / std::sqrt(static_cast<float>(hd)),
                                     .rotary = {.inv_freq = freq.f32(), .scaling = c.scaling}});
      Outputs o{get(*gpu, q, n(n_q)), get(*gpu, kk, n(n_kv)), get(*gpu, v, n(n_kv)), get(*gpu, out, n(n_q)),
                std::vector<uint8_t>(page_bytes)};
      gpu->download(memory.data(), page_bytes, o.pages.data());
      unsetenv("TESSERA_CUDA_ROPE_IN_MATMUL");
      return o;
    };
    const Outputs separate = run("0"), fused = run("1");
    const std::string what = "head_dim " + std::to_string(hd) + ", " + std::to_string(tokens) + " tokens";
    EXPECT_EQ(fused.q, separate.q) << what << ": q";
    EXPECT_EQ(fused.k, separate.k) << what << ": k";
    EXPECT_EQ(fused.v, separate.v) << what << ": v";
    EXPECT_EQ(fused.pages, separate.pages) << what << ": the pages";
    EXPECT_EQ(fused.out, separate.out) << what << ": attention";
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaAttentionTest, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// The first largest of each row, as std::max_element: ties at both ends, a row of
// -inf, the largest last in a vocabulary-sized row, and random rows of few values
// (many ties).
TEST(CudaDeviceTest, ArgmaxIsTheFirstLargestOfEachRowAsOnTheHost) {
  TESSERA_CUDA_OR_SKIP(gpu);
  for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{128256}}) {
    const int64_t rows = 6;
    std::vector<float> x(static_cast<size_t>(rows * n));
    std::mt19937 rng(static_cast<uint32_t>(n));
    for (float& v : x) v = static_cast<float>(rng() % 5);  // few values: ties everywhere
    std::fill(x.begin() + n, x.begin() + 2 * n, -INFINITY);
    x[static_cast<size_t>(3 * n - 1)] = 9;  // row 2's largest is its last
    x[static_cast<size_t>(3 * n)] = 9;      // row 3's first and last are its largest
    x[static_cast<size_t>(4 * n - 1)] = 9;
    const Buffer gx = put(*gpu, x);
    auto ids = gpu->alloc(static_cast<size_t>(rows) * sizeof(int32_t));
    ASSERT_TRUE(ids.ok());
    gpu->argmax(gx.f32(), rows, n, static_cast<int32_t*>(ids->data()));
    std::vector<int32_t> got(static_cast<size_t>(rows));
    gpu->download(ids->data(), got.size() * sizeof(int32_t), got.data());
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = x.begin() + r * n;
      EXPECT_EQ(got[static_cast<size_t>(r)], std::max_element(row, row + n) - row) << "n " << n << " row " << r;
    }
  }
}

TEST(CudaDeviceTest, AllocationThatDoesNotFitIsRefusedNamingItsSizeAndTheDeviceGoesOn) {
  TESSERA_CUDA_OR_SKIP(gpu);
  auto huge = gpu->alloc(size_t{1} << 52);
  ASSERT_FALSE(huge.ok());
  EXPECT_EQ(huge.status().kind(), ErrorKind::kOverloaded);
  EXPECT_NE(huge.status().message().find("cannot allocate 4194304.00 GiB"), std::string::npos)
      << huge.status().to_string();
  const std::vector<float> values = {1, 2, 3};
  const Buffer small = put(*gpu, values);
  gpu->add(small.f32(), 3, small.f32());
  EXPECT_EQ(get(*gpu, small, 3), (std::vector<float>{2, 4, 6}));
}

}  // namespace
}  // namespace tessera
