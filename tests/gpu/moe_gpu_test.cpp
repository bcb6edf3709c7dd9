// Mixture of experts on the GPU without the host (Device::route_experts and
// run_experts, backend/cuda/moe.cu): routing bitwise the host's route_token on
// logits full of ties, every family's routing (softmax by one warp a token up to
// 256 experts and 32 chosen, by a block past that); the experts bitwise what the
// GPU's own matmul, gather and scatter-add give one expert at a time (tensor
// cores and FMA, decode and prefill tiles); a token's row the same alone and
// among others (alone, its down and weighted sum in one launch, its router's
// matmul and routing in one launch: the logits bitwise the device's matmul, and
// its x normalized by those launches: bitwise the device's rms_norm first).
// The fixtures run through it in cuda_forward_test.cpp. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "model/moe.h"
#include "model/moe_specs.h"
#include "support/gpu.h"
#include "support/random_tensors.h"

namespace tessera {
namespace {

Buffer put(Device& device, const void* data, size_t bytes) {
  auto buffer = device.alloc(bytes);
  EXPECT_TRUE(buffer.ok()) << buffer.status().to_string();
  device.upload(data, bytes, buffer->data());
  return std::move(buffer).value();
}

template <typename T>
std::vector<T> get(Device& device, const void* src, size_t count) {
  std::vector<T> out(count);
  device.download(src, count * sizeof(T), out.data());
  return out;
}

// Logits in steps of 1/4 (so many equal), a few rows all equal, one row with a
// huge spread (softmax terms that underflow).
std::vector<float> tied_logits(int64_t tokens, int64_t experts, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  std::vector<float> logits(static_cast<size_t>(tokens * experts));
  for (float& l : logits) l = std::round(normal(rng) * 4.0f) / 4.0f;
  for (int64_t e = 0; e < experts; ++e) {
    logits[static_cast<size_t>(e)] = 0.5f;                                   // token 0: all equal
    logits[static_cast<size_t>(experts + e)] = e % 3 == 0 ? 60.0f : -60.0f;  // token 1: extremes
  }
  return logits;
}

struct RoutingCase {
  const char* name;
  MoeSpec moe;
  bool with_bias = false;  // kSigmoidGroupTopK's correction bias, in bias_dtype
  DType bias_dtype = DType::kF32;
};

using testing::sigmoid_groups_moe;
using testing::softmax_moe;

TEST(CudaMoeTest, RoutingIsBitwiseTheHostsOnLogitsWithTies) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const RoutingCase cases[] = {
      {"mixtral 2 of 8", softmax_moe(8, 2, true)},
      {"qwen3 8 of 128", softmax_moe(128, 8, true)},
      {"qwen3 unnormalized 3 of 5", softmax_moe(5, 3, false)},
      {"wide 6 of 600", softmax_moe(600, 6, true)},
      // one warp's most: 8 experts a lane, 32 chosen; then more chosen than a warp's lanes (a block routes)
      {"32 of 256, unnormalized", softmax_moe(256, 32, false)},
      {"33 of 64", softmax_moe(64, 33, true)},
      {"glm4.5 8 of 128, 4 of 8 groups, x2.5, bf16 bias", sigmoid_groups_moe(128, 8, 8, 4, true, 2.5f), true,
       DType::kBF16},
      {"8 of 256, 4 of 8 groups, f32 bias", sigmoid_groups_moe(256, 8, 8, 4, true, 2.5f), true, DType::kF32},
      {"one group, unnormalized, f16 bias", sigmoid_groups_moe(16, 4, 1, 1, false, 1.0f), true, DType::kF16},
      {"no bias, 2 of 6 groups kept", sigmoid_groups_moe(12, 3, 6, 2, true, 1.0f)},
  };
  constexpr int64_t kTokens = 37;
  uint32_t seed = 1;
  for (const RoutingCase& c : cases) {
    SCOPED_TRACE(c.name);
    const MoeSpec& moe = c.moe;
    const std::vector<float> logits = tied_logits(kTokens, moe.experts, seed++);
    Buffer d_logits = put(*gpu, logits.data(), logits.size() * sizeof(float));
    // A bias in steps of 1/8 (ties again).
    const bool with_bias = c.with_bias;
    std::vector<float> bias = testing::random_values(static_cast<size_t>(moe.experts), seed++);
    for (float& b : bias) b = std::round(b * 8.0f) / 8.0f;
    const std::vector<uint8_t> bias_bytes = testing::encode(bias, c.bias_dtype);
    Buffer d_bias = put(*gpu, bias_bytes.data(), bias_bytes.size());
    const TensorView bias_view = with_bias ? TensorView{c.bias_dtype, {moe.experts}, d_bias.data()} : TensorView{};
    const auto pairs = static_cast<size_t>(kTokens * moe.top_k);
    auto d_experts = gpu->alloc(pairs * sizeof(int32_t));
    auto d_weights = gpu->alloc(pairs * sizeof(float));
    ASSERT_TRUE(d_experts.ok() && d_weights.ok());
    ASSERT_TRUE(gpu->route_experts(static_cast<const float*>(d_logits.data()), kTokens, expert_routing(moe), bias_view,
                                   static_cast<int32_t*>(d_experts->data()), d_weights->f32()));
    const auto experts = get<int32_t>(*gpu, d_experts->data(), pairs);
    const auto weights = get<float>(*gpu, d_weights->data(), pairs);
    for (int64_t t = 0; t < kTokens; ++t) {
      const Route want = route_token(moe, logits.data() + t * moe.experts, with_bias ? bias.data() : nullptr);
      const auto at = static_cast<size_t>(t * moe.top_k);
      const std::vector<int32_t> got_experts(experts.begin() + at, experts.begin() + at + moe.top_k);
      const std::vector<float> got_weights(weights.begin() + at, weights.begin() + at + moe.top_k);
      ASSERT_EQ(got_experts, want.experts) << "token " << t;
      ASSERT_EQ(std::memcmp(got_weights.data(), want.weights.data(), want.weights.size() * sizeof(float)), 0)
          << "token " << t << ": weight " << got_weights[0] << " against " << want.weights[0];
    }
  }
}

// A layer of random experts in one dtype on the GPU.
struct Experts {
  std::vector<std::vector<uint8_t>> bytes;  // gate..., up..., down...
  std::vector<Buffer> placed;
  std::vector<TensorView> gate, up, down;

  Experts(Device& gpu, DType dtype, int64_t n, int64_t hidden, int64_t inter) {
    for (int64_t i = 0; i < 3 * n; ++i) {
      const bool down_proj = i >= 2 * n;
      const int64_t rows = down_proj ? hidden : inter, cols = down_proj ? inter : hidden;
      std::vector<float> values = testing::random_values(static_cast<size_t>(rows * cols), 100 + i);
      for (float& v : values) v *= 0.25f;
      bytes.push_back(testing::encode(values, dtype));
      placed.push_back(put(gpu, bytes.back().data(), bytes.back().size()));
      const TensorView view{dtype, {rows, cols}, placed.back().data()};
      (i < n ? gate : down_proj ? down : up).push_back(view);
    }
  }
  Device::ExpertWeights weights() const { return {.gate = gate, .up = up, .down = down}; }
};

// How run_on_device calls the device: route_experts and then run_experts, or
// run_experts given the logits (it routes them itself), writing out or adding
// onto it, or given the router's weight (it computes the logits too).
enum class Call { kRouteThenRun, kRunFromLogits, kRunFromLogitsAdding, kRunFromRouter };

// out [tokens, hidden] for x through route_experts and run_experts, from `out`
// (kRunFromLogitsAdding adds onto it; the others overwrite it). kRunFromRouter
// takes `router` and leaves the logits it computed (over NaNs) in `logits_out`.
// With `norm` (kNormEps), run_experts is given x unnormalized and the norm.
constexpr float kNormEps = 1e-6f;
std::vector<float> run_on_device(Device& gpu, const Experts& experts, const MoeSpec& moe, const std::vector<float>& x,
                                 const std::vector<float>& logits, int64_t tokens, int64_t hidden,
                                 Call call = Call::kRouteThenRun, std::vector<float> out = {},
                                 const TensorView* router = nullptr, std::vector<float>* logits_out = nullptr,
                                 const TensorView* norm = nullptr) {
  Buffer d_x = put(gpu, x.data(), x.size() * sizeof(float));
  Buffer d_scratch = put(gpu, x.data(), x.size() * sizeof(float));
  const std::vector<float> nans(static_cast<size_t>(tokens * moe.experts), std::nanf(""));
  const std::vector<float>& start = call == Call::kRunFromRouter ? nans : logits;
  Buffer d_logits = put(gpu, start.data(), start.size() * sizeof(float));
  const auto pairs = static_cast<size_t>(tokens * moe.top_k);
  auto d_experts = gpu.alloc(pairs * sizeof(int32_t));
  auto d_weights = gpu.alloc(pairs * sizeof(float));
  out.resize(static_cast<size_t>(tokens * hidden), std::nanf(""));
  Buffer d_out = put(gpu, out.data(), out.size() * sizeof(float));
  EXPECT_TRUE(d_experts.ok() && d_weights.ok());
  auto* ids = static_cast<int32_t*>(d_experts->data());
  if (call == Call::kRouteThenRun) {
    EXPECT_TRUE(gpu.route_experts(d_logits.f32(), tokens, expert_routing(moe), {}, ids, d_weights->f32()));
    EXPECT_TRUE(gpu.run_experts(d_x.f32(), tokens, expert_routing(moe), ids, d_weights->f32(), experts.weights(),
                                d_out.f32(), {}));
  } else {
    EXPECT_TRUE(gpu.run_experts(d_x.f32(), tokens, expert_routing(moe), ids, d_weights->f32(), experts.weights(),
                                d_out.f32(),
                                {.logits = d_logits.f32(),
                                 .router = call == Call::kRunFromRouter ? router : nullptr,
                                 .bias = nullptr,
                                 .add = call == Call::kRunFromLogitsAdding,
                                 .norm = {norm, kNormEps, d_scratch.f32()}}));
  }
  if (logits_out != nullptr) *logits_out = get<float>(gpu, d_logits.data(), nans.size());
  return get<float>(gpu, d_out.data(), out.size());
}

// The same through the device's own primitives, one expert at a time (MoeMlp's
// host path): routing on the host, gather, gate, up, SiLU, down, scatter-add.
std::vector<float> run_expert_by_expert(Device& device, const Experts& experts, const MoeSpec& moe,
                                        const std::vector<float>& x, const std::vector<float>& logits, int64_t tokens,
                                        int64_t hidden) {
  const int64_t inter = experts.gate[0].dim(0);
  Buffer d_x = put(device, x.data(), x.size() * sizeof(float));
  std::vector<float> zeros(static_cast<size_t>(tokens * hidden), 0.0f);
  Buffer d_out = put(device, zeros.data(), zeros.size() * sizeof(float));
  auto xe = device.alloc(x.size() * sizeof(float));
  auto gate = device.alloc(static_cast<size_t>(tokens * inter) * sizeof(float));
  auto up = device.alloc(static_cast<size_t>(tokens * inter) * sizeof(float));
  auto down = device.alloc(x.size() * sizeof(float));
  auto scale = device.alloc(static_cast<size_t>(tokens) * sizeof(float));
  EXPECT_TRUE(xe.ok() && gate.ok() && up.ok() && down.ok() && scale.ok());
  for (int64_t e = 0; e < moe.experts; ++e) {
    std::vector<int32_t> rows;
    std::vector<float> scales;
    for (int64_t t = 0; t < tokens; ++t) {
      const Route route = route_token(moe, logits.data() + t * moe.experts);
      for (size_t j = 0; j < route.experts.size(); ++j)
        if (route.experts[j] == e) rows.push_back(static_cast<int32_t>(t)), scales.push_back(route.weights[j]);
    }
    if (rows.empty()) continue;
    const auto n = static_cast<int64_t>(rows.size());
    device.upload(scales.data(), scales.size() * sizeof(float), scale->data());
    device.gather_rows(d_x.f32(), rows, hidden, xe->f32());
    device.matmul(xe->f32(), n, experts.gate[static_cast<size_t>(e)], {}, gate->f32());
    device.matmul(xe->f32(), n, experts.up[static_cast<size_t>(e)], {}, up->f32());
    device.silu_mul(gate->f32(), up->f32(), n * inter, gate->f32());
    device.matmul(gate->f32(), n, experts.down[static_cast<size_t>(e)], {}, down->f32());
    device.scatter_add_rows(down->f32(), scale->f32(), rows, hidden, d_out.f32());
  }
  return get<float>(device, d_out.data(), zeros.size());
}

struct ExpertsCase {
  const char* name;
  DType dtype;
  int64_t hidden, inter;
  int64_t experts = 8, top_k = 3;
};

class CudaExpertsTest : public ::testing::TestWithParam<ExpertsCase> {};

TEST_P(CudaExpertsTest, BitwiseTheDevicesMatmulsExpertByExpertAndATokenAloneIsItsRowAmongOthers) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const ExpertsCase& c = GetParam();
  MoeSpec moe = softmax_moe(c.experts, c.top_k, true);
  moe.intermediate = c.inter;
  const Experts experts(*gpu, c.dtype, moe.experts, c.hidden, c.inter);
  // The router [experts, hidden], of the experts' dtype.
  std::vector<float> router_values = testing::random_values(static_cast<size_t>(moe.experts * c.hidden), 11);
  const std::vector<uint8_t> router_bytes = testing::encode(router_values, c.dtype);
  const Buffer d_router = put(*gpu, router_bytes.data(), router_bytes.size());
  const TensorView router{c.dtype, {moe.experts, c.hidden}, d_router.data()};
  // A bf16 RMSNorm weight [hidden], and x's rows through the device's rms_norm.
  std::vector<float> norm_values = testing::random_values(static_cast<size_t>(c.hidden), 12);
  for (float& v : norm_values) v += 1.0f;
  const std::vector<uint8_t> norm_bytes = testing::encode(norm_values, DType::kBF16);
  const Buffer d_norm = put(*gpu, norm_bytes.data(), norm_bytes.size());
  const TensorView norm{DType::kBF16, {c.hidden}, d_norm.data()};
  const auto normalized = [&](const std::vector<float>& x) {
    const Buffer d_x = put(*gpu, x.data(), x.size() * sizeof(float));
    const Buffer d_y = put(*gpu, x.data(), x.size() * sizeof(float));
    gpu->rms_norm(d_x.f32(), static_cast<int64_t>(x.size()) / c.hidden, c.hidden, norm, kNormEps, d_y.f32());
    return get<float>(*gpu, d_y.data(), x.size());
  };
  // The logits of x's rows through the device's own matmul.
  const auto matmul_logits = [&](const std::vector<float>& x, int64_t tokens) {
    const Buffer d_x = put(*gpu, x.data(), x.size() * sizeof(float));
    auto d_logits = gpu->alloc(static_cast<size_t>(tokens * moe.experts) * sizeof(float));
    EXPECT_TRUE(d_logits.ok());
    gpu->matmul(d_x.f32(), tokens, router, {}, d_logits->f32());
    return get<float>(*gpu, d_logits->data(), static_cast<size_t>(tokens * moe.experts));
  };
  // 5 tokens (decode tiles of 8 pairs) and 90 (prefill tiles of 32, several per
  // expert); each token alone skips the grouping (a lone token's slots).
  for (const int64_t tokens : {int64_t{5}, int64_t{90}}) {
    SCOPED_TRACE(std::to_string(tokens) + " tokens");
    const std::vector<float> x = testing::random_values(static_cast<size_t>(tokens * c.hidden), 7);
    const std::vector<float> logits = tied_logits(tokens, moe.experts, 8);
    const auto together = run_on_device(*gpu, experts, moe, x, logits, tokens, c.hidden);
    EXPECT_EQ(together, run_expert_by_expert(*gpu, experts, moe, x, logits, tokens, c.hidden));
    for (const int64_t t : {int64_t{0}, int64_t{1}, tokens - 1}) {
      const auto row = [&](const std::vector<float>& v, int64_t width) {
        return std::vector<float>(v.begin() + t * width, v.begin() + (t + 1) * width);
      };
      const auto alone = run_on_device(*gpu, experts, moe, row(x, c.hidden), row(logits, moe.experts), 1, c.hidden);
      EXPECT_EQ(alone, row(together, c.hidden)) << "token " << t;
      // Routed by run_experts itself, and added onto a residual row.
      EXPECT_EQ(run_on_device(*gpu, experts, moe, row(x, c.hidden), row(logits, moe.experts), 1, c.hidden,
                              Call::kRunFromLogits),
                alone)
          << "token " << t;
      const std::vector<float> residual = testing::random_values(static_cast<size_t>(c.hidden), 9);
      std::vector<float> want = residual;
      for (size_t i = 0; i < want.size(); ++i) want[i] += alone[i];
      EXPECT_EQ(run_on_device(*gpu, experts, moe, row(x, c.hidden), row(logits, moe.experts), 1, c.hidden,
                              Call::kRunFromLogitsAdding, residual),
                want)
          << "token " << t;
      // Given the router (bf16 with hidden a multiple of 64 and
      // TESSERA_CUDA_MOE_ROUTER=1: its matmul and the routing in one launch, the
      // same counter each time): the logits are the matmul's and the output is
      // the one routed from them.
      const std::vector<float> x_row = row(x, c.hidden), want_logits = matmul_logits(x_row, 1);
      std::vector<float> got_logits;
      EXPECT_EQ(
          run_on_device(*gpu, experts, moe, x_row, {}, 1, c.hidden, Call::kRunFromRouter, {}, &router, &got_logits),
          run_on_device(*gpu, experts, moe, x_row, want_logits, 1, c.hidden))
          << "token " << t;
      EXPECT_EQ(std::memcmp(got_logits.data(), want_logits.data(), want_logits.size() * sizeof(float)), 0)
          << "token " << t;
      // Given x unnormalized and its norm (TESSERA_CUDA_MOE_NORM=1: normalized by
      // the router's and the experts' launches), with the router and from logits
      // onto a residual: bitwise the device's rms_norm first.
      const std::vector<float> x_normed = normalized(x_row), normed_logits = matmul_logits(x_normed, 1);
      EXPECT_EQ(run_on_device(*gpu, experts, moe, x_row, {}, 1, c.hidden, Call::kRunFromRouter, {}, &router,
                              &got_logits, &norm),
                run_on_device(*gpu, experts, moe, x_normed, normed_logits, 1, c.hidden))
          << "token " << t;
      EXPECT_EQ(std::memcmp(got_logits.data(), normed_logits.data(), normed_logits.size() * sizeof(float)), 0)
          << "token " << t;
      EXPECT_EQ(run_on_device(*gpu, experts, moe, x_row, row(logits, moe.experts), 1, c.hidden,
                              Call::kRunFromLogitsAdding, residual, nullptr, nullptr, &norm),
                run_on_device(*gpu, experts, moe, x_normed, row(logits, moe.experts), 1, c.hidden,
                              Call::kRunFromLogitsAdding, residual))
          << "token " << t;
    }
    // The whole step given its norm (normalized into the scratch first).
    EXPECT_EQ(run_on_device(*gpu, experts, moe, x, logits, tokens, c.hidden, Call::kRunFromLogits, {}, nullptr, nullptr,
                            &norm),
              run_on_device(*gpu, experts, moe, normalized(x), logits, tokens, c.hidden));
    // The whole step given the router (its matmul, then the routing launch).
    const std::vector<float> step_logits = matmul_logits(x, tokens);
    std::vector<float> got_logits;
    EXPECT_EQ(
        run_on_device(*gpu, experts, moe, x, {}, tokens, c.hidden, Call::kRunFromRouter, {}, &router, &got_logits),
        run_on_device(*gpu, experts, moe, x, step_logits, tokens, c.hidden));
    EXPECT_EQ(std::memcmp(got_logits.data(), step_logits.data(), step_logits.size() * sizeof(float)), 0);
    // The whole step routed by run_experts and added onto a residual.
    const std::vector<float> residual = testing::random_values(x.size(), 10);
    std::vector<float> added = residual;
    for (size_t i = 0; i < added.size(); ++i) added[i] += together[i];
    EXPECT_EQ(run_on_device(*gpu, experts, moe, x, logits, tokens, c.hidden, Call::kRunFromLogitsAdding, residual),
              added);
    // And close to the CPU's (f32 sums of the same products; the GPU's tensor cores round x to bf16).
    auto cpu = make_cpu_device(2);
    const Experts host(*cpu, c.dtype, moe.experts, c.hidden, c.inter);
    const auto want = run_expert_by_expert(*cpu, host, moe, x, logits, tokens, c.hidden);
    float scale = 0, error = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      scale = std::max(scale, std::fabs(want[i]));
      error = std::max(error, std::fabs(together[i] - want[i]));
    }
    EXPECT_LE(error, (c.dtype == DType::kBF16 ? 2e-2f : 1e-4f) * scale);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaExpertsTest,
    ::testing::Values(ExpertsCase{"bf16_tensor_cores", DType::kBF16, 128, 192},
                      ExpertsCase{"bf16_down_by_fma", DType::kBF16, 64, 48},  // qwen3_moe_bf16's shape
                      ExpertsCase{"f32", DType::kF32, 72, 40}, ExpertsCase{"f16_odd", DType::kF16, 36, 20},
                      ExpertsCase{"bf16_8_of_128_as_qwen3", DType::kBF16, 128, 64, 128, 8},
                      // down's rows of 12 chunks (Qwen3-30B-A3B's 768): sums 0-3 take two, 4-7 one
                      ExpertsCase{"bf16_8_of_16_768_wide", DType::kBF16, 256, 768, 16, 8},
                      // 72 rows: the last block of 16 has 8 (gate/up by FMA, down on tensor cores)
                      ExpertsCase{"bf16_72_rows", DType::kBF16, 72, 128},
                      // 8 chunks of hidden: a lone token's norm in the router's matmul and after gate/up's first loads
                      ExpertsCase{"bf16_512_wide", DType::kBF16, 512, 128, 16, 4}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessera
