// Refusals: every guard against a bad tokenizer.json, an unsupported component,
// bad text or bad ids answers with a Status of the right kind whose message names
// the field or component, never a crash or silently different ids.
//
// Guards verified to fail their test when disabled (then restored):
//   not-JSON, non-object top level, missing model       (tokenizer.cpp from_json)
//   unsupported model / normalizer / pre_tokenizer /
//     post_processor / decoder / truncation / padding    (make_* fallthroughs, from_json)
//   BPE dropout, vocab not an object, negative vocab id  (bpe_model.cpp from_json)
//   merge not "a b", merge token not in vocab,
//     merge result not in vocab, unk_token not in vocab  (bpe_model.cpp from_json)
//   regex that does not compile, bad pattern object,
//     unknown split behavior                             (regex.cpp, json_util.cpp, pre_tokenizer.cpp)
//   added token without content / with a bad id          (added_tokens.cpp)
//   template naming a missing special token            (post_processor.cpp)
//   Metaspace replacement longer than one character      (pre_tokenizer.cpp single_char)
//   invalid UTF-8 text                                   (tokenizer.cpp encode)
//   decode of an id outside the vocabulary               (tokenizer.cpp decode)
//   CLI: --decode input not a JSON array of ids          (cli/tokenize.cpp parse_ids; cli_test.cpp)
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace tessera {
namespace {

using nlohmann::json;

json minimal() {
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model", {{"type", "BPE"}, {"vocab", {{"a", 0}, {"b", 1}, {"ab", 2}}}, {"merges", {"a b"}}}}};
}

void expect_refused(const std::string& text, ErrorKind kind, const std::vector<std::string>& needles) {
  auto tokenizer = Tokenizer::from_json(text, "tok.json");
  ASSERT_FALSE(tokenizer.ok()) << "accepted: " << text.substr(0, 200);
  EXPECT_EQ(tokenizer.status().kind(), kind) << tokenizer.status().to_string();
  for (const auto& needle : needles)
    EXPECT_NE(tokenizer.status().message().find(needle), std::string::npos) << tokenizer.status().to_string();
}

void expect_refused(const json& config, ErrorKind kind, const std::vector<std::string>& needles) {
  expect_refused(config.dump(), kind, needles);
}

TEST(GuardTest, MinimalTokenizerLoads) {
  auto tokenizer = Tokenizer::from_json(minimal().dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  auto ids = tokenizer->encode("ab");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{2}));
}

TEST(GuardTest, MalformedJson) {
  expect_refused(std::string("{\"model\": "), ErrorKind::kInvalidInput, {"tok.json", "not valid JSON"});
  expect_refused(std::string("[1, 2]"), ErrorKind::kInvalidInput, {"top level"});
  json config = minimal();
  config.erase("model");
  expect_refused(config, ErrorKind::kInvalidInput, {"'model'"});
}

TEST(GuardTest, UnsupportedComponentsAreNamed) {
  json c = minimal();
  c["model"]["type"] = "WordPiece";
  expect_refused(c, ErrorKind::kUnsupported, {"WordPiece"});
  c = minimal();
  c["normalizer"] = {{"type", "BertNormalizer"}};
  expect_refused(c, ErrorKind::kUnsupported, {"normalizer", "BertNormalizer"});
  c = minimal();
  c["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Precompiled"}}}}};
  expect_refused(c, ErrorKind::kUnsupported, {"Precompiled"});
  c = minimal();
  c["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  expect_refused(c, ErrorKind::kUnsupported, {"pre_tokenizer", "UnicodeScripts"});
  c = minimal();
  c["post_processor"] = {{"type", "TemplateProcessingV2"}};
  expect_refused(c, ErrorKind::kUnsupported, {"post_processor", "TemplateProcessingV2"});
  c = minimal();
  c["decoder"] = {{"type", "CTC"}};
  expect_refused(c, ErrorKind::kUnsupported, {"decoder", "CTC"});
  c = minimal();
  c["truncation"] = {{"max_length", 8}};
  expect_refused(c, ErrorKind::kUnsupported, {"truncation"});
  c = minimal();
  c["padding"] = {{"strategy", "BatchLongest"}};
  expect_refused(c, ErrorKind::kUnsupported, {"padding"});
  c = minimal();
  c["model"]["dropout"] = 0.1;
  expect_refused(c, ErrorKind::kUnsupported, {"dropout"});
}

TEST(GuardTest, BadVocabAndMerges) {
  json c = minimal();
  c["model"]["vocab"] = json::array({"a", "b"});
  expect_refused(c, ErrorKind::kInvalidInput, {"'vocab'"});
  c = minimal();
  c["model"]["vocab"]["z"] = -4;
  expect_refused(c, ErrorKind::kInvalidInput, {"'z'"});
  c = minimal();
  c["model"]["merges"] = json::array({"ab"});
  expect_refused(c, ErrorKind::kInvalidInput, {"merge 0", "'ab'"});
  c = minimal();
  c["model"]["merges"] = json::array({json::array({"a", "q"})});
  expect_refused(c, ErrorKind::kInvalidInput, {"merge 0", "'q'", "not in the vocab"});
  c = minimal();
  c["model"]["merges"] = json::array({"b a"});
  expect_refused(c, ErrorKind::kInvalidInput, {"merge 0", "'ba'"});
  c = minimal();
  c["model"]["unk_token"] = "<unk>";
  expect_refused(c, ErrorKind::kInvalidInput, {"unk_token", "<unk>"});
}

TEST(GuardTest, BadPatternsAndBehaviors) {
  json c = minimal();
  c["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  expect_refused(c, ErrorKind::kInvalidInput, {"pre_tokenizer Split", "(unclosed"});
  c["pre_tokenizer"] = {{"type", "Split"}, {"pattern", "a"}, {"behavior", "Isolated"}};
  expect_refused(c, ErrorKind::kInvalidInput, {"'pattern'"});
  c["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "Sideways"}};
  expect_refused(c, ErrorKind::kUnsupported, {"Sideways"});
  c["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
  expect_refused(c, ErrorKind::kInvalidInput, {"replacement"});
}

TEST(GuardTest, BadAddedTokensAndTemplates) {
  json c = minimal();
  c["added_tokens"] = {{{"id", 5}, {"special", true}}};
  expect_refused(c, ErrorKind::kInvalidInput, {"added_tokens[0]", "'content'"});
  c["added_tokens"] = {{{"id", "5"}, {"content", "<x>"}}};
  expect_refused(c, ErrorKind::kInvalidInput, {"added_tokens[0]", "'id'"});
  c["added_tokens"] = {{{"id", -5}, {"content", "<x>"}}};
  expect_refused(c, ErrorKind::kInvalidInput, {"added_tokens[0]", "id -5"});
  c = minimal();
  c["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                         {"special_tokens", json::object()}};
  expect_refused(c, ErrorKind::kInvalidInput, {"<s>", "special_tokens"});
}

TEST(GuardTest, InvalidUtf8TextIsRefused) {
  auto tokenizer = Tokenizer::from_json(minimal().dump());
  ASSERT_TRUE(tokenizer.ok());
  for (const std::string& bad : {std::string("ab\xC3"), std::string("a\xED\xA0\x80"), std::string("\xC0\xAF"),
                                 std::string("ab\xF5\x80\x80\x80")}) {
    auto ids = tokenizer->encode(bad);
    ASSERT_FALSE(ids.ok());
    EXPECT_EQ(ids.status().kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(ids.status().message().find("UTF-8"), std::string::npos) << ids.status().to_string();
  }
  auto ids = tokenizer->encode("ab\xFF");
  ASSERT_FALSE(ids.ok());
  EXPECT_NE(ids.status().message().find("offset 2"), std::string::npos) << ids.status().to_string();
}

TEST(GuardTest, DecodeRefusesIdsOutsideTheVocabulary) {
  json c = minimal();
  c["model"]["vocab"]["gap"] = 9;  // ids 3..8 do not exist
  auto tokenizer = Tokenizer::from_json(c.dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
  for (const int32_t bad : {10, 5, -1, INT32_MAX}) {
    auto text = tokenizer->decode(std::vector<int32_t>{0, bad});
    ASSERT_FALSE(text.ok()) << bad;
    EXPECT_EQ(text.status().kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(text.status().message().find("id " + std::to_string(bad)), std::string::npos)
        << text.status().to_string();
  }
  auto text = tokenizer->decode(std::vector<int32_t>{0, 9, 1});
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "a gap b");  // no decoder: tokens joined by spaces, as HF
}

}  // namespace
}  // namespace tessera
