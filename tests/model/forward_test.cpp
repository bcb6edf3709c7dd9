// The layer-range seam every pipeline stage uses: [0, k) then [k, L) with the
// hidden states handed over gives bitwise the logits of [0, L); sequences stepped
// together get bitwise what each gets alone; and the errors a caller of Forward
// and Model::load can meet.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "fixtures.h"
#include "forwarding_device.h"
#include "io/gguf_fixtures.h"
#include "model/forward.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::fixture_dir;
using testing::load_reference;

class SplitTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SplitTest, TwoRangesGiveBitwiseTheLogitsOfOne) {
  const auto ref = load_reference(GetParam());
  auto whole = Model::load(fixture_dir(GetParam()));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const int64_t layers = whole->config().num_hidden_layers;
  auto device = make_cpu_device(2);
  const auto capacity = static_cast<int64_t>(ref.prompt_ids.size() + ref.greedy_ids.size());

  for (int64_t k = 1; k < layers; ++k) {
    auto head = Model::load(fixture_dir(GetParam()), LayerRange{0, k});
    auto tail = Model::load(fixture_dir(GetParam()), LayerRange{k, layers});
    ASSERT_TRUE(head.ok() && tail.ok());
    EXPECT_TRUE(head->has_entry() && !head->has_exit());
    EXPECT_TRUE(!tail->has_entry() && tail->has_exit());
    Forward one(*whole, *device), first(*head, *device), second(*tail, *device);
    KvCache one_cache = one.make_cache(capacity), first_cache = first.make_cache(capacity),
            second_cache = second.make_cache(capacity);

    // Prompt, then the reference's greedy tokens one at a time.
    std::vector<std::span<const int32_t>> steps = {ref.prompt_ids};
    for (const int32_t& id : ref.greedy_ids) steps.emplace_back(&id, 1);
    for (const auto& ids : steps) {
      auto expected = one.run_ids(ids, one_cache);
      auto hidden = first.run_ids(ids, first_cache);
      ASSERT_TRUE(expected.ok() && hidden.ok());
      EXPECT_EQ(hidden->size(), ids.size() * static_cast<size_t>(whole->config().hidden_size));
      auto logits = second.run_hidden(*hidden, second_cache);
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      EXPECT_EQ(*logits, *expected) << "split at layer " << k;
    }
  }
}

// The KV cache keeps a checkpoint's own dtype unless told otherwise: an f32
// checkpoint f32, a bf16 or f16 one 16 bits, on every layer range (what a
// pipeline stage binds) as on the whole; so one --kv-memory budget holds twice
// the positions of f32. ForwardOptions::kv_dtype (--kv-dtype f32) still gives f32.
TEST(KvDtypeTest, DefaultIsTheCheckpointsDtypeOnEveryRangeAndF32WhenAsked) {
  const std::vector<std::pair<std::string, DType>> checkpoints = {{"llama3_f32", DType::kF32},
                                                                  {"llama3_bf16", DType::kBF16},
                                                                  {"llama_f16", DType::kF16},
                                                                  {testing::kShippedModel, DType::kBF16}};
  constexpr uint64_t kBudget = uint64_t{1} << 20;
  auto device = make_cpu_device(1);
  for (const auto& [name, dtype] : checkpoints) {
    SCOPED_TRACE(name);
    auto whole = Model::load(fixture_dir(name));
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    const int64_t layers = whole->config().num_hidden_layers;
    auto tail = Model::load(fixture_dir(name), LayerRange{layers - 1, layers});
    ASSERT_TRUE(tail.ok()) << tail.status().to_string();
    EXPECT_EQ(default_kv_dtype(*whole), dtype);

    const Forward by_default(*whole, *device, {.kv_memory = kBudget});
    const Forward stage(*tail, *device, {.kv_memory = kBudget});
    const Forward f32(*whole, *device, {.kv_memory = kBudget, .kv_dtype = DType::kF32});
    ASSERT_TRUE(by_default.status().ok() && stage.status().ok() && f32.status().ok());
    EXPECT_EQ(by_default.kv_pool().pages().dtype, dtype);
    EXPECT_EQ(stage.kv_pool().pages().dtype, dtype);
    EXPECT_EQ(f32.kv_pool().pages().dtype, DType::kF32);
    EXPECT_EQ(by_default.kv_pool().total_blocks(),
              f32.kv_pool().total_blocks() * 4 / static_cast<int64_t>(dtype_size(dtype)));
  }
}

// GGUF blocks name no 16-bit dtype: their cache is f16 (llama.cpp's default) on
// every device, half the bytes of f32 a position; a GGUF of f16 weights keeps f16;
// ForwardOptions::kv_dtype (--kv-dtype f32) still gives f32. (Failed first with the
// CPU's f32 default of sessions before 48.)
TEST(KvDtypeTest, GgufBlocksTakeF16OnTheCpuAndF32WhenAsked) {
  constexpr uint64_t kBudget = uint64_t{1} << 20;
  auto cpu = make_cpu_device(1);
  for (const std::string file : {"llama256_f16_q4_k_m", "llama3_f32_q8_0", "llama_f16"}) {
    SCOPED_TRACE(file);
    auto model = Model::load(testing::gguf_model(file));
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ(default_kv_dtype(*model), DType::kF16);
    const Forward by_default(*model, *cpu, {.kv_memory = kBudget});
    const Forward f32(*model, *cpu, {.kv_memory = kBudget, .kv_dtype = DType::kF32});
    ASSERT_TRUE(by_default.status().ok() && f32.status().ok());
    EXPECT_EQ(by_default.kv_pool().pages().dtype, DType::kF16);
    EXPECT_EQ(f32.kv_pool().pages().dtype, DType::kF32);
    EXPECT_EQ(by_default.kv_pool().total_blocks(), 2 * f32.kv_pool().total_blocks());
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, SplitTest,
                         ::testing::Values("llama2_mqa_f32", "qwen3_bf16", "mistral_f32", "mixtral_f32",
                                           "qwen3_moe_bf16", "qwen3_moe_unnorm_f32", "phi3_f32", "glm4_f32",
                                           "gemma3_f32", "gemma3_softcap_f32", "glm4_moe_f32", testing::kShippedModel),
                         [](const auto& info) { return testing::test_name(info.param); });

// Three sequences of different lengths stepped together (step_ids, and
// step_hidden on the second half of a split) get bitwise the logits each gets
// stepped alone, step after step; the first sequence takes two tokens a step
// (a prompt's chunk beside the others' decode steps).
class BatchTest : public ::testing::TestWithParam<std::string> {};

TEST_P(BatchTest, SequencesSteppedTogetherGetBitwiseTheirLogitsAlone) {
  const auto ref = load_reference(GetParam());
  auto whole = Model::load(fixture_dir(GetParam()));
  ASSERT_TRUE(whole.ok()) << whole.status().to_string();
  const int64_t layers = whole->config().num_hidden_layers;
  auto head = Model::load(fixture_dir(GetParam()), LayerRange{0, layers / 2});
  auto tail = Model::load(fixture_dir(GetParam()), LayerRange{layers / 2, layers});
  ASSERT_TRUE(head.ok() && tail.ok());
  auto device = make_cpu_device(2);
  Forward alone(*whole, *device), together(*whole, *device), first(*head, *device), second(*tail, *device);
  const auto capacity = static_cast<int64_t>(ref.prompt_ids.size() + 2 * ref.greedy_ids.size());
  const std::vector<int64_t> tokens = {2, 1, 1};  // per sequence and step
  std::vector<KvCache> alone_caches, together_caches, first_caches, second_caches;
  for (size_t s = 0; s < tokens.size(); ++s) {
    // Sequence s: the prompt without its last s tokens, prefilled in one call.
    const std::span<const int32_t> prompt(ref.prompt_ids.data(), ref.prompt_ids.size() - s);
    alone_caches.push_back(alone.make_cache(capacity));
    together_caches.push_back(together.make_cache(capacity));
    first_caches.push_back(first.make_cache(capacity));
    second_caches.push_back(second.make_cache(capacity));
    ASSERT_TRUE(alone.run_ids(prompt, alone_caches[s]).ok());
    ASSERT_TRUE(together.run_ids(prompt, together_caches[s]).ok());
    auto hidden = first.run_ids(prompt, first_caches[s]);
    ASSERT_TRUE(hidden.ok());
    ASSERT_TRUE(second.run_hidden(*hidden, second_caches[s]).ok());
  }
  std::vector<Forward::Part> together_parts, first_parts, second_parts;
  for (size_t s = 0; s < tokens.size(); ++s) {
    together_parts.push_back({&together_caches[s], tokens[s]});
    first_parts.push_back({&first_caches[s], tokens[s]});
    second_parts.push_back({&second_caches[s], tokens[s]});
  }
  const size_t vocab = static_cast<size_t>(whole->config().vocab_size);
  size_t next = 0;  // each token of a step is another of the reference's greedy ids
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<int32_t>> ids(tokens.size());
    std::vector<int32_t> all;
    for (size_t s = 0; s < tokens.size(); ++s) {
      for (int64_t t = 0; t < tokens[s]; ++t) ids[s].push_back(ref.greedy_ids[next++ % ref.greedy_ids.size()]);
      all.insert(all.end(), ids[s].begin(), ids[s].end());
    }
    auto batched = together.step_ids(all, together_parts);
    ASSERT_TRUE(batched.ok()) << batched.status().to_string();
    auto hidden = first.step_ids(all, first_parts);
    ASSERT_TRUE(hidden.ok()) << hidden.status().to_string();
    auto split = second.step_hidden(*hidden, second_parts);
    ASSERT_TRUE(split.ok()) << split.status().to_string();
    ASSERT_EQ(batched->size(), tokens.size() * vocab);
    for (size_t s = 0; s < tokens.size(); ++s) {
      auto expected = alone.run_ids(ids[s], alone_caches[s]);
      ASSERT_TRUE(expected.ok());
      const std::vector<float> row(batched->begin() + s * vocab, batched->begin() + (s + 1) * vocab);
      const std::vector<float> split_row(split->begin() + s * vocab, split->begin() + (s + 1) * vocab);
      EXPECT_EQ(row, *expected) << "sequence " << s << " step " << step;
      EXPECT_EQ(split_row, *expected) << "split, sequence " << s << " step " << step;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchTest,
                         ::testing::Values("llama3_f32", "qwen3_bf16", "mistral_f32", "mixtral_bf16", "qwen3_moe_f32",
                                           "qwen3_moe_unnorm_f32", "phi3_f32", "glm4_f32", "gemma3_f32",
                                           "gemma3_softcap_f32", "glm4_moe_f32", testing::kShippedModel),
                         [](const auto& info) { return testing::test_name(info.param); });

// step_greedy's tokens are the argmax of step_ids' rows, step after step, for
// every family (gemma3_softcap's are chosen after the cap, on the host).
TEST_P(BatchTest, StepGreedyTakesTheArgmaxOfEachPartsLogits) {
  const auto ref = load_reference(GetParam());
  auto model = Model::load(fixture_dir(GetParam()));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto device = make_cpu_device(2);
  Forward logits_forward(*model, *device), greedy_forward(*model, *device);
  const auto vocab = static_cast<size_t>(model->config().vocab_size);
  const auto capacity = static_cast<int64_t>(ref.prompt_ids.size() + 4);
  std::vector<KvCache> logits_caches, greedy_caches;
  std::vector<Forward::Part> logits_parts, greedy_parts;
  std::vector<int32_t> ids;
  for (size_t s = 0; s < 3; ++s) {  // sequence s: the prompt without its last s tokens
    logits_caches.push_back(logits_forward.make_cache(capacity));
    greedy_caches.push_back(greedy_forward.make_cache(capacity));
    ids.insert(ids.end(), ref.prompt_ids.begin(), ref.prompt_ids.end() - static_cast<std::ptrdiff_t>(s));
  }
  for (size_t s = 0; s < 3; ++s) {
    const auto tokens = static_cast<int64_t>(ref.prompt_ids.size() - s);
    logits_parts.push_back({&logits_caches[s], tokens});
    greedy_parts.push_back({&greedy_caches[s], tokens});
  }
  for (int step = 0; step < 4; ++step) {
    auto logits = logits_forward.step_ids(ids, logits_parts);
    ASSERT_TRUE(logits.ok()) << logits.status().to_string();
    auto tokens = greedy_forward.step_greedy(ids, greedy_parts);
    ASSERT_TRUE(tokens.ok()) << tokens.status().to_string();
    ids.clear();
    for (size_t s = 0; s < 3; ++s) {
      const auto row = logits->begin() + static_cast<std::ptrdiff_t>(s * vocab);
      ids.push_back(static_cast<int32_t>(std::max_element(row, row + static_cast<std::ptrdiff_t>(vocab)) - row));
      logits_parts[s].tokens = greedy_parts[s].tokens = 1;
    }
    EXPECT_EQ(*tokens, ids) << "step " << step;
  }
}

class ForwardErrorTest : public testing::Llama3Test {};

TEST_F(ForwardErrorTest, RefusesTokenIdOutsideVocabulary) {
  Forward forward(*model_, *device_);
  KvCache cache = forward.make_cache(8);
  const std::vector<int32_t> ids = {1, static_cast<int32_t>(model_->config().vocab_size)};
  auto result = forward.run_ids(ids, cache);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(result.status().message().find("token id 512"), std::string::npos) << result.status().message();
  EXPECT_EQ(cache.length(), 0);  // nothing was written
}

TEST_F(ForwardErrorTest, RefusesSequenceBeyondCacheCapacity) {
  Forward forward(*model_, *device_);
  KvCache cache = forward.make_cache(2);
  const std::vector<int32_t> ids = {1, 2, 3};
  auto result = forward.run_ids(ids, cache);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("capacity of 2"), std::string::npos) << result.status().message();
}

TEST_F(ForwardErrorTest, RefusesHiddenStatesOfWrongWidth) {
  auto tail = Model::load(fixture_dir("llama2_mqa_f32"), LayerRange{1, 3});
  ASSERT_TRUE(tail.ok());
  Forward forward(*tail, *device_);
  KvCache cache = forward.make_cache(4);
  const std::vector<float> hidden(65, 0.0f);
  EXPECT_EQ(forward.run_hidden(hidden, cache).status().kind(), ErrorKind::kInvalidInput);
}

// A step that any one sequence cannot take is refused whole, before any cache
// changes: a token outside the vocabulary, a full cache, the same sequence
// twice, token counts that do not add up, no tokens.
TEST_F(ForwardErrorTest, RefusedStepLeavesEveryCacheAsItWas) {
  Forward forward(*model_, *device_);
  KvCache a = forward.make_cache(4), b = forward.make_cache(1), full = forward.make_cache(1);
  ASSERT_TRUE(forward.run_ids(std::vector<int32_t>{3}, full).ok());
  const auto vocab = static_cast<int32_t>(model_->config().vocab_size);
  using Parts = std::vector<Forward::Part>;
  const struct {
    std::vector<int32_t> ids;
    Parts parts;
    std::string error;
  } cases[] = {{{1, vocab}, Parts{{&a}, {&b}}, "token id 512"},
               {{1, 2}, Parts{{&a}, {&full}}, "capacity of 1"},
               {{1, 2, 3}, Parts{{&a}, {&b, 2}}, "capacity of 1"},
               {{1, 2}, Parts{{&a}, {&a}}, "one sequence twice"},
               {{1}, Parts{{&a}, {&b}}, "1 tokens for parts of 2"},
               {{1, 2}, Parts{{&a, 2}, {&b, 0}}, "no tokens"},
               {{}, Parts{}, "no tokens"}};
  for (const auto& c : cases) {
    auto result = forward.step_ids(c.ids, c.parts);
    ASSERT_FALSE(result.ok()) << c.error;
    EXPECT_EQ(result.status().kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(result.status().message().find(c.error), std::string::npos) << result.status().message();
    EXPECT_EQ(a.length(), 0);
    EXPECT_EQ(b.length(), 0);
    EXPECT_EQ(full.length(), 1);
  }
}

// A device that runs out of memory at its `fail_at`-th place() (as a GPU does
// when the weights do not fit); everything else goes to a CPU device.
class FullDevice final : public testing::ForwardingDevice {
 public:
  explicit FullDevice(int fail_at) : fail_at_(fail_at) {}
  std::string name() const override { return "full"; }
  Result<TensorView> place(const TensorView& host) override {
    if (++placed_ == fail_at_) return Status::overloaded("out of memory");
    return host;
  }

 private:
  int fail_at_, placed_ = 0;
};

// The first weight is the embedding; then each layer's attn_norm, wq, wk, ...
TEST(ForwardLoadTest, WeightThatDoesNotFitIsNamedAndEveryRunReturnsTheError) {
  auto model = Model::load(fixture_dir("llama3_f32"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  FullDevice device(4);
  Forward forward(*model, device, {.kv_memory = 1 << 20});
  ASSERT_FALSE(forward.status().ok());
  EXPECT_EQ(forward.status().kind(), ErrorKind::kOverloaded);
  EXPECT_NE(forward.status().message().find("loading layer 0's self_attn.k_proj.weight onto full"), std::string::npos)
      << forward.status().to_string();
  KvCache* no_cache = nullptr;
  const int32_t id = 1;
  const Forward::Part part{no_cache, 1};
  EXPECT_EQ(forward.step_ids(std::span(&id, 1), std::span(&part, 1)).status().kind(), ErrorKind::kOverloaded);
}

TEST(ModelLoadTest, RefusesLayerRangeOutsideModel) {
  for (const LayerRange range : {LayerRange{0, 4}, LayerRange{2, 2}, LayerRange{-1, 1}}) {
    auto model = Model::load(fixture_dir("llama3_f32"), range);
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.status().message().find("layer range"), std::string::npos);
  }
}

TEST(ModelLoadTest, StageOnlyBindsItsOwnLayers) {
  auto tail = Model::load(fixture_dir("llama2_mqa_f32"), LayerRange{2, 3});
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->weights().layers.size(), 1u);
  EXPECT_TRUE(tail->weights().embed.empty());  // untied: the last stage needs no embedding
  auto head = Model::load(fixture_dir("llama2_mqa_f32"), LayerRange{0, 1});
  ASSERT_TRUE(head.ok());
  EXPECT_TRUE(head->weights().lm_head.empty() && head->weights().final_norm.empty());
}

TEST(ModelLoadTest, TiedEmbeddingsServeAsLmHeadWhenFileHasNone) {
  auto model = Model::load(fixture_dir("qwen2_f32"));
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_TRUE(model->config().tie_word_embeddings);
  EXPECT_EQ(model->weights().lm_head.data, model->weights().embed.data);
}

// Copies a fixture into a temp dir, with config.json edited by `edit`.
std::string copy_fixture(const std::string& name, const std::string& tag,
                         const std::function<void(std::string&)>& edit = {}) {
  const fs::path dir = fs::path(::testing::TempDir()) / ("tessera_" + tag);
  fs::remove_all(dir);
  fs::copy(fixture_dir(name), dir);
  if (edit) {
    std::ifstream in(dir / "config.json");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    edit(text);
    std::ofstream(dir / "config.json") << text;
  }
  return dir.string();
}

void replace(std::string& text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
}

TEST(ModelLoadTest, ConfigShapeDisagreeingWithTensorNamesTensorAndShapes) {
  const auto dir = copy_fixture("llama3_f32", "wrong_shape", [](std::string& t) {
    replace(t, "\"intermediate_size\": 160", "\"intermediate_size\": 128");
  });
  auto model = Model::load(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().kind(), ErrorKind::kInvalidInput);
  const std::string message = model.status().message();
  EXPECT_NE(message.find("model.layers.0.mlp.gate_proj.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("[160, 64]"), std::string::npos) << message;
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
}

TEST(ModelLoadTest, MissingTensorIsNamed) {
  // Qwen3 needs q_norm; claiming a llama config on it still loads, but claiming qwen3 on llama weights must fail.
  const auto dir = copy_fixture("llama3_f32", "missing_tensor", [](std::string& t) {
    replace(t, "\"model_type\": \"llama\"", "\"model_type\": \"qwen3\"");
  });
  auto model = Model::load(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(model.status().message().find("q_norm"), std::string::npos) << model.status().message();
}

// An expert tensor the checkpoint lacks is refused at load, by its name (fails
// if the experts were not bound from the checkpoint). The header's name is
// changed in place ("w2" to "x2": same length, so the offsets still hold).
TEST(ModelLoadTest, MissingExpertTensorIsNamed) {
  const auto dir = copy_fixture("mixtral_f32", "missing_expert");
  const fs::path file = fs::path(dir) / "model.safetensors";
  std::ifstream in(file, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  replace(bytes, "model.layers.1.block_sparse_moe.experts.3.w2.weight",
          "model.layers.1.block_sparse_moe.experts.3.x2.weight");
  std::ofstream(file, std::ios::binary) << bytes;
  auto model = Model::load(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(model.status().message().find("model.layers.1.block_sparse_moe.experts.3.w2.weight"), std::string::npos)
      << model.status().message();
}

// Gemma3TextConfig defaults tie_word_embeddings to true, and the published
// gemma-3 configs leave it out: such a checkpoint has no lm_head.weight and must
// load with the embedding as its LM head (without arch/gemma3.cpp's default this
// fails: "tensor 'lm_head.weight' is missing"), giving the fixture's logits.
TEST(ModelLoadTest, Gemma3TiesEmbeddingsWhenTheConfigIsSilent) {
  const auto dir = copy_fixture("gemma3_f32", "gemma3_untold_tie",
                                [](std::string& t) { replace(t, "\"tie_word_embeddings\": true,", ""); });
  auto model = Model::load(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  EXPECT_TRUE(model->config().tie_word_embeddings);
  EXPECT_EQ(model->weights().lm_head.data, model->weights().embed.data);
  auto stated = Model::load(fixture_dir("gemma3_f32"));
  ASSERT_TRUE(stated.ok());
  auto device = make_cpu_device(1);
  Forward silent(*model, *device), told(*stated, *device);
  KvCache a = silent.make_cache(16), b = told.make_cache(16);
  const auto ref = load_reference("gemma3_f32");
  auto got = silent.run_ids(ref.prompt_ids, a);
  auto want = told.run_ids(ref.prompt_ids, b);
  ASSERT_TRUE(got.ok() && want.ok());
  EXPECT_EQ(*got, *want);
  // Random weights of such a config tie too (bench shapes).
  auto config = load_model_config_file(dir + "/config.json", check_model_type);
  ASSERT_TRUE(config.ok());
  EXPECT_FALSE(config->tie_word_embeddings);  // io knows no family defaults
  auto random = Model::random(*config, DType::kF32, 1);
  ASSERT_TRUE(random.ok());
  EXPECT_EQ(random->weights().lm_head.data, random->weights().embed.data);
}

// GLM-4.5's router bias and shared expert are bound from the checkpoint like the
// experts: a layer without them is refused by the tensor's name (fails when
// layer_tensors does not list them: the layer would run without them).
TEST(ModelLoadTest, MissingRouterBiasOrSharedExpertIsNamed) {
  for (const std::string name :
       {"model.layers.2.mlp.gate.e_score_correction_bias", "model.layers.1.mlp.shared_experts.up_proj.weight"}) {
    const auto dir = copy_fixture("glm4_moe_f32", "missing_glm_tensor");
    const fs::path file = fs::path(dir) / "model.safetensors";
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    std::string renamed = name;
    renamed.back() = 'x';  // same length: the offsets still hold
    replace(bytes, "\"" + name + "\"", "\"" + renamed + "\"");
    std::ofstream(file, std::ios::binary) << bytes;
    auto model = Model::load(dir);
    ASSERT_FALSE(model.ok()) << name;
    EXPECT_EQ(model.status().kind(), ErrorKind::kNotFound);
    EXPECT_NE(model.status().message().find(name), std::string::npos) << model.status().message();
  }
}

TEST(ModelLoadTest, UnsupportedModelTypeIsNamed) {
  const auto dir = copy_fixture("llama3_f32", "bad_type", [](std::string& t) {
    replace(t, "\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"");
  });
  auto model = Model::load(dir);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(model.status().message().find("'gpt2'"), std::string::npos) << model.status().message();
}

}  // namespace
}  // namespace tessera
