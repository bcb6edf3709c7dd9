// Models from GGUF files (io/gguf_model.h): the files of tests/fixtures/gguf/models
// are the fixture checkpoints written by llama.cpp's gguf-py as its converter
// lays them out (make_model_ggufs.py). Loaded from the GGUF, each runs bitwise as
// the checkpoint it came from: same config, and logits equal to the last bit on
// the transformers reference's prompt and greedy tokens (the llama files prove
// the q/k un-permutation and the llama3 rope factors). Architectures and tensors
// tessera does not run are refused by name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/gguf_fixtures.h"
#include "io/gguf_model.h"
#include "io/gguf_quant.h"
#include "io/gguf_writer.h"
#include "io/quantize.h"
#include "model/fixtures.h"
#include "model/forward.h"
#include "template/chat_template.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

using testing::gguf_model;
using testing::gguf_models_dir;

std::vector<float> run_all(const Model& model, const std::vector<int32_t>& ids) {
  auto device = make_cpu_device(2);
  Forward forward(model, *device);
  KvCache cache = forward.make_cache(static_cast<int64_t>(ids.size()));
  auto logits = forward.run_ids(ids, cache, Logits::kAll);
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  return logits.ok() ? *logits : std::vector<float>();
}

class GgufModelTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufModelTest, RunsBitwiseAsTheCheckpointItCameFrom) {
  const std::string name = GetParam();
  auto from_gguf = Model::load(gguf_model(name));
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().to_string();
  auto from_dir = Model::load(testing::fixture_dir(name));
  ASSERT_TRUE(from_dir.ok()) << from_dir.status().to_string();

  const ModelConfig& a = from_gguf->config();
  const ModelConfig& b = from_dir->config();
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_FLOAT_EQ(static_cast<float>(a.rms_norm_eps), static_cast<float>(b.rms_norm_eps));
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.rope.type, b.rope.type);
  EXPECT_FLOAT_EQ(static_cast<float>(a.rope.theta), static_cast<float>(b.rope.theta));
  EXPECT_EQ(a.rope.factor, b.rope.factor);
  if (b.rope.type == RopeType::kLlama3) {
    // llama.cpp keeps only the factors; they fix the ratios, and these are Meta's values.
    EXPECT_EQ(a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings);
    EXPECT_EQ(a.rope.low_freq_factor, b.rope.low_freq_factor);
    EXPECT_EQ(a.rope.high_freq_factor, b.rope.high_freq_factor);
  }

  const auto ref = testing::load_reference(name);
  std::vector<int32_t> ids = ref.prompt_ids;
  ids.insert(ids.end(), ref.greedy_ids.begin(), ref.greedy_ids.end());
  const std::vector<float> got = run_all(*from_gguf, ids);
  const std::vector<float> want = run_all(*from_dir, ids);
  ASSERT_EQ(got.size(), want.size());
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GgufModelTest,
                         ::testing::Values("llama3_f32", "llama_f16", "qwen2_f32", "qwen3_bf16"));

// llama.cpp's greedy tokens on each fixture GGUF, recorded by make_quantized_ggufs.sh
// (llama_greedy against libllama), and tessera's on the same file, both with an f16 KV
// cache (llama.cpp's default; with tessera's f32 one, llama256_f16_q8_0's seventh token
// splits a near-tie, 2.4835 against 2.4801, the other way). The quantized files
// also stay within a tolerance of their unquantized model's logits, relative to each
// row's largest logit: the f32/bf16 checkpoint's transformers logits, or for
// llama256_f16 (no checkpoint; the K-quants need its 256-wide rows) tessera's f32 run
// of the unquantized GGUF along llama.cpp's greedy tokens on it.
// Measured on 2026-12-02 with the integer dot products (activations rounded to 8 bits, as
// llama.cpp's CPU matmul does; random weights, so blocks are coarse): Q8_0 0.031 (llama3)
// and 0.027 (qwen3), Q4_0 0.40 and 0.32; unquantized files at most 0.0073 (the f16 KV
// cache). llama256: Q8_0 0.020, Q6_K 0.067, Q5_K_M 0.099, Q4_K_M 0.22. Near-ties may
// still split: on "hello world" Q5_K_M's third token once differed where tessera's top
// two logits were 0.044 apart (of 2.8).
double tolerance(const std::string& file) {
  if (file.ends_with("_q8_0")) return 0.05;
  if (file.ends_with("_q6_k")) return 0.1;
  if (file.ends_with("_q5_k_m")) return 0.15;
  if (file.ends_with("_q4_k_m")) return 0.3;
  if (file.ends_with("_q4_0")) return 0.5;
  return 0.02;  // the reference test's tolerance for 16-bit checkpoints
}

// The unquantized model's logits (one row per greedy step) and greedy ids for `fixture`.
testing::Reference unquantized_reference(const std::string& fixture, const nlohmann::json& recorded) {
  if (std::filesystem::exists(testing::fixture_dir(fixture))) return testing::load_reference(fixture);
  testing::Reference ref;
  ref.prompt_ids = recorded[fixture]["prompt"].get<std::vector<int32_t>>();
  ref.greedy_ids = recorded[fixture]["greedy"].get<std::vector<int32_t>>();
  auto model = Model::load(gguf_model(fixture));
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return ref;
  std::vector<int32_t> ids = ref.prompt_ids;
  ids.insert(ids.end(), ref.greedy_ids.begin(), ref.greedy_ids.end());
  const std::vector<float> all = run_all(*model, ids);
  const auto vocab = static_cast<size_t>(model->config().vocab_size);
  ref.logits.assign(all.begin() + static_cast<std::ptrdiff_t>((ref.prompt_ids.size() - 1) * vocab), all.end());
  return ref;
}

TEST(GgufLlamaCpp, GreedyTokensEqualLlamaCppsOnTheSameFile) {
  std::ifstream in(gguf_models_dir() + "llama_cpp_greedy.json");
  const auto recorded = nlohmann::json::parse(in);
  ASSERT_GE(recorded.size(), 13u);
  for (const auto& [file, entry] : recorded.items()) {
    SCOPED_TRACE(file);
    auto model = Model::load(gguf_model(file));
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    const auto prompt = entry["prompt"].get<std::vector<int32_t>>();
    const auto want = entry["greedy"].get<std::vector<int32_t>>();
    const auto ref = unquantized_reference(entry["fixture"].get<std::string>(), recorded);
    auto device = make_cpu_device(2);
    Forward forward(*model, *device, {.kv_dtype = DType::kF16});  // llama.cpp's default KV cache type
    KvCache cache = forward.make_cache(static_cast<int64_t>(prompt.size() + want.size()));
    const auto vocab = static_cast<size_t>(model->config().vocab_size);
    std::vector<int32_t> got;
    double worst = 0;
    bool same_context = true;  // the tokens so far are the reference's, so its row compares
    auto logits = forward.run_ids(prompt, cache);
    for (size_t step = 0; step < want.size(); ++step) {
      ASSERT_TRUE(logits.ok()) << logits.status().to_string();
      if (same_context) {
        const float* row = ref.logits.data() + step * vocab;
        float scale = 0, error = 0;
        for (size_t i = 0; i < vocab; ++i) {
          scale = std::max(scale, std::fabs(row[i]));
          error = std::max(error, std::fabs((*logits)[i] - row[i]));
        }
        worst = std::max(worst, static_cast<double>(error / scale));
      }
      got.push_back(static_cast<int32_t>(std::max_element(logits->begin(), logits->end()) - logits->begin()));
      same_context = same_context && step < ref.greedy_ids.size() && got.back() == ref.greedy_ids[step];
      logits = forward.run_ids(std::span(&got.back(), 1), cache);
    }
    EXPECT_EQ(got, want);
    EXPECT_LE(worst, tolerance(file));
    std::printf("%s: largest error against the unquantized model's logits %.4g\n", file.c_str(), worst);
  }
}

// A copy of `name`'s GGUF with the first occurrence of `from` replaced by `to` (same length).
std::string patched_copy(const std::string& name, const std::string& from, const std::string& to) {
  std::ifstream in(gguf_model(name), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  EXPECT_EQ(from.size(), to.size());
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  const auto path = std::filesystem::temp_directory_path() /
                    ("tessera_gguf_model_test_" + std::to_string(::getpid()) + "_" + to + ".gguf");
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return path.string();
}

TEST(GgufModelGuards, AnArchitectureTesseraDoesNotRunIsRefusedByName) {
  // The value of general.architecture, "llama" (a u64 length, then the bytes), becomes "gemma".
  const std::string path =
      patched_copy("llama_f16", std::string("\x05\0\0\0\0\0\0\0llama", 13), std::string("\x05\0\0\0\0\0\0\0gemma", 13));
  auto model = Model::load(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(model.status().message().find("GGUF architecture 'gemma' is not supported"), std::string::npos)
      << model.status().to_string();
}

TEST(GgufModelGuards, ATensorNoSupportedLayoutHasIsRefusedByName) {
  const std::string path = patched_copy("qwen3_bf16", "blk.1.ffn_up.weight", "blk.1.ffn_uX.weight");
  auto model = Model::load(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(model.status().message().find("tensor 'blk.1.ffn_uX.weight'"), std::string::npos)
      << model.status().to_string();
}

TEST(GgufModelGuards, ALayerBeyondBlockCountIsRefused) {
  const std::string path = patched_copy("qwen2_f32", "blk.1.ffn_up.weight", "blk.7.ffn_up.weight");
  auto model = Model::load(path);
  std::filesystem::remove(path);
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.status().message().find("tensor 'blk.7.ffn_up.weight'"), std::string::npos)
      << model.status().to_string();
}

// Only matrices are computed on in blocks: a norm stored as Q8_0 (llama256_f16 with
// blk.0.attn_norm.weight quantized, written by GgufWriter) is refused naming it.
TEST(GgufModelGuards, AQuantizedNormIsRefusedByName) {
  auto in = GgufFile::open(gguf_model("llama256_f16"));
  ASSERT_TRUE(in.ok()) << in.status().to_string();
  const std::string norm = "blk.0.attn_norm.weight";
  GgufWriter writer;
  for (const GgufKeyValue& kv : in->metadata().entries()) writer.copy(kv.key, kv.value);
  for (const GgufTensorInfo& t : in->header().tensors)
    ASSERT_TRUE(writer.add_tensor(t.name, t.dims, t.name == norm ? GgmlType::kQ8_0 : t.type).ok());
  const auto path = std::filesystem::temp_directory_path() /
                    ("tessera_gguf_model_test_" + std::to_string(::getpid()) + "_q8_0_norm.gguf");
  ASSERT_TRUE(writer.open(path.string()).ok());
  for (const GgufTensorInfo& t : in->header().tensors) {
    if (t.name != norm) {
      ASSERT_TRUE(writer.write_tensor(in->bytes(t)).ok());
      continue;
    }
    std::vector<float> values(t.dims[0]);
    dequantize_gguf(t.type, in->bytes(t), values);
    std::vector<uint8_t> blocks(dtype_bytes(DType::kQ8_0, static_cast<int64_t>(values.size())));
    quantize_blocks(DType::kQ8_0, values, blocks);
    ASSERT_TRUE(writer.write_tensor(blocks).ok());
  }
  ASSERT_TRUE(writer.finish().ok());
  auto model = Model::load(path.string());
  std::filesystem::remove(path);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_NE(model.status().message().find("tensor 'model.layers.0.input_layernorm.weight' has dtype q8_0"),
            std::string::npos)
      << model.status().to_string();
}

TEST(GgufModelGuards, RopeFactorsThatLlama3ScalingDoesNotMakeAreRefused) {
  auto file = GgufFile::open(gguf_model("llama3_f32"));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto config = gguf_hf_config(*file);
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  EXPECT_EQ((*config)["rope_scaling"]["rope_type"], "llama3");
  EXPECT_EQ((*config)["rope_scaling"]["original_max_position_embeddings"], 64);
  // Swap two factors in a copy: 1.0f (0x3f800000) first, then the largest.
  std::ifstream in(gguf_model("llama3_f32"), std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const GgufTensorInfo* freqs = file->find("rope_freqs.weight");
  ASSERT_NE(freqs, nullptr);
  const size_t at = file->header().data_offset + freqs->offset;
  std::swap_ranges(bytes.begin() + static_cast<std::ptrdiff_t>(at), bytes.begin() + static_cast<std::ptrdiff_t>(at + 4),
                   bytes.begin() + static_cast<std::ptrdiff_t>(at + 4 * (freqs->dims[0] - 1)));
  const auto path = std::filesystem::temp_directory_path() /
                    ("tessera_gguf_model_test_" + std::to_string(::getpid()) + "_freqs.gguf");
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  auto model = Model::load(path.string());
  std::filesystem::remove(path);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(model.status().message().find("rope_freqs"), std::string::npos) << model.status().to_string();
}

// The text side of a GGUF: its tokenizer round-trips text with the BOS that
// tokenizer.ggml.add_bos_token asks for, and its chat template renders with
// the BOS/EOS text; generation stops at tokenizer.ggml.eos_token_id.
TEST(GgufText, TokenizerTemplateAndStopIdsComeFromTheMetadata) {
  auto file = GgufFile::open(gguf_model("llama3_f32"));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto tokenizer = Tokenizer::from_gguf(file->metadata(), file->path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  auto ids = tokenizer->encode("hello world");
  ASSERT_TRUE(ids.ok()) << ids.status().to_string();
  ASSERT_FALSE(ids->empty());
  EXPECT_EQ(ids->front(), 1);  // <s>
  auto text = tokenizer->decode(*ids, /*skip_special=*/true);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text, "hello world");

  auto chat = gguf_chat(file->metadata());
  ASSERT_TRUE(chat.ok()) << chat.status().to_string();
  EXPECT_EQ(chat->stop_ids, std::vector<int32_t>{2});
  EXPECT_EQ(chat->special_tokens["bos_token"], "<s>");
  EXPECT_EQ(chat->special_tokens["eos_token"], "</s>");
  auto parsed = ChatTemplate::parse(chat->chat_template);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  nlohmann::ordered_json context = chat->special_tokens;
  context["messages"] = nlohmann::ordered_json::array({{{"role", "user"}, {"content", "hi"}}});
  context["add_generation_prompt"] = true;
  auto rendered = parsed->render(context);
  ASSERT_TRUE(rendered.ok()) << rendered.status().to_string();
  EXPECT_EQ(*rendered, "<s>user: hi\n<s>assistant: ");
}

TEST(GgufText, AStopTokenIdOutsideTheVocabularyIsRefused) {
  auto file = GgufFile::open(gguf_model("llama3_f32"));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  GgufMetadata metadata;
  for (const GgufKeyValue& entry : file->metadata().entries())
    if (entry.key != "tokenizer.ggml.eos_token_id") {
      ASSERT_TRUE(metadata.add(entry).ok());
    }
  GgufValue eos;
  eos.type = GgufType::kU32;
  eos.bits = 512;  // the vocabulary has 512 tokens
  ASSERT_TRUE(metadata.add({"tokenizer.ggml.eos_token_id", eos}).ok());
  auto chat = gguf_chat(metadata);
  ASSERT_FALSE(chat.ok());
  EXPECT_NE(chat.status().message().find("tokenizer.ggml.eos_token_id = 512"), std::string::npos)
      << chat.status().to_string();
}

}  // namespace
}  // namespace tessera
