// The CUDA kernels on GGUF blocks (backend/cuda/quant.cuh) against the CPU device
// on the same blocks: the activations rounded to 8 bits bitwise as the CPU rounds
// them (one-hot weight rows make each product one rounded value times its scale),
// the products within the rounding of their f32 sums, the embedding bitwise, a
// token's outputs bitwise the same alone as in any batch, and the fixture GGUF
// models' logits near the CPU's. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/quant_act.h"
#include "backend/cpu/quant_matmul.h"
#include "backend/device.h"
#include "io/gguf_fixtures.h"
#include "io/quantize.h"
#include "model/forward.h"
#include "support/gguf_units.h"
#include "support/gpu.h"
#include "support/random_tensors.h"

namespace tessera {
namespace {

constexpr DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

// A device copy of host bytes, and back.
struct OnDevice {
  Buffer buffer;
  OnDevice(Device& device, const void* data, size_t bytes) {
    auto made = device.alloc(bytes);
    EXPECT_TRUE(made.ok()) << made.status().to_string();
    buffer = std::move(made).value();
    device.upload(data, bytes, buffer.data());
  }
  float* f32() const { return static_cast<float*>(buffer.data()); }
  std::vector<float> read(Device& device, size_t floats) const {
    std::vector<float> out(floats);
    device.download(buffer.data(), floats * sizeof(float), out.data());
    return out;
  }
};

// y [tokens, n] of `device` for the weight blocks (placed there), x and bias, plus
// `y0` when accumulating (matmul_add).
std::vector<float> run(Device& device, const TensorView& w, const std::vector<float>& x, int64_t tokens,
                       const std::vector<float>* bias = nullptr, const std::vector<float>* y0 = nullptr) {
  auto placed = device.place(w);
  EXPECT_TRUE(placed.ok()) << placed.status().to_string();
  if (!placed.ok()) return {};
  const int64_t n = w.dim(0);
  OnDevice xd(device, x.data(), x.size() * sizeof(float));
  std::vector<float> start = y0 != nullptr ? *y0 : std::vector<float>(static_cast<size_t>(tokens * n), 0.0f);
  OnDevice y(device, start.data(), start.size() * sizeof(float));
  OnDevice b(device, bias != nullptr ? bias->data() : start.data(), static_cast<size_t>(n) * sizeof(float));
  const TensorView bias_view = bias != nullptr ? TensorView{DType::kF32, {n}, b.f32()} : TensorView{};
  if (y0 != nullptr) {
    OnDevice scratch(device, start.data(), start.size() * sizeof(float));
    device.matmul_add(xd.f32(), tokens, *placed, bias_view, scratch.f32(), y.f32());
  } else {
    device.matmul(xd.f32(), tokens, *placed, bias_view, y.f32());
  }
  return y.read(device, start.size());
}

// n rows of k elements of `type`, quantized by tessera quantize's reference quantizers
// (llama-quantize's blocks) from random values.
std::vector<uint8_t> real_blocks(DType type, int64_t n, int64_t k, uint32_t seed) {
  const std::vector<float> values = testing::random_values(static_cast<size_t>(n * k), seed);
  std::vector<uint8_t> blocks(dtype_bytes(type, n * k));
  quantize_blocks(type, values, blocks);
  return blocks;
}

// Row r of k rows is one-hot: its weight r is 1, every other 0 (scales 1, mins 0), so
// its product with a token is that token's rounded activation r times its scale.
std::vector<uint8_t> one_hot_rows(DType type, int64_t k) {
  const int64_t elems = dtype_block_elements(type);
  const uint16_t one = f32_to_f16(1.0f);
  std::vector<uint8_t> bytes(dtype_bytes(type, k * k));
  for (int64_t r = 0; r < k; ++r) {
    for (int64_t u = 0; u < k / elems; ++u) {
      uint8_t* b = bytes.data() + dtype_bytes(type, r * k + u * elems);
      const int64_t hot = r / elems == u ? r % elems : -1;  // the element set to 1, if in this unit
      switch (type) {
        case DType::kQ8_0:
          std::memcpy(b, &one, 2);
          if (hot >= 0) b[2 + hot] = 1;
          break;
        case DType::kQ4_0:  // q - 8 with q = 8 everywhere but the hot element's 9
          std::memcpy(b, &one, 2);
          std::memset(b + 2, 0x88, 16);
          if (hot >= 0) b[2 + hot % 16] = static_cast<uint8_t>(hot < 16 ? 0x89 : 0x98);
          break;
        case DType::kQ4_K:
        case DType::kQ5_K: {  // d 1, dmin 0, every scale 1 and min 0
          std::memcpy(b, &one, 2);
          const uint8_t scales[12] = {1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
          std::memcpy(b + 4, scales, 12);
          const int64_t qs = type == DType::kQ5_K ? 48 : 16;
          if (hot >= 0) b[qs + 32 * (hot / 64) + hot % 32] = static_cast<uint8_t>((hot / 32) % 2 == 0 ? 0x01 : 0x10);
          break;
        }
        case DType::kQ6_K: {  // q = 32 (0 after - 32) everywhere but the hot element's 33; scales 1, d 1
          std::memset(b + 128, 0xaa, 64);
          std::memset(b + 192, 1, 16);
          std::memcpy(b + 208, &one, 2);
          if (hot >= 0) b[64 * (hot / 128) + hot % 64] = static_cast<uint8_t>((hot % 128) / 64 == 0 ? 0x01 : 0x10);
          break;
        }
        default: ADD_FAILURE() << dtype_name(type);
      }
    }
  }
  return bytes;
}

TEST(QuantGpu, OneHotRowsGiveTheCpusRoundedActivationsBitwise) {
  TESSERA_CUDA_OR_SKIP(gpu);
  auto cpu = make_cpu_device(2);
  for (const DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    const int64_t k = 512, tokens = 3;
    std::vector<uint8_t> blocks = one_hot_rows(type, k);
    const TensorView w{type, {k, k}, blocks.data()};
    // The dequantized weights are the identity, so the rows are one-hot as meant.
    std::vector<float> identity(static_cast<size_t>(k * k));
    cpu::dequantize_rows(blocks.data(), type, k, k, identity.data());
    for (int64_t r = 0; r < k; ++r)
      for (int64_t c = 0; c < k; ++c) ASSERT_EQ(identity[r * k + c], r == c ? 1.0f : 0.0f) << r << ", " << c;
    const std::vector<float> x = testing::random_values(static_cast<size_t>(tokens * k), 7);
    const std::vector<float> want = run(*cpu, w, x, tokens);
    const std::vector<float> got = run(*gpu, w, x, tokens);
    ASSERT_EQ(got.size(), want.size());
    int differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
    EXPECT_EQ(differ, 0) << "of " << want.size();
  }
}

// Sum over k of |w| |x| for each output, the scale the f32 rounding of the sums is held to.
std::vector<double> magnitudes(const std::vector<uint8_t>& blocks, DType type, int64_t n, int64_t k,
                               const std::vector<float>& x, int64_t tokens) {
  std::vector<float> w(static_cast<size_t>(n * k));
  cpu::dequantize_rows(blocks.data(), type, n, k, w.data());
  std::vector<double> out(static_cast<size_t>(tokens * n));
  for (int64_t t = 0; t < tokens; ++t)
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t i = 0; i < k; ++i) s += std::fabs(static_cast<double>(w[r * k + i]) * x[t * k + i]);
      out[t * n + r] = s;
    }
  return out;
}

TEST(QuantGpu, ProductsAreTheCpusWithinTheRoundingOfTheirSums) {
  TESSERA_CUDA_OR_SKIP(gpu);
  auto cpu = make_cpu_device(2);
  // Rows of whole 16-byte pieces and not (11 blocks: Q6_K's are 210 bytes, Q8_0's 34),
  // rows longer than a warp's ring, a bias, and matmul_add.
  for (const DType type : kTypes) {
    for (const int64_t k : {11 * dtype_block_elements(type), int64_t{256}, int64_t{4096}, int64_t{14336}}) {
      const int64_t n = 37;
      std::vector<uint8_t> blocks = real_blocks(type, n, k, static_cast<uint32_t>(k));
      const TensorView w{type, {n, k}, blocks.data()};
      for (const int64_t tokens : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{13}}) {
        SCOPED_TRACE(std::string(dtype_name(type)) + " k " + std::to_string(k) + " tokens " + std::to_string(tokens));
        const std::vector<float> x =
            testing::random_values(static_cast<size_t>(tokens * k), static_cast<uint32_t>(tokens));
        const std::vector<float> bias = testing::random_values(static_cast<size_t>(n), 4);
        const std::vector<float> y0 = testing::random_values(static_cast<size_t>(tokens * n), 5);
        const bool add = tokens == 3;
        const std::vector<float> want = run(*cpu, w, x, tokens, &bias, add ? &y0 : nullptr);
        const std::vector<float> got = run(*gpu, w, x, tokens, &bias, add ? &y0 : nullptr);
        ASSERT_EQ(got.size(), want.size());
        const std::vector<double> scale = magnitudes(blocks, type, n, k, x, tokens);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_LE(std::fabs(got[i] - want[i]), 3e-5 * scale[i] + 1e-6)
              << "output " << i << ": " << got[i] << " against the CPU's " << want[i];
      }
    }
  }
}

// The GPU's order of f32 steps (quant_matmul.cu), restated from the units' exact integer
// sums: unit u's P = sum of s q_w q_x (and, Q4_K/Q5_K, M = sum of min_j times the x's
// two sums of 16 of sub-block j) goes to group u % G (G = 16 for Q8_0, 32 for Q4_0, 4
// for the K types); each group takes its units in ascending order, acc = fma(d_w d_x,
// P, acc) then acc = fma(-(dmin_w d_x), M, acc); the output is group 0's acc + group
// 1's + ... in order, + the bias, + y0 (matmul_add).
std::vector<float> gpu_order(const std::vector<uint8_t>& blocks, DType type, int64_t n, int64_t k,
                             const std::vector<float>& x, int64_t tokens, const std::vector<float>& bias,
                             const std::vector<float>* y0) {
  const bool k_type = dtype_block_elements(type) == 256;
  const int elems = k_type ? 256 : 32, groups = type == DType::kQ8_0 ? 16 : type == DType::kQ4_0 ? 32 : 4;
  const int64_t units = k / elems;
  std::vector<cpu::Q8Block> x32(static_cast<size_t>(tokens * (k / 32)));
  std::vector<cpu::Q8KBlock> x256(static_cast<size_t>(tokens * (k / 256)));
  for (int64_t t = 0; t < tokens; ++t) {
    if (k_type) cpu::quantize_q8_K(x.data() + t * k, k, x256.data() + t * units);
    else cpu::quantize_q8_0(x.data() + t * k, k, x32.data() + t * units);
  }
  std::vector<float> y(static_cast<size_t>(tokens * n));
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t t = 0; t < tokens; ++t) {
      std::vector<float> acc(static_cast<size_t>(groups), 0.0f);
      for (int64_t u = 0; u < units; ++u) {
        const testing::UnitInts w = testing::unit_ints(type, blocks.data() + dtype_bytes(type, r * k + u * elems));
        const int8_t* qx = k_type ? x256[t * units + u].qs : x32[t * units + u].qs;
        const float dx = k_type ? x256[t * units + u].d : x32[t * units + u].d;
        int32_t p = 0, m = 0;
        testing::unit_sums(type, w, qx, k_type ? x256[t * units + u].bsums : nullptr, p, m);
        float& a = acc[static_cast<size_t>(u % groups)];
        const float scale = w.d * dx;
        a = std::fma(scale, static_cast<float>(p), a);
        if (type == DType::kQ4_K || type == DType::kQ5_K) {
          const float min_scale = w.dmin * dx;
          a = std::fma(-min_scale, static_cast<float>(m), a);
        }
      }
      float sum = acc[0];
      for (int g = 1; g < groups; ++g) sum += acc[static_cast<size_t>(g)];
      const float value = sum + bias[r];
      y[t * n + r] = y0 != nullptr ? (*y0)[t * n + r] + value : value;
    }
  }
  return y;
}

// The integers above are the blocks' (their scaled values are cpu::dequantize_rows's,
// which is gguf-py's, bitwise), the restated order is within the f32 rounding of the
// CPU's products (both checked without a GPU), and the GPU's outputs are that order's,
// bit for bit: each output's sum order is fixed by the dtype and k, never by the tile,
// the token count or the grid.
TEST(QuantGpu, ProductsAreTheirStatedOrderOfExactIntegerSumsBitwise) {
  auto cpu = make_cpu_device(2);
  auto gpu_made = make_cuda_device(0);
  for (const DType type : kTypes) {
    for (const int64_t k : {11 * dtype_block_elements(type), int64_t{4096}, int64_t{14336}}) {
      const int64_t n = 37, elems = dtype_block_elements(type);
      const std::vector<uint8_t> blocks = real_blocks(type, n, k, static_cast<uint32_t>(k + 1));
      SCOPED_TRACE(std::string(dtype_name(type)) + " k " + std::to_string(k));
      std::vector<float> want(static_cast<size_t>(n * k));
      cpu::dequantize_rows(blocks.data(), type, n, k, want.data());
      for (int64_t i = 0; i < n * k; i += 7) {  // every 7th element of every row
        const testing::UnitInts w = testing::unit_ints(type, blocks.data() + dtype_bytes(type, i / elems * elems));
        const int e = static_cast<int>(i % elems);
        const float value = type == DType::kQ4_K || type == DType::kQ5_K
                                ? (w.d * static_cast<float>(w.s[e])) * static_cast<float>(w.q[e]) -
                                      w.dmin * static_cast<float>(w.m[e / 32])
                            : type == DType::kQ6_K ? (w.d * static_cast<float>(w.s[e])) * static_cast<float>(w.q[e])
                                                   : static_cast<float>(w.q[e]) * w.d;
        ASSERT_EQ(value, want[static_cast<size_t>(i)]) << "element " << i;
      }
      const TensorView w{type, {n, k}, blocks.data()};
      const std::vector<float> bias = testing::random_values(static_cast<size_t>(n), 6);
      for (const int64_t tokens : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{13}}) {
        SCOPED_TRACE(std::to_string(tokens) + " tokens");
        const std::vector<float> x = testing::random_values(static_cast<size_t>(tokens * k), static_cast<uint32_t>(k));
        const std::vector<float> y0 = testing::random_values(static_cast<size_t>(tokens * n), 8);
        const std::vector<float>* add = tokens == 8 ? &y0 : nullptr;
        const std::vector<float> stated = gpu_order(blocks, type, n, k, x, tokens, bias, add);
        const std::vector<float> on_cpu = run(*cpu, w, x, tokens, &bias, add);
        const std::vector<double> scale = magnitudes(blocks, type, n, k, x, tokens);
        for (size_t i = 0; i < stated.size(); ++i)
          ASSERT_LE(std::fabs(stated[i] - on_cpu[i]), 3e-5 * scale[i] + 1e-6) << "output " << i;
        if (!gpu_made.ok()) continue;
        const std::vector<float> got = run(**gpu_made, w, x, tokens, &bias, add);
        ASSERT_EQ(got.size(), stated.size());
        int differ = 0;
        for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &stated[i], sizeof(float)) != 0;
        EXPECT_EQ(differ, 0) << "of " << got.size() << " outputs; the first: " << got[0] << " against " << stated[0];
        // Up to 8 tokens on Q4_K take the tensor cores (quant_mma.cu), and Q8_0 and Q6_K when
        // asked: those and the dp4a kernels (quant_matmul.cu); for one token also the kernels
        // before the lean ones, and the lean stages alone.
        for (const char* mma : {"all", "0"}) {
          ::setenv("TESSERA_CUDA_QUANT_MMA", mma, 1);
          const std::vector<float> other = run(**gpu_made, w, x, tokens, &bias, add);
          EXPECT_EQ(std::memcmp(other.data(), stated.data(), stated.size() * sizeof(float)), 0)
              << "TESSERA_CUDA_QUANT_MMA=" << mma;
        }
        for (const char* lean : {"0", "stages"}) {
          if (tokens != 1) break;
          ::setenv("TESSERA_CUDA_QUANT_LEAN", lean, 1);
          const std::vector<float> leaner = run(**gpu_made, w, x, tokens, &bias, add);
          ::unsetenv("TESSERA_CUDA_QUANT_LEAN");
          EXPECT_EQ(std::memcmp(leaner.data(), stated.data(), stated.size() * sizeof(float)), 0)
              << "TESSERA_CUDA_QUANT_LEAN=" << lean;
        }
        ::unsetenv("TESSERA_CUDA_QUANT_MMA");
      }
    }
  }
  if (!gpu_made.ok())
    GTEST_SKIP() << "checked without a GPU; the GPU's bits need one: " << gpu_made.status().to_string();
}

// One token on many rows (20,003 of 4096: more blocks than the SMs hold at once): the
// outputs and a matmul_add's are the stated order's bit for bit; q, k and v of 20,003,
// 5,001 and 3 rows in one launch (the last job smaller than a block of warps) are bitwise
// each matmul alone; and gate_up of 10,001 gate rows and 10,001 other up rows, each with
// a bias, is bitwise matmul, matmul and silu_mul.
TEST(QuantGpu, ManyRowsAndJobsAreTheirStatedOrderBitwise) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const int64_t n = 20003, k = 4096, distinct = 61;
  for (const DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    // Real blocks, 61 distinct rows repeated (quantizing 20,003 rows would take long).
    const std::vector<uint8_t> some = real_blocks(type, distinct, k, 50);
    const size_t row_bytes = dtype_bytes(type, k);
    std::vector<uint8_t> blocks(row_bytes * n);
    for (int64_t r = 0; r < n; ++r)
      std::memcpy(blocks.data() + row_bytes * r, some.data() + row_bytes * (r % distinct), row_bytes);
    const TensorView w{type, {n, k}, blocks.data()};
    const std::vector<float> x = testing::random_values(static_cast<size_t>(k), 51);
    const std::vector<float> bias = testing::random_values(static_cast<size_t>(n), 52);
    const std::vector<float> y0 = testing::random_values(static_cast<size_t>(n), 53);
    for (const std::vector<float>* add : {static_cast<const std::vector<float>*>(nullptr), &y0}) {
      const std::vector<float> stated = gpu_order(blocks, type, n, k, x, 1, bias, add);
      const std::vector<float> got = run(*gpu, w, x, 1, &bias, add);
      ASSERT_EQ(got.size(), stated.size());
      int differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += std::memcmp(&got[i], &stated[i], sizeof(float)) != 0;
      EXPECT_EQ(differ, 0) << "of " << got.size() << (add != nullptr ? " accumulated" : "") << " outputs";
    }
    auto placed = gpu->place(w);
    ASSERT_TRUE(placed.ok()) << placed.status().to_string();
    OnDevice xd(*gpu, x.data(), x.size() * sizeof(float));
    const std::vector<float> zero(static_cast<size_t>(n), 0.0f);
    const auto zeros = [&] { return OnDevice(*gpu, zero.data(), zero.size() * sizeof(float)); };
    const TensorView none{};
    const int64_t rows[] = {n, 5001, 3};
    std::vector<TensorView> views;
    std::vector<OnDevice> alone, joined;
    std::vector<Device::Projection> outs;
    for (const int64_t m : rows) views.push_back(TensorView{type, {m, k}, placed->data});
    for (size_t i = 0; i < std::size(rows); ++i) {
      alone.push_back(zeros());
      joined.push_back(zeros());
      gpu->matmul(xd.f32(), 1, views[i], none, alone.back().f32());
      outs.push_back({&views[i], &none, joined.back().f32()});
    }
    gpu->matmuls(xd.f32(), 1, outs);
    for (size_t i = 0; i < std::size(rows); ++i) {
      const auto m = static_cast<size_t>(rows[i]);
      EXPECT_EQ(alone[i].read(*gpu, m), joined[i].read(*gpu, m)) << rows[i] << " rows";
    }
    // gate and up: rows 0.. and 10,001.. (other rows), each with a bias.
    const int64_t m = 10001;
    const TensorView gate_w{type, {m, k}, placed->data},
        up_w{type, {m, k}, static_cast<const uint8_t*>(placed->data) + row_bytes * m};
    auto gate_b = gpu->place(TensorView{DType::kF32, {m}, bias.data()});
    auto up_b = gpu->place(TensorView{DType::kF32, {m}, bias.data() + m});
    ASSERT_TRUE(gate_b.ok() && up_b.ok());
    OnDevice g = zeros(), u = zeros(), out = zeros(), up_scratch = zeros();
    gpu->matmul(xd.f32(), 1, gate_w, *gate_b, g.f32());
    gpu->matmul(xd.f32(), 1, up_w, *up_b, u.f32());
    gpu->silu_mul(g.f32(), u.f32(), m, g.f32());
    gpu->gate_up(xd.f32(), 1, gate_w, *gate_b, up_w, *up_b, up_scratch.f32(), out.f32());
    EXPECT_EQ(g.read(*gpu, static_cast<size_t>(m)), out.read(*gpu, static_cast<size_t>(m))) << "gate_up";
  }
}

TEST(QuantGpu, RowsAreBitwiseTheSameAloneOrInABatch) {
  TESSERA_CUDA_OR_SKIP(gpu);
  for (const DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    const int64_t n = 70, k = 2048;
    std::vector<uint8_t> blocks = real_blocks(type, n, k, 11);
    const TensorView w{type, {n, k}, blocks.data()};
    const int64_t most = 301;
    const std::vector<float> x = testing::random_values(static_cast<size_t>(most * k), 12);
    const std::vector<float> all = run(*gpu, w, x, most);
    constexpr int64_t kToken = 40;
    // Token kToken alone, then first and last among 2, 5, 8 and 32 (each tile of the
    // decode kernel and more tokens than one tile), against its row among 301.
    for (const int64_t tokens : {int64_t{1}, int64_t{2}, int64_t{5}, int64_t{8}, int64_t{32}}) {
      for (const int64_t t : {int64_t{0}, tokens - 1}) {
        const int64_t first = kToken - t;  // token kToken of the 301 sits at t of this call
        const std::vector<float> part(x.begin() + first * k, x.begin() + (first + tokens) * k);
        const std::vector<float> y = run(*gpu, w, part, tokens);
        EXPECT_EQ(0, std::memcmp(y.data() + t * n, all.data() + kToken * n, static_cast<size_t>(n) * sizeof(float)))
            << tokens << " tokens, at " << t;
      }
    }
  }
}

// matmuls (the q, k and v of one x, normalized on the way) and gate_up on blocks round
// x once for every weight that takes the same rounding, and gate_up's SiLU is the up
// matmul's epilogue: bitwise the norm, the matmuls one by one and silu_mul. The
// projections mix the roundings (a q8_0 among the K types rounds x again).
TEST(QuantGpu, ProjectionsOfOneXAreBitwiseTheMatmulsOneByOne) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const int64_t k = 512;
  const float eps = 1e-5f;
  // 5 and 6: more q4_k, of rows that are not whole blocks of warps.
  const DType types[] = {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0, DType::kQ5_K,
                         DType::kQ4_0, DType::kQ4_K, DType::kQ4_K};
  const int64_t rows[] = {40, 16, 24, 40, 24, 12, 21};
  std::vector<std::vector<uint8_t>> blocks;
  std::vector<TensorView> w;
  for (size_t i = 0; i < std::size(types); ++i) {
    blocks.push_back(real_blocks(types[i], rows[i], k, static_cast<uint32_t>(30 + i)));
    auto placed = gpu->place(TensorView{types[i], {rows[i], k}, blocks.back().data()});
    ASSERT_TRUE(placed.ok()) << placed.status().to_string();
    w.push_back(*placed);
  }
  const std::vector<float> norm_values = testing::random_values(static_cast<size_t>(k), 40);
  const std::vector<float> bias_values = testing::random_values(static_cast<size_t>(rows[1]), 41),
                           bias5_values = testing::random_values(static_cast<size_t>(rows[5]), 42);
  auto norm = gpu->place(TensorView{DType::kF32, {k}, norm_values.data()});
  auto bias = gpu->place(TensorView{DType::kF32, {rows[1]}, bias_values.data()});
  auto bias5 = gpu->place(TensorView{DType::kF32, {rows[5]}, bias5_values.data()});
  ASSERT_TRUE(norm.ok() && bias.ok() && bias5.ok());
  const TensorView none{};
  const auto zeros = [&](int64_t floats) {
    const std::vector<float> z(static_cast<size_t>(floats), 0.0f);
    return OnDevice(*gpu, z.data(), z.size() * sizeof(float));
  };
  for (const int64_t tokens : {int64_t{1}, int64_t{3}, int64_t{8}, int64_t{13}}) {
    SCOPED_TRACE(std::to_string(tokens) + " tokens");
    const std::vector<float> x = testing::random_values(static_cast<size_t>(tokens * k), static_cast<uint32_t>(tokens));
    OnDevice xd(*gpu, x.data(), x.size() * sizeof(float));
    OnDevice normed = zeros(tokens * k), scratch = zeros(tokens * k);
    gpu->rms_norm(xd.f32(), tokens, k, *norm, eps, normed.f32());
    // q, k, v: q4_k, q6_k with a bias, then q8_0.
    std::vector<OnDevice> one, together;
    std::vector<Device::Projection> outs;
    for (size_t i = 0; i < 3; ++i) {
      one.push_back(zeros(tokens * rows[i]));
      together.push_back(zeros(tokens * rows[i]));
      gpu->matmul(normed.f32(), tokens, w[i], i == 1 ? *bias : none, one.back().f32());
    }
    for (size_t i = 0; i < 3; ++i) outs.push_back({&w[i], i == 1 ? &*bias : &none, together[i].f32()});
    gpu->matmuls(xd.f32(), tokens, outs, {&*norm, eps, scratch.f32()});
    for (size_t i = 0; i < 3; ++i) {
      const auto n = static_cast<size_t>(tokens * rows[i]);
      EXPECT_EQ(one[i].read(*gpu, n), together[i].read(*gpu, n)) << dtype_name(types[i]);
    }
    // Four in one dtype (q4_k: 40 rows, 12 with a bias, 21, then 40 again): the first
    // three take one launch (cuda::kMaxQuantJobs), the fourth another.
    const size_t same[] = {0, 5, 6, 0};
    std::vector<OnDevice> alone, joined;
    std::vector<Device::Projection> four;
    for (const size_t i : same) {
      const TensorView& b = i == 5 ? *bias5 : none;
      alone.push_back(zeros(tokens * rows[i]));
      joined.push_back(zeros(tokens * rows[i]));
      gpu->matmul(normed.f32(), tokens, w[i], b, alone.back().f32());
      four.push_back({&w[i], &b, joined.back().f32()});
    }
    gpu->matmuls(xd.f32(), tokens, four, {&*norm, eps, scratch.f32()});
    for (size_t j = 0; j < std::size(same); ++j) {
      const auto n = static_cast<size_t>(tokens * rows[same[j]]);
      EXPECT_EQ(alone[j].read(*gpu, n), joined[j].read(*gpu, n)) << "q4_k projection " << j;
    }
    // gate and up: q4_k and q5_k (Q8_K rounding), q8_0 and q4_0 (Q8_0 rounding).
    for (const auto& [gate, up] : {std::pair<size_t, size_t>{0, 3}, std::pair<size_t, size_t>{2, 4}}) {
      const int64_t n = rows[gate];
      OnDevice g = zeros(tokens * n), u = zeros(tokens * n), out = zeros(tokens * n), up_scratch = zeros(tokens * n);
      gpu->matmul(normed.f32(), tokens, w[gate], none, g.f32());
      gpu->matmul(normed.f32(), tokens, w[up], none, u.f32());
      gpu->silu_mul(g.f32(), u.f32(), tokens * n, g.f32());
      gpu->gate_up(xd.f32(), tokens, w[gate], none, w[up], none, up_scratch.f32(), out.f32(),
                   {&*norm, eps, scratch.f32()});
      EXPECT_EQ(g.read(*gpu, static_cast<size_t>(tokens * n)), out.read(*gpu, static_cast<size_t>(tokens * n)))
          << dtype_name(types[gate]) << " gate, " << dtype_name(types[up]) << " up";
    }
  }
}

// gate_up on blocks takes gate and up in one launch and leaves silu(gate) * up rounded
// for the down matmul, which then skips its own rounding: gate_up then down (matmul_add)
// is bitwise the matmuls one by one, silu_mul and down; a down whose rounding differs
// (q8_0 after a K-type gate) or an x changed in between (scaled: the guard that the
// rounding was the last launch; dropping it failed) rounds again.
TEST(QuantGpu, DownAfterGateUpTakesItsRoundingOnlyWhenNothingCameBetween) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const int64_t k = 512, n = 768;  // gate/up [n, k], down [k, n]
  // gate, up, down: one launch for gate and up (q4_k, q8_0), two (q4_k, q5_k), and
  // a down of the other rounding.
  const DType cases[][3] = {{DType::kQ4_K, DType::kQ4_K, DType::kQ6_K},
                            {DType::kQ4_K, DType::kQ5_K, DType::kQ4_K},
                            {DType::kQ8_0, DType::kQ8_0, DType::kQ4_0},
                            {DType::kQ4_K, DType::kQ4_K, DType::kQ8_0}};
  const std::vector<float> norm_values = testing::random_values(static_cast<size_t>(k), 60);
  auto norm = gpu->place(TensorView{DType::kF32, {k}, norm_values.data()});
  ASSERT_TRUE(norm.ok());
  const float eps = 1e-5f;
  const TensorView none{};
  const auto zeros = [&](int64_t floats) {
    const std::vector<float> z(static_cast<size_t>(floats), 0.0f);
    return OnDevice(*gpu, z.data(), z.size() * sizeof(float));
  };
  uint32_t seed = 61;
  for (const auto& types : cases) {
    SCOPED_TRACE(std::string(dtype_name(types[0])) + ", " + std::string(dtype_name(types[1])) + ", " +
                 std::string(dtype_name(types[2])));
    std::vector<std::vector<uint8_t>> blocks;
    std::vector<TensorView> w;
    for (int i = 0; i < 3; ++i) {
      const int64_t rows = i < 2 ? n : k, cols = i < 2 ? k : n;
      blocks.push_back(real_blocks(types[i], rows, cols, seed++));
      auto placed = gpu->place(TensorView{types[i], {rows, cols}, blocks.back().data()});
      ASSERT_TRUE(placed.ok()) << placed.status().to_string();
      w.push_back(*placed);
    }
    for (const int64_t tokens : {int64_t{1}, int64_t{8}, int64_t{13}}) {
      SCOPED_TRACE(std::to_string(tokens) + " tokens");
      const std::vector<float> x = testing::random_values(static_cast<size_t>(tokens * k), seed++);
      const std::vector<float> y0 = testing::random_values(static_cast<size_t>(tokens * k), seed++);
      OnDevice xd(*gpu, x.data(), x.size() * sizeof(float));
      OnDevice normed = zeros(tokens * k), scratch = zeros(tokens * k);
      gpu->rms_norm(xd.f32(), tokens, k, *norm, eps, normed.f32());
      OnDevice g = zeros(tokens * n), u = zeros(tokens * n);
      gpu->matmul(normed.f32(), tokens, w[0], none, g.f32());
      gpu->matmul(normed.f32(), tokens, w[1], none, u.f32());
      gpu->silu_mul(g.f32(), u.f32(), tokens * n, g.f32());
      for (const bool scaled : {false, true}) {
        OnDevice ref(*gpu, y0.data(), y0.size() * sizeof(float)), got(*gpu, y0.data(), y0.size() * sizeof(float));
        OnDevice out = zeros(tokens * n), up = zeros(tokens * n);
        gpu->gate_up(xd.f32(), tokens, w[0], none, w[1], none, up.f32(), out.f32(), {&*norm, eps, scratch.f32()});
        if (scaled) gpu->scale(out.f32(), tokens * n, 0.5f);
        gpu->matmul_add(out.f32(), tokens, w[2], none, scratch.f32(), got.f32());
        // The same one call at a time.
        OnDevice expected(*gpu, g.read(*gpu, static_cast<size_t>(tokens * n)).data(),
                          static_cast<size_t>(tokens * n) * sizeof(float));
        if (scaled) gpu->scale(expected.f32(), tokens * n, 0.5f);
        EXPECT_EQ(expected.read(*gpu, static_cast<size_t>(tokens * n)),
                  out.read(*gpu, static_cast<size_t>(tokens * n)));
        gpu->matmul_add(expected.f32(), tokens, w[2], none, scratch.f32(), ref.f32());
        EXPECT_EQ(ref.read(*gpu, y0.size()), got.read(*gpu, y0.size())) << (scaled ? "scaled" : "straight") << " down";
      }
    }
  }
}

TEST(QuantGpu, EmbedDequantizesBitwiseAsTheCpu) {
  TESSERA_CUDA_OR_SKIP(gpu);
  auto cpu = make_cpu_device(1);
  for (const DType type : kTypes) {
    SCOPED_TRACE(dtype_name(type));
    const int64_t rows = 9, hidden = 768;
    std::vector<uint8_t> blocks = real_blocks(type, rows, hidden, 21);
    // Random bytes too, with finite scales: every bit pattern of the values.
    std::mt19937 rng(22);
    std::vector<uint8_t> noise = blocks;
    for (auto& b : noise) b = static_cast<uint8_t>(rng());
    for (const auto* table_bytes : {&blocks, &noise}) {
      std::vector<uint8_t> bytes = *table_bytes;
      const size_t unit = dtype_block_bytes(type);
      for (size_t at = 0; at < bytes.size(); at += unit) {  // f16 scales 0.01 (and -0.02), never NaN
        const uint16_t d = f32_to_f16(0.01f), dmin = f32_to_f16(-0.02f);
        std::memcpy(bytes.data() + at + (type == DType::kQ6_K ? 208 : 0), &d, 2);
        if (type == DType::kQ4_K || type == DType::kQ5_K) std::memcpy(bytes.data() + at + 2, &dmin, 2);
      }
      const TensorView table{type, {rows, hidden}, bytes.data()};
      const std::vector<int32_t> ids = {3, 0, 8, 3, 5};
      std::vector<float> want(ids.size() * hidden);
      cpu->embed(table, ids, want.data());
      auto placed = gpu->place(table);
      ASSERT_TRUE(placed.ok()) << placed.status().to_string();
      std::vector<float> zero(want.size(), 0.0f);
      OnDevice y(*gpu, zero.data(), zero.size() * sizeof(float));
      gpu->embed(*placed, ids, y.f32());
      const std::vector<float> got = y.read(*gpu, want.size());
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * sizeof(float)));
    }
  }
}

// The fixture GGUFs (llama.cpp's files: tests/fixtures/gguf/models) on the GPU: on
// llama.cpp's greedy tokens, each step's logits within 3 % of the largest of the
// CPU's on the same file, and the same greedy token wherever the CPU's is clear.
// Where the GPU rounds a quantized file's activations to 8 bits as the CPU does
// (Q8_0, Q4_0) the two agree to about 1e-7; where it does not (the K types) they
// differ by about 2 %: each layer's rounding turns a small difference into a step of
// one in some activations, as the CPU's own logits move by 1.5-2.6 % between an f32
// and an f16 KV cache on these files (docs/benchmarks.md, session 48).
TEST(QuantGpu, FixtureGgufModelsRunAsOnTheCpu) {
  TESSERA_CUDA_OR_SKIP(gpu);
  std::ifstream in(testing::gguf_models_dir() + "llama_cpp_greedy.json");
  const auto recorded = nlohmann::json::parse(in);
  ASSERT_GE(recorded.size(), 13u);
  for (const auto& [file, entry] : recorded.items()) {
    SCOPED_TRACE(file);
    auto model = Model::load(testing::gguf_model(file));
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    std::vector<int32_t> ids = entry["prompt"].get<std::vector<int32_t>>();
    const auto greedy = entry["greedy"].get<std::vector<int32_t>>();
    const size_t prompt = ids.size();
    ids.insert(ids.end(), greedy.begin(), greedy.end());
    auto cpu = make_cpu_device(2);
    const auto logits = [&](Device& device) {
      Forward forward(*model, device, {.kv_memory = uint64_t{64} << 20});
      KvCache cache = forward.make_cache(static_cast<int64_t>(ids.size()));
      auto out = forward.run_ids(ids, cache, Logits::kAll);
      EXPECT_TRUE(out.ok()) << out.status().to_string();
      return out.ok() ? *out : std::vector<float>();
    };
    const std::vector<float> want = logits(*cpu), got = logits(*gpu);
    ASSERT_EQ(got.size(), want.size());
    const auto vocab = static_cast<size_t>(model->config().vocab_size);
    double worst = 0;
    for (size_t row = prompt - 1; row < ids.size(); ++row) {
      const float* w = want.data() + row * vocab;
      const float* g = got.data() + row * vocab;
      float scale = 0, error = 0;
      for (size_t i = 0; i < vocab; ++i) {
        scale = std::max(scale, std::fabs(w[i]));
        error = std::max(error, std::fabs(g[i] - w[i]));
      }
      worst = std::max(worst, static_cast<double>(error / scale));
      std::vector<float> sorted(w, w + vocab);
      std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<>());
      if (sorted[0] - sorted[1] > 4 * error) {  // clear of the two devices' difference
        EXPECT_EQ(std::max_element(g, g + vocab) - g, std::max_element(w, w + vocab) - w) << "row " << row;
      }
    }
    EXPECT_LE(worst, 0.03);
    std::printf("%s: largest difference from the CPU's logits %.3g of the largest\n", file.c_str(), worst);
  }
}

}  // namespace
}  // namespace tessera
