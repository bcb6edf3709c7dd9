// Tests of Checkpoint: single-file and sharded checkpoints written to a fresh
// temporary directory per test, and the index checks (missing shards, shard
// names that leave the directory, tensors listed in the wrong shard or twice).
#include "io/checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace tessera {
namespace {

template <typename T>
std::span<const uint8_t> as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

void expect_error(const Status& status, ErrorKind kind, std::initializer_list<std::string> parts) {
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.kind(), kind) << status.to_string();
  for (const std::string& part : parts) {
    EXPECT_NE(status.message().find(part), std::string::npos)
        << "message \"" << status.message() << "\" lacks \"" << part << "\"";
  }
}

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = std::filesystem::path(::testing::TempDir()) /
            ("tessera_checkpoint_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(root_);
    dir_ = (root_ / "ckpt").string();
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  static void write(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  static void write_text(const std::filesystem::path& path, const std::string& text) {
    std::ofstream(path, std::ios::binary) << text;
  }
  // Two shards: a = {embed, layer0}, b = {layer1, norm}.
  void write_shards() {
    write(std::filesystem::path(dir_) / "model-00001-of-00002.safetensors",
          encode_safetensors(
              {{"embed", DType::kF32, {2, 2}, as_bytes(embed_)}, {"layer0", DType::kBF16, {3}, as_bytes(layer0_)}}));
    write(std::filesystem::path(dir_) / "model-00002-of-00002.safetensors",
          encode_safetensors({{"layer1", DType::kF16, {1, 2}, as_bytes(layer1_)}, {"norm", DType::kF32, {0}, {}}}));
  }
  void write_index(const std::string& weight_map) {
    write_text(std::filesystem::path(dir_) / "model.safetensors.index.json",
               R"({"metadata": {"total_size": 26}, "weight_map": )" + weight_map + "}");
  }
  static constexpr const char* kGoodWeightMap =
      R"({"embed": "model-00001-of-00002.safetensors", "layer0": "model-00001-of-00002.safetensors",
          "layer1": "model-00002-of-00002.safetensors", "norm": "model-00002-of-00002.safetensors"})";

  std::filesystem::path root_;
  std::string dir_;
  std::vector<float> embed_ = {1, 2, 3, 4};
  std::vector<uint16_t> layer0_ = {0x3f80, 0x4000, 0x4040};
  std::vector<uint16_t> layer1_ = {0x3c00, 0x4000};
};

TEST_F(CheckpointTest, OpensSingleFile) {
  write(std::filesystem::path(dir_) / "model.safetensors",
        encode_safetensors({{"embed", DType::kF32, {2, 2}, as_bytes(embed_)}}));
  const Result<Checkpoint> ckpt = Checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->dir(), dir_);
  EXPECT_TRUE(ckpt->has("embed"));
  EXPECT_EQ(ckpt->names(), std::vector<std::string>{"embed"});
  EXPECT_EQ(ckpt->file_of("embed"), dir_ + "/model.safetensors");
  const Result<TensorView> view = ckpt->get("embed");
  ASSERT_TRUE(view.ok()) << view.status().to_string();
  EXPECT_EQ(view->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(std::memcmp(view->data, embed_.data(), 16), 0);
}

TEST_F(CheckpointTest, OpensShardedCheckpoint) {
  write_shards();
  write_index(kGoodWeightMap);
  const Result<Checkpoint> ckpt = Checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_EQ(ckpt->names(), (std::vector<std::string>{"embed", "layer0", "layer1", "norm"}));
  EXPECT_EQ(ckpt->file_of("layer0"), dir_ + "/model-00001-of-00002.safetensors");
  EXPECT_EQ(ckpt->file_of("layer1"), dir_ + "/model-00002-of-00002.safetensors");
  EXPECT_EQ(ckpt->file_of("absent"), "");

  const Result<TensorView> layer1 = ckpt->get("layer1");
  ASSERT_TRUE(layer1.ok()) << layer1.status().to_string();
  EXPECT_EQ(layer1->dtype, DType::kF16);
  EXPECT_EQ(std::memcmp(layer1->data, layer1_.data(), 4), 0);
  const Result<TensorView> layer0 = ckpt->get("layer0");
  ASSERT_TRUE(layer0.ok());
  EXPECT_EQ(layer0->dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp(layer0->data, layer0_.data(), 6), 0);
  const Result<TensorView> norm = ckpt->get("norm");
  ASSERT_TRUE(norm.ok());
  EXPECT_EQ(norm->numel(), 0);
}

TEST_F(CheckpointTest, GetOfMissingTensorIsNotFoundNamingTensorAndDir) {
  write_shards();
  write_index(kGoodWeightMap);
  const Result<Checkpoint> ckpt = Checkpoint::open(dir_);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
  EXPECT_FALSE(ckpt->has("lm_head"));
  expect_error(ckpt->get("lm_head").status(), ErrorKind::kNotFound, {"'lm_head'", dir_});
}

TEST_F(CheckpointTest, EmptyDirectoryIsNotFound) {
  expect_error(Checkpoint::open(dir_).status(), ErrorKind::kNotFound,
               {dir_ + ": no model.safetensors or model.safetensors.index.json"});
  expect_error(Checkpoint::open(dir_ + "/nope").status(), ErrorKind::kNotFound, {"no model.safetensors"});
}

TEST_F(CheckpointTest, CorruptSingleFileErrorNamesTheFile) {
  write_text(std::filesystem::path(dir_) / "model.safetensors", "short");
  expect_error(Checkpoint::open(dir_).status(), ErrorKind::kInvalidInput, {dir_ + "/model.safetensors: "});
}

TEST_F(CheckpointTest, RejectsMissingShard) {
  write_shards();
  write_index(R"({"embed": "model-00001-of-00002.safetensors", "extra": "model-00003-of-00002.safetensors"})");
  expect_error(Checkpoint::open(dir_).status(), ErrorKind::kNotFound,
               {"model.safetensors.index.json", "model-00003-of-00002.safetensors"});
}

TEST_F(CheckpointTest, RejectsCorruptShardNamingIt) {
  write_shards();
  write_text(std::filesystem::path(dir_) / "model-00002-of-00002.safetensors", std::string(8, '\0') + "x");
  write_index(kGoodWeightMap);
  expect_error(Checkpoint::open(dir_).status(), ErrorKind::kInvalidInput, {"model-00002-of-00002.safetensors"});
}

TEST_F(CheckpointTest, RejectsShardNamesOutsideTheDirectory) {
  write_shards();
  // The targets exist, so only the name check can refuse them.
  write(root_ / "outside.safetensors", encode_safetensors({{"embed", DType::kF32, {2, 2}, as_bytes(embed_)}}));
  std::filesystem::create_directories(std::filesystem::path(dir_) / "sub");
  write(std::filesystem::path(dir_) / "sub" / "x.safetensors",
        encode_safetensors({{"embed", DType::kF32, {2, 2}, as_bytes(embed_)}}));
  for (const std::string shard : {"../outside.safetensors", "sub/x.safetensors", "..", "/etc/passwd", ""}) {
    write_index(R"({"embed": ")" + shard + R"("})");
    expect_error(Checkpoint::open(dir_).status(), ErrorKind::kInvalidInput,
                 {"model.safetensors.index.json", "'embed'", "'" + shard + "'"});
  }
}

TEST_F(CheckpointTest, RejectsWeightMapEntryMissingFromItsShard) {
  write_shards();
  write_index(R"({"embed": "model-00001-of-00002.safetensors", "layer1": "model-00001-of-00002.safetensors"})");
  expect_error(Checkpoint::open(dir_).status(), ErrorKind::kInvalidInput,
               {"model.safetensors.index.json", "'layer1'", "model-00001-of-00002.safetensors"});
}

TEST_F(CheckpointTest, RejectsTensorInTwoShards) {
  write_shards();
  write(std::filesystem::path(dir_) / "model-00002-of-00002.safetensors",
        encode_safetensors({{"layer1", DType::kF16, {1, 2}, as_bytes(layer1_)},
                            {"norm", DType::kF32, {0}, {}},
                            {"embed", DType::kF32, {2, 2}, as_bytes(embed_)}}));
  write_index(kGoodWeightMap);
  expect_error(Checkpoint::open(dir_).status(), ErrorKind::kInvalidInput,
               {"'embed'", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"});
}

TEST_F(CheckpointTest, RejectsMalformedIndex) {
  write_shards();
  write_text(std::filesystem::path(dir_) / "model.safetensors.index.json", R"({"weight_map": {)");
  expect_error(Checkpoint::open(dir_).status(), ErrorKind::kInvalidInput,
               {"model.safetensors.index.json: not valid JSON"});
  write_text(std::filesystem::path(dir_) / "model.safetensors.index.json", R"({"metadata": {}})");
  expect_error(Checkpoint::open(dir_).status(), ErrorKind::kInvalidInput,
               {"model.safetensors.index.json", "'weight_map'"});
  write_index(R"({"embed": 1})");
  expect_error(Checkpoint::open(dir_).status(), ErrorKind::kInvalidInput, {"model.safetensors.index.json", "'embed'"});
}

}  // namespace
}  // namespace tessera
