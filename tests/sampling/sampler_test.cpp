// The sampler chain: each control against its definition, reproducibility by
// seed, and refusal of out-of-range parameters (verified by reverting: each
// check in validate() removed makes RefusesOutOfRangeParameters fail).
#include "sampling/sampler.h"

#include <gtest/gtest.h>

#include <limits>
#include <map>
#include <vector>

namespace tessera {
namespace {

std::vector<float> logits_of(std::initializer_list<float> values) { return values; }

int32_t sample_once(SamplingParams params, std::vector<float> logits, std::vector<int32_t> prompt = {},
                    std::vector<int32_t> output = {}) {
  Sampler sampler(std::move(params), static_cast<int64_t>(logits.size()));
  return sampler.sample(logits, prompt, output);
}

// A preempted request's sampler resumes on another process (the last pipeline
// stage) from its seed: skip(k) leaves it where k samples would have, whatever
// logits they drew from (a different vocabulary row each, top-k, top-p, all
// -inf), so the tokens after are the uninterrupted sampler's.
TEST(SamplerTest, SkipResumesWhereTheSamplesLeftTheGenerator) {
  SamplingParams p;
  p.temperature = 0.9f;
  p.top_k = 5;
  p.top_p = 0.9f;
  p.seed = 1234;
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<std::vector<float>> rows = {{0.1f, 2.0f, 1.0f, -1.0f, 0.5f, 0.3f, 1.5f, 0.0f},
                                                {-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf},
                                                {3.0f, 2.9f, 2.8f, 2.7f, 2.6f, 2.5f, 2.4f, 2.3f},
                                                {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 9.0f}};
  const std::vector<float> next = {1.0f, 1.1f, 1.2f, 1.3f, 1.4f, 1.5f, 1.6f, 1.7f};
  Sampler whole(p, 8);
  for (std::vector<float> row : rows) (void)whole.sample(row, {}, {});
  Sampler resumed(p, 8);
  resumed.skip(rows.size());
  Sampler fresh(p, 8);
  bool differs_from_fresh = false;
  for (int i = 0; i < 32; ++i) {
    std::vector<float> a = next, b = next, c = next;
    const int32_t token = whole.sample(a, {}, {});
    EXPECT_EQ(resumed.sample(b, {}, {}), token) << "sample " << i;
    differs_from_fresh |= fresh.sample(c, {}, {}) != token;
  }
  EXPECT_TRUE(differs_from_fresh);  // the skip mattered
  p.temperature = 0;                // greedy samples take no draw: nothing to skip
  Sampler greedy(p, 8);
  greedy.skip(3);
  std::vector<float> row = next;
  EXPECT_EQ(greedy.sample(row, {}, {}), 7);
}

TEST(SamplerTest, GreedyPicksArgmax) { EXPECT_EQ(sample_once({}, logits_of({0.1f, 3.0f, 2.0f})), 1); }

TEST(SamplerTest, LogitBiasCanBanOrForce) {
  SamplingParams p;
  p.logit_bias = {{1, -100.0f}};
  EXPECT_EQ(sample_once(p, logits_of({0.1f, 3.0f, 2.0f})), 2);
  p.logit_bias = {{0, 100.0f}};
  EXPECT_EQ(sample_once(p, logits_of({0.1f, 3.0f, 2.0f})), 0);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegative) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  // 3.0 seen -> 1.5 < 2.0: token 2 wins.
  EXPECT_EQ(sample_once(p, logits_of({0.1f, 3.0f, 2.0f}), {1}), 2);
  // -1.0 seen -> -2.0 < -1.5: token 1 wins.
  EXPECT_EQ(sample_once(p, logits_of({-1.0f, -1.5f}), {}, {0}), 1);
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesCountOutputTokens) {
  SamplingParams p;
  p.frequency_penalty = 0.6f;
  // token 1 appeared twice in the output: 3.0 - 1.2 = 1.8 < 2.0.
  EXPECT_EQ(sample_once(p, logits_of({0.1f, 3.0f, 2.0f}), {}, {1, 1}), 2);
  EXPECT_EQ(sample_once(p, logits_of({0.1f, 3.0f, 2.0f}), {1, 1}, {}), 1);  // the prompt does not count
  p.frequency_penalty = 0;
  p.presence_penalty = 1.5f;
  EXPECT_EQ(sample_once(p, logits_of({0.1f, 3.0f, 2.0f}), {}, {1}), 2);
}

TEST(SamplerTest, TopKOneIsGreedy) {
  SamplingParams p;
  p.temperature = 5.0f;
  p.top_k = 1;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    EXPECT_EQ(sample_once(p, logits_of({0.1f, 3.0f, 2.9f})), 1);
  }
}

TEST(SamplerTest, TopPKeepsSmallestPrefixReachingP) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_p = 0.5f;  // probabilities ~ [0.84, 0.11, 0.04]: only the first survives
  for (uint64_t seed = 0; seed < 20; ++seed) {
    p.seed = seed;
    EXPECT_EQ(sample_once(p, logits_of({4.0f, 2.0f, 1.0f})), 0);
  }
}

TEST(SamplerTest, MinPDropsUnlikelyTokens) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.min_p = 0.2f;  // token 2 has p ratio e^-3 ~ 0.05 of the best: dropped
  std::map<int32_t, int> seen;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    p.seed = seed;
    ++seen[sample_once(p, logits_of({2.0f, 1.8f, -1.0f}))];
  }
  EXPECT_EQ(seen.count(2), 0u);
  EXPECT_GT(seen[0], 0);
  EXPECT_GT(seen[1], 0);
}

TEST(SamplerTest, TemperatureSamplingFollowsTheDistribution) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  Sampler sampler(p, 2);
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = [0.25, 0.75]
    ones += sampler.sample(logits, {}, {}) == 1;
  }
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.02);
}

TEST(SamplerTest, SameSeedSameTokens) {
  SamplingParams p;
  p.temperature = 1.3f;
  p.top_p = 0.9f;
  p.seed = 42;
  std::vector<int32_t> a, b;
  Sampler first(p, 5), second(p, 5);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> l1 = {1.0f, 0.5f, 0.2f, 0.9f, 0.0f}, l2 = l1;
    a.push_back(first.sample(l1, {}, a));
    b.push_back(second.sample(l2, {}, b));
  }
  EXPECT_EQ(a, b);
}

TEST(SamplerTest, AllTokensBannedFallsBackToArgmax) {
  SamplingParams p;
  p.temperature = 1.0f;
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(sample_once(p, logits_of({-inf, -inf})), 0);
}

TEST(SamplerTest, RefusesOutOfRangeParameters) {
  const auto refused = [](auto edit, const std::string& name) {
    SamplingParams p;
    edit(p);
    const Status status = validate(p, 10);
    EXPECT_EQ(status.kind(), ErrorKind::kInvalidInput) << name;
    EXPECT_NE(status.message().find(name), std::string::npos) << status.message();
  };
  refused([](SamplingParams& p) { p.temperature = -1; }, "temperature");
  refused([](SamplingParams& p) { p.top_k = -1; }, "top_k");
  refused([](SamplingParams& p) { p.top_p = 0; }, "top_p");
  refused([](SamplingParams& p) { p.top_p = 1.5f; }, "top_p");
  refused([](SamplingParams& p) { p.min_p = 2; }, "min_p");
  refused([](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty");
  refused([](SamplingParams& p) { p.logit_bias = {{10, 1.0f}}; }, "logit_bias token 10");
  EXPECT_TRUE(validate(SamplingParams{}, 10).ok());
}

}  // namespace
}  // namespace tessera
