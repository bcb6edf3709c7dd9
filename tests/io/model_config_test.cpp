// config.json reading of the fields every family shares: both rope styles
// (transformers 4.x and 5.x), nested text_config, the model_type check hook, and
// refusals that name the field or feature. Each family's own fields are tested in
// tests/model/arch_test.cpp.
#include "io/model_config.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/base_config.h"

namespace tessera {
namespace {

using nlohmann::json;

using testing::base_config;

ModelConfig parse_ok(const json& j) {
  auto config = parse_model_config(j);
  EXPECT_TRUE(config.ok()) << config.status().to_string();
  return config.ok() ? config.value() : ModelConfig{};
}

void expect_error(const json& j, ErrorKind kind, const std::string& needle) {
  auto config = parse_model_config(j);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().kind(), kind) << config.status().to_string();
  EXPECT_NE(config.status().message().find(needle), std::string::npos) << config.status().message();
}

TEST(ModelConfigTest, ReadsDefaults) {
  const ModelConfig c = parse_ok(base_config());
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
}

TEST(ModelConfigTest, ReadsTransformers4RopeStyle) {
  json j = base_config();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 32.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.rope.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
}

TEST(ModelConfigTest, ReadsLegacyRopeScalingTypeKey) {
  json j = base_config();
  j["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.rope.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(c.rope.factor, 2.0);
}

TEST(ModelConfigTest, ReadsTransformers5RopeParameters) {
  json j = base_config();
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.rope.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c.rope.theta, 1000000.0);
}

TEST(ModelConfigTest, ReadsNestedTextConfig) {
  json j = {{"model_type", "mistral3"}, {"text_config", base_config()}, {"tie_word_embeddings", true}};
  j["text_config"]["model_type"] = "mistral";
  j["text_config"]["sliding_window"] = 4096;
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.model_type, "mistral");
  EXPECT_EQ(c.fields().at("sliding_window"), 4096);  // the family reads its fields from text_config
  EXPECT_TRUE(c.tie_word_embeddings);                // taken from the top level when text_config lacks it
}

TEST(ModelConfigTest, KeepsTheJsonObjectForTheFamily) {
  json j = base_config();
  j["attention_bias"] = true;
  const ModelConfig c = parse_ok(j);
  EXPECT_EQ(c.fields().at("attention_bias"), true);
  EXPECT_TRUE(ModelConfig{}.fields().is_object());  // a config built in code has an empty object
  EXPECT_TRUE(ModelConfig{}.fields().empty());
}

TEST(ModelConfigTest, ExplicitHeadDimOverridesHiddenOverHeads) {
  json j = base_config();
  j["model_type"] = "qwen3";
  j["head_dim"] = 32;
  EXPECT_EQ(parse_ok(j).head_dim, 32);
}

TEST(ModelConfigTest, ChecksModelTypeBeforeTheSharedFields) {
  // io knows no family: the caller's check refuses an unknown one before a missing shared field.
  json j = base_config();
  j["model_type"] = "gpt2";
  j.erase("hidden_size");
  const ModelTypeCheck refuse_gpt2 = [](const std::string& type) {
    return type == "gpt2" ? Status::unsupported("model_type '" + type + "'") : Status();
  };
  auto config = parse_model_config(j, refuse_gpt2);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().kind(), ErrorKind::kUnsupported) << config.status().to_string();
  expect_error(j, ErrorKind::kInvalidInput, "'hidden_size' is missing");  // without a check
  j["hidden_size"] = 64;
  EXPECT_EQ(parse_ok(j).model_type, "gpt2");  // any model_type passes io alone
}

TEST(ModelConfigTest, RefusesUnsupportedRopeTypeByName) {
  json j = base_config();
  j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  expect_error(j, ErrorKind::kUnsupported, "'yarn'");
  json k = base_config();
  k["rope_parameters"] = {{"rope_type", "dynamic"}, {"rope_theta", 10000.0}};
  expect_error(k, ErrorKind::kUnsupported, "'dynamic'");
}

TEST(ModelConfigTest, NamesMissingOrInvalidFields) {
  json missing = base_config();
  missing.erase("hidden_size");
  expect_error(missing, ErrorKind::kInvalidInput, "'hidden_size' is missing");
  json negative = base_config();
  negative["vocab_size"] = -3;
  expect_error(negative, ErrorKind::kInvalidInput, "'vocab_size'");
  json text = base_config();
  text["num_hidden_layers"] = "two";
  expect_error(text, ErrorKind::kInvalidInput, "'num_hidden_layers' is not an integer");
  json groups = base_config();
  groups["num_key_value_heads"] = 3;
  expect_error(groups, ErrorKind::kInvalidInput, "'num_key_value_heads'");
  expect_error(json::array(), ErrorKind::kInvalidInput, "not a JSON object");
}

TEST(ModelConfigTest, LoadNamesTheFile) {
  auto config = load_model_config("/nonexistent-dir");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(config.status().message().find("/nonexistent-dir/config.json"), std::string::npos);
}

}  // namespace
}  // namespace tessera
