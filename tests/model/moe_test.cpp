// Mixture of experts (model/moe.h): routing by hand-computed softmax, and what a
// step reads: each expert's weights once for all the tokens routed to it, only
// the top_k experts of a lone decode token, and a token's logits bitwise the
// same whatever shares its step.
#include "model/moe.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "fixtures.h"
#include "forwarding_device.h"
#include "model/forward.h"
#include "moe_specs.h"

namespace tessera {
namespace {

using testing::fixture_dir;
using testing::load_reference;

using testing::sigmoid_groups_moe;
using testing::softmax_moe;

TEST(RouteTokenTest, SoftmaxTopKRenormalized) {
  const float logits[] = {0.0f, 1.0f, 3.0f, 2.0f};
  const Route route = route_token(softmax_moe(4, 2, true), logits);
  ASSERT_EQ(route.experts, (std::vector<int32_t>{2, 3}));  // the largest first
  const double e2 = std::exp(2.0), e3 = std::exp(3.0);
  EXPECT_NEAR(route.weights[0], e3 / (e2 + e3), 1e-6);
  EXPECT_NEAR(route.weights[1], e2 / (e2 + e3), 1e-6);
}

TEST(RouteTokenTest, SoftmaxTopKWithoutRenormalizing) {
  const float logits[] = {0.0f, 1.0f, 3.0f, 2.0f};
  const Route route = route_token(softmax_moe(4, 3, false), logits);
  ASSERT_EQ(route.experts, (std::vector<int32_t>{2, 3, 1}));
  const double sum = 1 + std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(route.weights[0], std::exp(3.0) / sum, 1e-6);
  EXPECT_NEAR(route.weights[1], std::exp(2.0) / sum, 1e-6);
  EXPECT_NEAR(route.weights[2], std::exp(1.0) / sum, 1e-6);
}

TEST(RouteTokenTest, EqualProbabilitiesTakeTheLowerExpert) {
  const float logits[] = {0.5f, 2.0f, 0.5f, 2.0f, 2.0f};
  EXPECT_EQ(route_token(softmax_moe(5, 2, true), logits).experts, (std::vector<int32_t>{1, 3}));
}

// GLM-4.5's routing (transformers Glm4MoeMoE.route_tokens_to_experts), by hand:
// 8 experts in 2 groups of 4, one group kept, top 2, renormalized, times 2.5.
MoeSpec glm_spec() { return sigmoid_groups_moe(8, 2, 2, 1, true, 2.5f); }

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

TEST(RouteTokenTest, SigmoidGroupsChooseByTheCorrectedScoresAndWeighByTheRawOnes) {
  const float logits[] = {0.0f, 1.0f, -1.0f, 0.5f, 2.0f, -2.0f, -2.0f, -2.0f};
  // Without the bias, group 0's two best (1.0, 0.5) outscore group 1's (2.0, -2.0).
  const Route plain = route_token(glm_spec(), logits);
  ASSERT_EQ(plain.experts, (std::vector<int32_t>{1, 3}));
  const double s1 = sigmoid(1.0), s3 = sigmoid(0.5);
  EXPECT_NEAR(plain.weights[0], 2.5 * s1 / (s1 + s3), 1e-6);
  EXPECT_NEAR(plain.weights[1], 2.5 * s3 / (s1 + s3), 1e-6);
  // +0.5 on expert 4 moves the choice to group 1; experts 5, 6, 7 tie and the
  // lowest wins. The weights are the uncorrected sigmoids.
  const float bias[] = {0, 0, 0, 0, 0.5f, 0, 0, 0};
  const Route biased = route_token(glm_spec(), logits, bias);
  ASSERT_EQ(biased.experts, (std::vector<int32_t>{4, 5}));
  const double s4 = sigmoid(2.0), s5 = sigmoid(-2.0);
  EXPECT_NEAR(biased.weights[0], 2.5 * s4 / (s4 + s5), 1e-6);
  EXPECT_NEAR(biased.weights[1], 2.5 * s5 / (s4 + s5), 1e-6);
  // Without norm_topk_prob: the sigmoids times the scaling factor alone.
  MoeSpec raw = glm_spec();
  raw.norm_topk_prob = false;
  const Route unnormed = route_token(raw, logits, bias);
  EXPECT_NEAR(unnormed.weights[0], 2.5 * s4, 1e-6);
  EXPECT_NEAR(unnormed.weights[1], 2.5 * s5, 1e-6);
}

// transformers masks the groups it drops with 0.0, not -inf: when the kept
// group's corrected scores are all below 0, the dropped group's experts win
// (lowest index first among their zeros), weighted by their own sigmoids.
TEST(RouteTokenTest, SigmoidGroupsMaskDroppedGroupsWithZeroNotMinusInfinity) {
  const float logits[] = {-3, -3, -3, -3, -1, -2, -3, -4};
  const float bias[] = {-0.5f, -0.5f, -0.5f, -0.5f, -1, -1, -1, -1};
  const Route route = route_token(glm_spec(), logits, bias);
  ASSERT_EQ(route.experts, (std::vector<int32_t>{4, 5}));
  const double s4 = sigmoid(-1.0), s5 = sigmoid(-2.0);
  EXPECT_NEAR(route.weights[0], 2.5 * s4 / (s4 + s5), 1e-6);
}

// expert_routing.h's exponential, which the host's and the GPU's routing share:
// within an ulp of exp (double precision as the reference) over the range where
// e^x is a normal float, 1 at 0, and the edges of the range.
TEST(RoutingExpTest, WithinAnUlpOfExpAndExactAtTheEdges) {
  double worst = 0;
  for (float x = -87.0f; x < 88.7f; x += 0.0013f) {
    const double want = std::exp(double{x});
    worst = std::max(worst, std::fabs(routing::routing_exp(x) - want) / want);
  }
  EXPECT_LT(worst, 1.2e-7);  // 2^-23: an ulp at the bottom of a binade
  EXPECT_EQ(routing::routing_exp(0.0f), 1.0f);
  EXPECT_EQ(routing::routing_exp(-0.0f), 1.0f);
  EXPECT_EQ(routing::routing_exp(-104.0f), 0.0f);
  EXPECT_GT(routing::routing_exp(-100.0f), 0.0f);  // a subnormal, not flushed to zero
  EXPECT_NEAR(routing::routing_exp(-100.0f), std::exp(-100.0), 1.5e-45);
  EXPECT_EQ(routing::routing_exp(89.0f), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(routing::routing_exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_FLOAT_EQ(routing::sigmoid(0.0f), 0.5f);
}

// Counts, per step, how often each weight (by its address) is read by a matmul.
class CountingDevice final : public testing::ForwardingDevice {
 public:
  void matmul(const float* x, int64_t tokens, const TensorView& w, const TensorView& bias, float* y) override {
    ++reads[w.data];
    ForwardingDevice::matmul(x, tokens, w, bias, y);
  }
  std::map<const void*, int> reads;
};

class MoeReadsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(fixture_dir("qwen3_moe_f32"));
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::make_unique<Model>(std::move(model).value());
  }
  // How many expert matrices the last step read, and the most reads of any one.
  std::pair<int, int> expert_reads() const {
    int matrices = 0, most = 0;
    for (const LayerWeights& l : model_->weights().layers)
      for (const auto* list : {&l.expert_gate, &l.expert_up, &l.expert_down})
        for (const TensorView& w : *list) {
          const auto it = device_.reads.find(w.data);
          if (it == device_.reads.end()) continue;
          ++matrices;
          most = std::max(most, it->second);
        }
    return {matrices, most};
  }
  std::unique_ptr<Model> model_;
  CountingDevice device_;
};

TEST_F(MoeReadsTest, LoneDecodeTokenReadsOnlyItsTopKExperts) {
  const auto ref = load_reference("qwen3_moe_f32");
  Forward forward(*model_, device_);
  KvCache cache = forward.make_cache(32);
  ASSERT_TRUE(forward.run_ids(ref.prompt_ids, cache).ok());
  for (const int32_t id : ref.greedy_ids) {
    device_.reads.clear();
    ASSERT_TRUE(forward.run_ids(std::span(&id, 1), cache).ok());
    // Layers 0 and 2 have 6 experts, top 2 of them a token; layer 1 is dense.
    EXPECT_EQ(expert_reads(), std::make_pair(2 * 2 * 3, 1));
  }
}

TEST_F(MoeReadsTest, StepReadsEachExpertOnceAndTokensGetTheirLogitsAlone) {
  const auto ref = load_reference("qwen3_moe_f32");
  Forward together(*model_, device_), alone(*model_, device_);
  const size_t sequences = ref.greedy_ids.size(), vocab = static_cast<size_t>(model_->config().vocab_size);
  std::vector<KvCache> together_caches, alone_caches;
  std::vector<Forward::Part> parts;
  for (size_t s = 0; s < sequences; ++s) {
    together_caches.push_back(together.make_cache(16));
    alone_caches.push_back(alone.make_cache(16));
  }
  for (size_t s = 0; s < sequences; ++s) parts.push_back({&together_caches[s], 1});
  // Eight sequences, one token each (the reference's greedy ids), in one step.
  device_.reads.clear();
  auto step = together.step_ids(ref.greedy_ids, parts);
  ASSERT_TRUE(step.ok()) << step.status().to_string();
  const auto [matrices, most] = expert_reads();
  EXPECT_EQ(most, 1);                  // grouped by expert: one read for all its tokens
  EXPECT_LT(matrices, 2 * 8 * 2 * 3);  // fewer than a read per token and expert: experts were shared
  EXPECT_LE(matrices, 2 * 6 * 3);      // at most every expert of the two MoE layers
  for (size_t s = 0; s < sequences; ++s) {
    auto expected = alone.run_ids(std::span(&ref.greedy_ids[s], 1), alone_caches[s]);
    ASSERT_TRUE(expected.ok());
    const std::vector<float> row(step->begin() + s * vocab, step->begin() + (s + 1) * vocab);
    EXPECT_EQ(row, *expected) << "sequence " << s;
  }
}

// GLM-4.5: a lone decode token reads its top 3 of 8 experts and the shared
// expert, each once, on each of the two MoE layers (layer 0 is dense).
TEST(GlmMoeReadsTest, LoneDecodeTokenReadsItsTopKExpertsAndTheSharedOne) {
  auto model = Model::load(fixture_dir("glm4_moe_f32"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const auto ref = load_reference("glm4_moe_f32");
  CountingDevice device;
  Forward forward(*model, device);
  KvCache cache = forward.make_cache(32);
  ASSERT_TRUE(forward.run_ids(ref.prompt_ids, cache).ok());
  const auto& layers = model->weights().layers;
  ASSERT_TRUE(layers[0].expert_gate.empty() && !layers[1].shared_gate.empty() && !layers[2].router_bias.empty());
  for (const int32_t id : ref.greedy_ids) {
    device.reads.clear();
    ASSERT_TRUE(forward.run_ids(std::span(&id, 1), cache).ok());
    for (size_t l = 1; l < layers.size(); ++l) {
      int experts = 0;
      for (const auto* list : {&layers[l].expert_gate, &layers[l].expert_up, &layers[l].expert_down})
        for (const TensorView& w : *list) {
          const auto it = device.reads.find(w.data);
          if (it == device.reads.end()) continue;
          EXPECT_EQ(it->second, 1);
          ++experts;
        }
      EXPECT_EQ(experts, 3 * 3) << "layer " << l;
      for (const TensorView* w : {&layers[l].shared_gate, &layers[l].shared_up, &layers[l].shared_down})
        EXPECT_EQ(device.reads[w->data], 1) << "layer " << l;
    }
  }
}

}  // namespace
}  // namespace tessera
