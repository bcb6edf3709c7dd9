// The pipeline plan: the stages file's checks, and the split of layers by free
// memory.
#include <gtest/gtest.h>

#include <fstream>

#include "pipeline/coordinator.h"

namespace tessera::pipeline {
namespace {

Result<std::vector<StagePlan>> plan_of(const std::string& json, int64_t layers) {
  const auto path = std::filesystem::path(::testing::TempDir()) / ("plan_" + std::to_string(::getpid()) + ".json");
  std::ofstream(path) << json;
  return read_pipeline_plan(path, layers);
}

TEST(PipelinePlan, ReadsRangesThatCoverTheModelInOrder) {
  auto plan = plan_of(R"({"stages": [{"name": "a", "model": "/m", "layers": [0, 3]},
                                     {"name": "b", "model": "/m", "layers": [3, 4]}]})",
                      4);
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_EQ((*plan)[1].name, "b");
  EXPECT_EQ((*plan)[1].begin, 3);
  EXPECT_EQ((*plan)[1].end, 4);
}

TEST(PipelinePlan, RefusesGapsOverlapsAndMixedRanges) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"stages": [{"name": "a", "model": "/m", "layers": [0, 2]}, {"name": "b", "model": "/m", "layers": [3, 4]}]})",
       "must start at 2"},
      {R"({"stages": [{"name": "a", "model": "/m", "layers": [0, 2]}, {"name": "b", "model": "/m", "layers": [1, 4]}]})",
       "must start at 2"},
      {R"({"stages": [{"name": "a", "model": "/m", "layers": [0, 3]}]})", "cover layers [0, 3) of 4"},
      {R"({"stages": [{"name": "a", "model": "/m", "layers": [0, 2]}, {"name": "b", "model": "/m"}]})",
       "on every stage or on none"},
      {R"({"stages": []})", "no stages"},
      {R"({"stages": [{"name": "a", "model": "/m"}, {"name": "b", "model": "/m"}, {"name": "c", "model": "/m"},
                      {"name": "d", "model": "/m"}, {"name": "e", "model": "/m"}]})",
       "5 stages for 4 layers"},
      {R"({"stages": [{"name": 1, "model": "/m"}]})", "expected {\"name\": str"},
      {R"([1, 2])", "expected {\"stages\": [...]}"},
  };
  for (const auto& [json, error] : cases) {
    auto plan = plan_of(json, 4);
    ASSERT_FALSE(plan.ok()) << json;
    EXPECT_NE(plan.status().message().find(error), std::string::npos) << plan.status().to_string();
  }
}

TEST(PipelinePlan, SplitsLayersInProportionToFreeMemoryWithAtLeastOneEach) {
  EXPECT_EQ(split_layers(16, {8, 8}), (std::vector<int64_t>{8, 8}));
  EXPECT_EQ(split_layers(16, {30, 10}), (std::vector<int64_t>{12, 4}));
  EXPECT_EQ(split_layers(4, {100, 0, 0}), (std::vector<int64_t>{2, 1, 1}));
  EXPECT_EQ(split_layers(3, {1, 1, 1}), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(split_layers(5, {1, 1}), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(split_layers(4, {1000001, 999999}), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(split_layers(7, {0, 0}), (std::vector<int64_t>{4, 3}));
  const std::vector<int64_t> big = split_layers(80, {uint64_t{96} << 30, uint64_t{24} << 30, uint64_t{40} << 30});
  EXPECT_EQ(big, (std::vector<int64_t>{48, 12, 20}));
}

}  // namespace
}  // namespace tessera::pipeline
