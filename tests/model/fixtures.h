// Shared helpers for model tests: where the checkpoints and their transformers
// references live, and how to read a reference.safetensors (prompt_ids,
// greedy_ids, logits; made by tools/fixtures/make_fixtures.py or, for the
// shipped model, tools/train_model/train.py).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/device.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace tessera::testing {

// The random tiny checkpoints of tests/fixtures/models, and the project's own trained model.
inline constexpr const char* kShippedModel = "tessera-tiny";

inline const std::vector<std::string>& fixture_names() {
  static const std::vector<std::string> kNames = {
      "llama3_f32",    "llama3_bf16",        "llama2_mqa_f32",       "llama_f16",   "mistral_f32",
      "qwen2_f32",     "qwen3_f32",          "qwen3_bf16",           "mixtral_f32", "mixtral_bf16",
      "qwen3_moe_f32", "qwen3_moe_bf16",     "qwen3_moe_unnorm_f32", "phi3_f32",    "glm4_f32",
      "gemma3_f32",    "gemma3_softcap_f32", "glm4_moe_f32",         kShippedModel};
  return kNames;
}

// The checkpoint directory: models/<name> for the shipped model, tests/fixtures/models/<name> otherwise.
inline std::string fixture_dir(const std::string& name) {
  if (name == kShippedModel) return std::string(TESSERA_SOURCE_DIR) + "/models/" + name;
  return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/models/" + name;
}

// A gtest parameter name for a fixture ("tessera-tiny" -> "tessera_tiny").
inline std::string test_name(std::string name) {
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

// transformers' logits: beside the checkpoint, or under tests/fixtures/<name> for the shipped model.
inline std::string reference_path(const std::string& name) {
  if (name == kShippedModel)
    return std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/" + name + "/reference.safetensors";
  return fixture_dir(name) + "/reference.safetensors";
}

struct Reference {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> greedy_ids;
  std::vector<float> logits;  // [greedy_ids.size() + 1, vocab]
  double tolerance = 0;       // relative to max |logit| of the row
};

inline std::vector<int32_t> read_ids(const SafetensorsFile& file, const std::string& name) {
  const auto* entry = file.find(name);
  EXPECT_NE(entry, nullptr) << name;
  if (entry == nullptr) return {};
  const TensorView view = file.view(*entry);
  EXPECT_EQ(view.dtype, DType::kI64);
  const auto* data = static_cast<const int64_t*>(view.data);
  return std::vector<int32_t>(data, data + view.numel());
}

inline Reference load_reference(const std::string& name) {
  auto file = SafetensorsFile::open(reference_path(name));
  EXPECT_TRUE(file.ok()) << file.status().to_string();
  Reference ref;
  if (!file.ok()) return ref;
  ref.prompt_ids = read_ids(*file, "prompt_ids");
  ref.greedy_ids = read_ids(*file, "greedy_ids");
  const TensorView logits = file->view(*file->find("logits"));
  const auto* data = static_cast<const float*>(logits.data);
  ref.logits.assign(data, data + logits.numel());
  ref.tolerance = std::stod(file->header().metadata.at("tolerance"));
  return ref;
}

// Whether the largest logit of `got` is one of the largest of the reference's row
// `want`: the one largest, or one of those that tie exactly in the reference's
// own precision (bf16 logits for a bf16 checkpoint; see reference_test.cpp).
inline bool greedy_matches(std::span<const float> got, std::span<const float> want) {
  const auto next = static_cast<size_t>(std::max_element(got.begin(), got.end()) - got.begin());
  return want[next] == *std::max_element(want.begin(), want.end());
}

// The largest |got - want| over the largest |want|: the fixtures' tolerance measure.
inline double max_relative_error(std::span<const float> got, std::span<const float> want) {
  float scale = 0, error = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, std::fabs(want[i]));
    error = std::max(error, std::fabs(got[i] - want[i]));
  }
  return error / scale;
}

// A test with the llama3_f32 fixture loaded and a one-thread CPU device.
class Llama3Test : public ::testing::Test {
 protected:
  void SetUp() override {
    auto model = Model::load(fixture_dir("llama3_f32"));
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    model_ = std::make_unique<Model>(std::move(model).value());
    device_ = make_cpu_device(1);
  }
  std::unique_ptr<Model> model_;
  std::unique_ptr<Device> device_;
};

}  // namespace tessera::testing
