// `tessera tokenize` as a user runs it: ids as one JSON array, --decode back to
// the text, --special/--add-special, and for bad input exit code 2 with one line
// on stderr naming what was wrong.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "support/run_tessera.h"

namespace tessera {
namespace {

using testing::CommandResult;
using testing::expect_refused;
using testing::run_tessera;

namespace fs = std::filesystem;
using nlohmann::json;

// Files are named after the running test: ctest runs the tests of this binary
// in parallel processes, and rewriting a tokenizer file that another test's
// tessera has memory-mapped kills that process with SIGBUS.
fs::path write_file(const std::string& name, const std::string& content) {
  const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
  const fs::path path = fs::path(::testing::TempDir()) / (std::string(test->name()) + "_" + name);
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

// Byte-level: ids 0..255 are bytes; "<s>" (256) is a special BOS, "<|x|>" (257) special.
std::string tokenizer_path() {
  json vocab = json::object();
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const char32_t c = printable ? b : 256 + n++;
    std::string s;
    if (c < 0x80) {
      s += static_cast<char>(c);
    } else {
      s += static_cast<char>(0xC0 | (c >> 6));
      s += static_cast<char>(0x80 | (c & 0x3F));
    }
    vocab[s] = b;
  }
  json config = {{"added_tokens",
                  {{{"id", 256}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                   {{"id", 257}, {"content", "<|x|>"}, {"special", true}, {"normalized", false}}}},
                 {"normalizer", nullptr},
                 {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
                 {"post_processor",
                  {{"type", "TemplateProcessing"},
                   {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                   {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}}}}}},
                 {"decoder", {{"type", "ByteLevel"}}},
                 {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}}}};
  return write_file("cli_tokenizer.json", config.dump()).string();
}

TEST(TokenizeCliTest, EncodesAndDecodes) {
  const std::string tok = tokenizer_path();
  const auto text = write_file("cli_text.txt", "Hi <|x|>\xC3\xA9\n");
  CommandResult run = run_tessera("tokenize --tokenizer " + tok + " --in " + text.string());
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "[256,72,105,32,257,195,169,10]\n");

  run = run_tessera("tokenize --tokenizer " + tok + " --in " + text.string() + " --special false --add-special false");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "[72,105,32,60,124,120,124,62,195,169,10]\n");  // <|x|> as plain text, no BOS

  const auto ids = write_file("cli_ids.json", "[72, 105, 32, 257, 195, 169, 10]");
  run = run_tessera("tokenize --tokenizer " + tok + " --in " + ids.string() + " --decode");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "Hi <|x|>\xC3\xA9\n");
  run = run_tessera("tokenize --tokenizer " + tok + " --in " + ids.string() + " --decode --skip-special");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "Hi \xC3\xA9\n");
}

TEST(TokenizeCliTest, BadDecodeInputIsRefused) {
  const std::string tok = tokenizer_path();
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"[1, 2", {"JSON array"}},
      {"{\"ids\": [1]}", {"JSON array"}},
      {"[1, \"2\"]", {"element 1"}},
      {"[1, -3]", {"element 1", "-3"}},
      {"[1, 2.5]", {"element 1"}},
      {"[1, 99999999999]", {"element 1"}},
      {"[1, 300]", {"id 300", "not in the vocabulary"}},
  };
  for (const auto& [content, needles] : cases) {
    SCOPED_TRACE(content);
    const auto ids = write_file("cli_bad_ids.json", content);
    expect_refused(run_tessera("tokenize --tokenizer " + tok + " --in " + ids.string() + " --decode"), needles);
  }
}

TEST(TokenizeCliTest, BadTokenizerAndTextAreRefused) {
  const auto text = write_file("cli_text2.txt", "hello");
  expect_refused(run_tessera("tokenize --tokenizer /nonexistent/tokenizer.json --in " + text.string()),
                 {"/nonexistent/tokenizer.json"});
  const auto broken = write_file("cli_broken.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": ");
  expect_refused(run_tessera("tokenize --tokenizer " + broken.string() + " --in " + text.string()),
                 {"cli_broken.json", "not valid JSON"});
  const auto unigram = write_file("cli_unigram.json", R"({"model": {"type": "Unigram", "vocab": []}})");
  expect_refused(run_tessera("tokenize --tokenizer " + unigram.string() + " --in " + text.string()),
                 {"Unigram", "not supported"});
  const auto bad_text = write_file("cli_bad_text.txt", "ok\xFF");
  expect_refused(run_tessera("tokenize --tokenizer " + tokenizer_path() + " --in " + bad_text.string()),
                 {"cli_bad_text.txt", "UTF-8", "offset 2"});
}

}  // namespace
}  // namespace tessera
