// The one generation loop (engine/generation.h) on a real checkpoint: a second
// request on the same runner reuses the prompt prefix the runner holds and gets
// exactly what a fresh runner gets; keep_logits scores every step, including
// the one after the last token.
#include "engine/generation.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "engine/local_engine.h"
#include "model/fixtures.h"

namespace tessera {
namespace {

class GenerationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(testing::fixture_dir("llama3_f32"));
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::make_unique<Model>(std::move(model).value());
    auto engine = LocalEngine::create(*model_, {.threads = 1, .forward = {.kv_memory = uint64_t{8} << 20}});
    ASSERT_TRUE(engine.ok()) << engine.status().to_string();
    engine_ = std::move(engine).value();
  }
  Result<GenerationResult> run(SequenceRunner& runner, std::vector<int32_t> prompt, bool keep_logits = false) {
    GenerationRequest request;
    request.prompt = std::move(prompt);
    request.max_tokens = 6;
    request.keep_logits = keep_logits;
    return generate(runner, model_->config().vocab_size, request, [](int32_t) { return true; });
  }
  std::unique_ptr<Model> model_;
  LocalEngine engine_;
};

// A new engine has run one position through its layers (the first request then pays
// nothing that happens once) and given that position's block back.
TEST_F(GenerationTest, ANewEngineHasWarmedUpAndGivenItsBlockBack) {
  const KvPool& pool = engine_.forward->kv_pool();
  EXPECT_EQ(pool.free_blocks(), pool.total_blocks());
  const KvPages& pages = pool.pages();
  ASSERT_EQ(pages.dtype, DType::kF32);
  const auto* values = static_cast<const float*>(pages.base);
  EXPECT_TRUE(std::any_of(values, values + pages.blocks * pages.block_elements(), [](float v) { return v != 0.0f; }))
      << "no position was written: the engine did not warm up";
}

TEST_F(GenerationTest, ASecondRequestReusesTheHeldPrefixAndGetsWhatAFreshRunnerGets) {
  LocalRunner runner(*engine_.scheduler, 64, SamplingParams{});
  auto first = run(runner, {5, 9, 2, 7});
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  // The runner holds the prompt and every generated token but the last.
  std::vector<int32_t> held = {5, 9, 2, 7};
  held.insert(held.end(), first->tokens.begin(), first->tokens.end() - 1);
  ASSERT_EQ(std::vector<int32_t>(runner.tokens().begin(), runner.tokens().end()), held);

  // A follow-up that shares 6 of those tokens, then differs.
  std::vector<int32_t> follow(held.begin(), held.begin() + 6);
  follow.insert(follow.end(), {11, 3});
  auto second = run(runner, follow);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  LocalRunner fresh(*engine_.scheduler, 64, SamplingParams{});
  auto expected = run(fresh, follow);
  ASSERT_TRUE(expected.ok()) << expected.status().to_string();
  EXPECT_EQ(second->tokens, expected->tokens);
  EXPECT_TRUE(std::ranges::equal(runner.tokens(), fresh.tokens()));
}

TEST_F(GenerationTest, KeepLogitsScoresEveryStepIncludingTheLast) {
  LocalRunner scoring(*engine_.scheduler, 64);
  auto scored = run(scoring, {5, 9, 2, 7}, /*keep_logits=*/true);
  ASSERT_TRUE(scored.ok()) << scored.status().to_string();
  const auto vocab = static_cast<size_t>(model_->config().vocab_size);
  ASSERT_EQ(scored->logits.size(), (scored->tokens.size() + 1) * vocab);
  // Row i is what a fresh run of the prompt and the first i tokens ends with.
  for (size_t i = 0; i <= scored->tokens.size(); ++i) {
    std::vector<int32_t> ids = {5, 9, 2, 7};
    ids.insert(ids.end(), scored->tokens.begin(), scored->tokens.begin() + static_cast<std::ptrdiff_t>(i));
    LocalRunner fresh(*engine_.scheduler, 64);
    auto logits = fresh.run(ids);
    ASSERT_TRUE(logits.ok());
    EXPECT_TRUE(std::equal(logits->begin(), logits->end(), scored->logits.begin() + i * vocab)) << "row " << i;
  }
}

}  // namespace
}  // namespace tessera
