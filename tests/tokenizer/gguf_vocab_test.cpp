// Tokenizers from GGUF metadata (tokenizer/gguf_tokenizer.h) against llama.cpp's
// own test vectors: models/ggml-vocab-<name>.gguf with .gguf.inp (texts separated
// by "\n__ggml_vocab_test__\n") and .gguf.out (ids, one line a text), read as
// llama.cpp's tests/test-tokenizer-0.cpp reads them and encoded as it encodes
// them (no BOS, special-token text not parsed). The files come from the llama.cpp
// tree in the node-llama-cpp bundle (scripts/fetch_test_material.sh); each test
// skips, saying so, when they are absent. Vocabularies of a model or
// pre-tokenizer tessera does not support must be refused by name.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/gguf.h"
#include "support/ggml_vocab_inputs.h"
#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

fs::path vocab_dir() {
  if (const char* env = std::getenv("TESSERA_TEST_MATERIAL"); env && *env) return fs::path(env) / "llama.cpp/models";
  const char* home = std::getenv("HOME");
  return fs::path(home ? home : "/root") / ".cache/tessera-test-material/llama.cpp/models";
}

std::string read_all(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

std::vector<Case> read_cases(const fs::path& gguf) {
  const std::vector<std::string> texts = testing::split_ggml_vocab_inputs(read_all(gguf.string() + ".inp"));
  std::ifstream out(gguf.string() + ".out");
  std::vector<Case> cases;
  size_t i = 0;
  for (std::string line; std::getline(out, line); ++i) {
    Case c{i < texts.size() ? texts[i] : std::string(), {}};
    std::istringstream ids(line);
    for (int32_t id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), texts.size()) << gguf;
  return cases;
}

class GgufVocabTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufVocabTest, EncodesLlamaCppsTestVectors) {
  const fs::path path = vocab_dir() / ("ggml-vocab-" + GetParam() + ".gguf");
  if (!fs::exists(path) || !fs::exists(path.string() + ".inp"))
    GTEST_SKIP() << path << " is absent (scripts/fetch_test_material.sh fetches it)";
  auto file = GgufFile::open(path.string());
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto tokenizer = Tokenizer::from_gguf(file->metadata(), path.filename().string());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  const auto cases = read_cases(path);
  ASSERT_GT(cases.size(), 10u);
  for (const Case& c : cases) {
    auto ids = tokenizer->encode(c.text, {.parse_special = false, .add_special = false});
    ASSERT_TRUE(ids.ok()) << ids.status().to_string();
    EXPECT_EQ(*ids, c.ids) << "text '" << c.text << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, GgufVocabTest,
                         ::testing::Values("llama-spm", "llama-bpe", "qwen2", "qwen35", "gpt-2", "phi-3", "falcon",
                                           "mpt", "starcoder", "refact", "command-r", "deepseek-coder"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

class GgufVocabRefusedTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(GgufVocabRefusedTest, IsRefusedNamingWhatIsUnsupported) {
  const fs::path path = vocab_dir() / ("ggml-vocab-" + GetParam().first + ".gguf");
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent (scripts/fetch_test_material.sh fetches it)";
  auto file = GgufFile::open(path.string());
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto tokenizer = Tokenizer::from_gguf(file->metadata(), path.filename().string());
  ASSERT_FALSE(tokenizer.ok());
  EXPECT_EQ(tokenizer.status().kind(), ErrorKind::kUnsupported);
  EXPECT_NE(tokenizer.status().message().find(GetParam().second), std::string::npos) << tokenizer.status().to_string();
}

INSTANTIATE_TEST_SUITE_P(LlamaCpp, GgufVocabRefusedTest,
                         ::testing::Values(std::pair{"bert-bge", "tokenizer.ggml.model 'bert'"},
                                           std::pair{"deepseek-llm", "tokenizer.ggml.pre 'deepseek-llm'"}));

}  // namespace
}  // namespace tessera
