// Every fixture on the GPU against transformers (the tolerances of the CPU:
// 1e-4 for f32, 2e-2 for 16-bit, and the same greedy tokens), and batch
// invariance on the GPU: a sequence's logits are bitwise the same alone, stepped
// with 31 others of different lengths, with its prompt in other chunks, and on
// every run; a CPU stage and a GPU stage together match transformers too.
// Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>

#include "model/fixtures.h"
#include "model/forward.h"
#include "support/gpu.h"

namespace tessera {
namespace {

using testing::fixture_dir;

constexpr uint64_t kKvMemory = uint64_t{64} << 20;

int32_t argmax(std::span<const float> logits) {
  return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Runs the reference's prompt, then its greedy tokens one at a time, through
// `run` (ids -> last-token logits), checking every row against transformers.
template <typename Run>
void expect_reference(const testing::Reference& ref, int64_t vocab_size, Run run) {
  const auto vocab = static_cast<size_t>(vocab_size);
  const auto steps = ref.greedy_ids.size();
  Result<std::vector<float>> logits = run(std::span<const int32_t>(ref.prompt_ids));
  for (size_t step = 0;; ++step) {
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    const std::span<const float> want(ref.logits.data() + step * vocab, vocab);
    float scale = 0, error = 0;
    for (size_t i = 0; i < vocab; ++i) {
      scale = std::max(scale, std::fabs(want[i]));
      error = std::max(error, std::fabs((*logits)[i] - want[i]));
    }
    EXPECT_LE(error / scale, ref.tolerance) << "row " << step;
    if (step == steps) break;
    // The reference's token runs next (its row may tie exactly: see reference_test.cpp).
    ASSERT_TRUE(testing::greedy_matches(*logits, want))
        << "greedy token " << step << ", the reference's " << ref.greedy_ids[step];
    logits = run(std::span<const int32_t>(&ref.greedy_ids[step], 1));
  }
}

class CudaReferenceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaReferenceTest, LogitsAndGreedyTokensMatchTransformers) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const auto ref = testing::load_reference(GetParam());
  auto model = Model::load(fixture_dir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Forward forward(*model, *gpu, {.kv_memory = kKvMemory});
  ASSERT_TRUE(forward.status().ok()) << forward.status().to_string();
  KvCache cache = forward.make_cache(static_cast<int64_t>(ref.prompt_ids.size() + ref.greedy_ids.size()));
  expect_reference(ref, model->config().vocab_size,
                   [&](std::span<const int32_t> ids) { return forward.run_ids(ids, cache); });
}

// Mixed hardware (issue 16, point 7): the first half of the layers on one device
// and the second half on the other, hidden states handed over as a pipeline stage
// hands them over the wire, both ways round: the reference's logits and greedy tokens.
TEST_P(CudaReferenceTest, CpuAndGpuStagesTogetherMatchTransformers) {
  TESSERA_CUDA_OR_SKIP(gpu);
  const auto ref = testing::load_reference(GetParam());
  auto cpu = make_cpu_device(2);
  auto whole = Model::load(fixture_dir(GetParam()));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const int64_t layers = whole->config().num_hidden_layers, k = layers / 2;
  auto head = Model::load(fixture_dir(GetParam()), LayerRange{0, k});
  auto tail = Model::load(fixture_dir(GetParam()), LayerRange{k, layers});
  ASSERT_TRUE(head.ok() && tail.ok());
  const auto capacity = static_cast<int64_t>(ref.prompt_ids.size() + ref.greedy_ids.size());
  for (const bool gpu_first : {false, true}) {
    SCOPED_TRACE(gpu_first ? "gpu stage, then cpu stage" : "cpu stage, then gpu stage");
    Forward first(*head, gpu_first ? *gpu : *cpu, {.kv_memory = kKvMemory});
    Forward second(*tail, gpu_first ? *cpu : *gpu, {.kv_memory = kKvMemory});
    ASSERT_TRUE(first.status().ok() && second.status().ok());
    KvCache first_cache = first.make_cache(capacity), second_cache = second.make_cache(capacity);
    expect_reference(ref, whole->config().vocab_size, [&](std::span<const int32_t> ids) -> Result<std::vector<float>> {
      TS_ASSIGN_OR_RETURN(const std::vector<float> hidden, first.run_ids(ids, first_cache));
      return second.run_hidden(hidden, second_cache);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaReferenceTest, ::testing::ValuesIn(testing::fixture_names()),
                         [](const auto& info) { return testing::test_name(info.param); });

std::vector<int32_t> make_prompt(int64_t n, int32_t first, int64_t vocab) {
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((first + 53 * i) % (vocab - 3) + 3));
  return ids;
}

// The logits after the prompt (fed in chunks of `chunk`) and after each of
// `decode` greedy tokens, for a sequence run alone.
std::vector<std::vector<float>> run_alone(Forward& forward, const std::vector<int32_t>& prompt, int decode,
                                          size_t chunk) {
  KvCache cache = forward.make_cache(static_cast<int64_t>(prompt.size()) + decode);
  std::vector<std::vector<float>> out;
  Result<std::vector<float>> logits = Status::internal("no prompt");
  for (size_t at = 0; at < prompt.size(); at += chunk)
    logits = forward.run_ids(std::span(prompt).subspan(at, std::min(chunk, prompt.size() - at)), cache);
  for (int i = 0;; ++i) {
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) return out;
    out.push_back(*logits);
    if (i == decode) return out;
    const int32_t next = argmax(*logits);
    logits = forward.run_ids(std::span(&next, 1), cache);
  }
}

class CudaBatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaBatchTest, SequenceGetsBitwiseItsLogitsAloneChunkedAndBesideThirtyOneOthers) {
  TESSERA_CUDA_OR_SKIP(gpu);
  auto model = Model::load(fixture_dir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Forward forward(*model, *gpu, {.kv_memory = kKvMemory, .kv_block_size = 4});
  ASSERT_TRUE(forward.status().ok()) << forward.status().to_string();
  // The same steps again, taking greedy tokens chosen on the device (step_greedy).
  Forward greedy(*model, *gpu, {.kv_memory = kKvMemory, .kv_block_size = 4});
  ASSERT_TRUE(greedy.status().ok()) << greedy.status().to_string();
  const int64_t vocab = model->config().vocab_size;
  constexpr int kSequences = 32, kDecode = 4;
  const auto vocab_rows = static_cast<size_t>(vocab);

  std::vector<std::vector<int32_t>> prompts;
  for (int s = 0; s < kSequences; ++s) prompts.push_back(make_prompt(2 + 3 * s, 17 * s + 5, vocab));
  const auto alone = run_alone(forward, prompts[0], kDecode, prompts[0].size());
  EXPECT_EQ(run_alone(forward, prompts[0], kDecode, prompts[0].size()), alone) << "a second run";
  EXPECT_EQ(run_alone(forward, prompts[0], kDecode, 1), alone) << "the prompt a token at a time";
  const auto longest = run_alone(forward, prompts[kSequences - 1], kDecode, 7);
  EXPECT_EQ(run_alone(forward, prompts[kSequences - 1], kDecode, 1000), longest) << "prompt in chunks of 7";

  // All 32 prompts in one step, then every sequence's greedy token in each of the next steps.
  std::vector<KvCache> caches, greedy_caches;
  for (int s = 0; s < kSequences; ++s) {
    caches.push_back(forward.make_cache(static_cast<int64_t>(prompts[s].size()) + kDecode));
    greedy_caches.push_back(greedy.make_cache(static_cast<int64_t>(prompts[s].size()) + kDecode));
  }
  std::vector<Forward::Part> parts, greedy_parts;
  std::vector<int32_t> ids;
  for (int s = 0; s < kSequences; ++s) {
    parts.push_back({&caches[static_cast<size_t>(s)], static_cast<int64_t>(prompts[s].size())});
    greedy_parts.push_back({&greedy_caches[static_cast<size_t>(s)], static_cast<int64_t>(prompts[s].size())});
    ids.insert(ids.end(), prompts[s].begin(), prompts[s].end());
  }
  for (int step = 0; step <= kDecode; ++step) {
    auto logits = forward.step_ids(ids, parts);
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    auto tokens = greedy.step_greedy(ids, greedy_parts);
    ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
    ASSERT_EQ(logits->size(), kSequences * vocab_rows);
    const std::vector<float> first(logits->begin(), logits->begin() + static_cast<std::ptrdiff_t>(vocab_rows));
    EXPECT_EQ(first, alone[static_cast<size_t>(step)]) << "step " << step;
    const std::vector<float> last(logits->end() - static_cast<std::ptrdiff_t>(vocab_rows), logits->end());
    EXPECT_EQ(last, longest[static_cast<size_t>(step)]) << "step " << step;
    ids.clear();
    for (int s = 0; s < kSequences; ++s) {
      ids.push_back(argmax(std::span(*logits).subspan(static_cast<size_t>(s) * vocab_rows, vocab_rows)));
      parts[static_cast<size_t>(s)].tokens = greedy_parts[static_cast<size_t>(s)].tokens = 1;
    }
    EXPECT_EQ(*tokens, ids) << "greedy tokens chosen on the device, step " << step;
  }
}

// CUDA graphs (issue 16, point 5; TESSERA_CUDA_GRAPHS=1): decode steps recorded and replayed as graphs
// give bitwise the logits of the same steps launched kernel by kernel, while
// sequences leave the batch, their block tables grow (blocks of 4 positions) and
// their contexts cross a 64-position partition: each step's graph is an earlier
// one updated to its parameters, and a stale one would give other logits.
TEST_P(CudaBatchTest, DecodeStepsAsGraphsAreBitwiseTheStepsLaunchedOneByOne) {
  ASSERT_EQ(unsetenv("TESSERA_CUDA_GRAPHS"), 0);
  TESSERA_CUDA_OR_SKIP(one_by_one);
  ASSERT_EQ(setenv("TESSERA_CUDA_GRAPHS", "1", 1), 0);
  auto graphs = make_cuda_device(0);
  unsetenv("TESSERA_CUDA_GRAPHS");
  ASSERT_TRUE(graphs.ok()) << graphs.status().to_string();
  auto model = Model::load(fixture_dir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int64_t vocab = model->config().vocab_size;
  constexpr int kSequences = 5, kDecode = 16;
  std::vector<std::unique_ptr<Forward>> forwards;
  for (Device* device : {one_by_one.get(), graphs->get()}) {
    forwards.push_back(
        std::make_unique<Forward>(*model, *device, ForwardOptions{.kv_memory = kKvMemory, .kv_block_size = 4}));
    ASSERT_TRUE(forwards.back()->status().ok()) << forwards.back()->status().to_string();
  }
  std::vector<std::vector<KvCache>> caches(2);
  std::vector<int32_t> prompt_ids;
  std::vector<std::vector<Forward::Part>> parts(2);
  for (int s = 0; s < kSequences; ++s) {
    const std::vector<int32_t> prompt = make_prompt(52 + 3 * s, 11 * s + 2, vocab);  // 52..64: past 64 while decoding
    prompt_ids.insert(prompt_ids.end(), prompt.begin(), prompt.end());
    for (size_t f = 0; f < 2; ++f)
      caches[f].push_back(forwards[f]->make_cache(static_cast<int64_t>(prompt.size()) + kDecode));
  }
  for (size_t f = 0; f < 2; ++f)
    for (int s = 0; s < kSequences; ++s) parts[f].push_back({&caches[f][static_cast<size_t>(s)], 52 + 3 * int64_t{s}});
  std::vector<std::vector<float>> logits(2);
  for (size_t f = 0; f < 2; ++f) {
    auto out = forwards[f]->step_ids(prompt_ids, parts[f]);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    logits[f] = std::move(*out);
  }
  ASSERT_EQ(logits[0], logits[1]) << "the prompts' step";
  for (int step = 0; step < kDecode; ++step) {
    std::vector<int32_t> ids;
    for (size_t s = 0; s < parts[0].size(); ++s)
      ids.push_back(argmax(std::span(logits[0]).subspan(s * static_cast<size_t>(vocab), static_cast<size_t>(vocab))));
    if (step % 5 == 4) {  // the last sequence leaves the batch
      ids.pop_back();
      parts[0].pop_back();
      parts[1].pop_back();
    }
    for (size_t f = 0; f < 2; ++f) {
      for (Forward::Part& part : parts[f]) part.tokens = 1;
      auto out = forwards[f]->step_ids(ids, parts[f]);
      ASSERT_TRUE(out.ok()) << out.status().to_string();
      logits[f] = std::move(*out);
    }
    ASSERT_EQ(logits[0], logits[1]) << "decode step " << step << " of " << parts[0].size() << " sequences";
  }
  EXPECT_EQ(one_by_one->steps_as_graphs(), 0);
  EXPECT_EQ((*graphs)->steps_as_graphs(), kDecode) << "every decode step ran as a graph";
}

// The MoE ones too: a token's experts and their sums do not depend on the step's other tokens (issue 18, point 3).
INSTANTIATE_TEST_SUITE_P(Fixtures, CudaBatchTest,
                         ::testing::Values("llama3_bf16", "qwen3_f32", "mistral_f32", "qwen3_moe_bf16", "glm4_moe_f32"),
                         [](const auto& info) { return testing::test_name(info.param); });

}  // namespace
}  // namespace tessera
