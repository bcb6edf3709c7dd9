// Tests of parse_safetensors, encode_safetensors and SafetensorsFile. Well-formed
// files come from encode_safetensors; each rejection is a hand-written header,
// and each test checks the error kind and that the message names the tensor and
// the field.
#include "io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>
#include <vector>

namespace tessera {
namespace {

// u64 LE header length | header | data_size bytes (0, 1, 2, ...).
std::vector<uint8_t> raw_file(const std::string& header, size_t data_size) {
  std::vector<uint8_t> out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(uint64_t{header.size()} >> (8 * i)));
  out.insert(out.end(), header.begin(), header.end());
  for (size_t i = 0; i < data_size; ++i) out.push_back(static_cast<uint8_t>(i));
  return out;
}

template <typename T>
std::span<const uint8_t> as_bytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// Parses `file`, expects kInvalidInput, and expects every part in the message.
void expect_rejected(const std::vector<uint8_t>& file, std::initializer_list<std::string> parts) {
  const Result<SafetensorsHeader> header = parse_safetensors(file);
  ASSERT_FALSE(header.ok()) << "accepted a bad file";
  EXPECT_EQ(header.status().kind(), ErrorKind::kInvalidInput) << header.status().to_string();
  for (const std::string& part : parts) {
    EXPECT_NE(header.status().message().find(part), std::string::npos)
        << "message \"" << header.status().message() << "\" lacks \"" << part << "\"";
  }
}

// A header holding one tensor 'w' whose entry is `entry`.
void expect_entry_rejected(const std::string& entry, size_t data_size, std::initializer_list<std::string> parts) {
  expect_rejected(raw_file("{\"w\":" + entry + "}", data_size), parts);
}

TEST(SafetensorsTest, RoundTripsF32F16Bf16) {
  const std::vector<float> f32 = {1.0f, -2.5f, 3.25f, 0.0f, 1e-3f, 7.0f};
  const std::vector<uint16_t> f16 = {0x3c00, 0xc000, 0x7bff, 0x0001};
  const std::vector<uint16_t> bf16 = {0x3f80, 0x4000, 0xbf80};
  const std::vector<NamedTensor> tensors = {
      {"model.embed.weight", DType::kF32, {2, 3}, as_bytes(f32)},
      {"b.f16", DType::kF16, {4}, as_bytes(f16)},
      {"a.bf16", DType::kBF16, {3, 1}, as_bytes(bf16)},
  };
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "tessera \"test\""}};
  const std::vector<uint8_t> file = encode_safetensors(tensors, metadata);

  const Result<SafetensorsHeader> header = parse_safetensors(file);
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  EXPECT_EQ(header->metadata, metadata);
  ASSERT_EQ(header->tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {  // file order is the order given
    const SafetensorsEntry& e = header->tensors[i];
    EXPECT_EQ(e.name, tensors[i].name);
    EXPECT_EQ(e.dtype, tensors[i].dtype);
    EXPECT_EQ(e.shape, tensors[i].shape);
    ASSERT_EQ(e.end - e.begin, tensors[i].bytes.size());
    EXPECT_EQ(std::memcmp(file.data() + header->data_offset + e.begin, tensors[i].bytes.data(), e.end - e.begin), 0);
  }
}

TEST(SafetensorsTest, PadsHeaderWithSpacesToMultipleOf8) {
  for (const std::string name : {"a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "abcdefgh"}) {
    const std::vector<float> data = {1.0f};
    const std::vector<uint8_t> file = encode_safetensors({{name, DType::kF32, {1}, as_bytes(data)}});
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | file[static_cast<size_t>(i)];
    EXPECT_EQ(n % 8, 0u) << name;
    ASSERT_EQ(file.size(), 8 + n + 4);
    const std::string header(file.begin() + 8, file.begin() + 8 + static_cast<std::ptrdiff_t>(n));
    const size_t close = header.rfind('}');
    EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << header;
    EXPECT_LT(header.size() - close - 1, 8u);
  }
}

TEST(SafetensorsTest, AcceptsZeroSizeTensorsSharingAnOffset) {
  const std::vector<float> one = {5.0f};
  const std::vector<uint8_t> file = encode_safetensors({{"empty_a", DType::kF32, {0, 4}, {}},
                                                        {"empty_b", DType::kBF16, {3, 0}, {}},
                                                        {"x", DType::kF32, {1}, as_bytes(one)},
                                                        {"empty_c", DType::kU8, {0}, {}}});
  const Result<SafetensorsHeader> header = parse_safetensors(file);
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  ASSERT_EQ(header->tensors.size(), 4u);
  EXPECT_EQ(header->tensors[0].begin, header->tensors[1].begin);
  EXPECT_EQ(header->tensors[1].shape, (std::vector<int64_t>{3, 0}));
}

TEST(SafetensorsTest, AcceptsZeroSizeTensorInsideAnotherTensor) {
  const std::vector<uint8_t> file = raw_file(
      R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"z":{"dtype":"F32","shape":[0],"data_offsets":[2,2]}})",
      4);
  const Result<SafetensorsHeader> header = parse_safetensors(file);
  EXPECT_TRUE(header.ok()) << header.status().to_string();
}

TEST(SafetensorsTest, AcceptsScalarsEmptyHeaderAndTrailingBytes) {
  EXPECT_TRUE(parse_safetensors(raw_file("{}", 0)).ok());
  EXPECT_TRUE(parse_safetensors(raw_file("{}  ", 3)).ok());
  const Result<SafetensorsHeader> header =
      parse_safetensors(raw_file(R"({"s":{"dtype":"I64","shape":[],"data_offsets":[0,8]}})", 10));
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  EXPECT_TRUE(header->tensors[0].shape.empty());
}

TEST(SafetensorsTest, AcceptsRank8AndDimOf2To40) {
  EXPECT_TRUE(
      parse_safetensors(raw_file(R"({"w":{"dtype":"U8","shape":[1,1,1,1,1,1,1,2],"data_offsets":[0,2]}})", 2)).ok());
  // A dim of exactly 2^40 passes the dim check and fails only on the byte count.
  expect_entry_rejected(R"({"dtype":"U8","shape":[1099511627776],"data_offsets":[0,0]})", 0,
                        {"tensor 'w'", "needs 1099511627776 bytes"});
}

TEST(SafetensorsTest, RejectsFileShorterThan8Bytes) {
  for (size_t size = 0; size < 8; ++size) {
    expect_rejected(std::vector<uint8_t>(size, 0), {"file is " + std::to_string(size) + " bytes", "8-byte"});
  }
}

TEST(SafetensorsTest, RejectsHeaderLengthAboveLimit) {
  std::vector<uint8_t> file = raw_file("{}", 0);
  const uint64_t n = kMaxSafetensorsHeaderBytes + 1;
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = static_cast<uint8_t>(n >> (8 * i));
  file.resize(kMaxSafetensorsHeaderBytes + 64, ' ');  // large enough that only the limit rejects it
  expect_rejected(file, {"header length " + std::to_string(n), "limit"});
}

TEST(SafetensorsTest, RejectsHeaderLengthBeyondFileSize) {
  std::vector<uint8_t> file = raw_file("{}", 0);  // 10 bytes
  file[0] = 3;
  expect_rejected(file, {"header length 3 exceeds file size 10"});
  for (int i = 0; i < 8; ++i) file[static_cast<size_t>(i)] = 0xff;
  expect_rejected(file, {"header length 18446744073709551615"});
}

TEST(SafetensorsTest, RejectsEveryTruncation) {
  const std::vector<float> data = {1, 2, 3, 4};
  const std::vector<uint8_t> file = encode_safetensors({{"w", DType::kF32, {2, 2}, as_bytes(data)}});
  for (size_t size = 0; size < file.size(); ++size) {
    const std::vector<uint8_t> cut(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(size));
    EXPECT_FALSE(parse_safetensors(cut).ok()) << size;
  }
}

TEST(SafetensorsTest, RejectsInvalidJson) {
  expect_rejected(raw_file(R"({"w": {"dtype": "F32",)", 0), {"header: not valid JSON"});
  expect_rejected(raw_file("\xff\xfe{}", 0), {"header: not valid JSON"});
}

TEST(SafetensorsTest, RejectsDeeplyNestedJsonWithoutOverflowingTheStack) {
  const size_t depth = 1'000'000;
  expect_entry_rejected(std::string(depth, '[') + std::string(depth, ']'), 0, {"header: JSON nested deeper than 64"});
  expect_rejected(raw_file(std::string(depth, '['), 0), {"header: JSON nested deeper than 64"});
}

TEST(SafetensorsTest, RejectsHeaderThatIsNotAnObject) {
  expect_rejected(raw_file(R"([{"dtype":"F32","shape":[],"data_offsets":[0,4]}])", 4), {"header", "not a JSON object"});
  expect_rejected(raw_file("42", 0), {"header", "not a JSON object"});
}

TEST(SafetensorsTest, RejectsEntryThatIsNotAnObject) {
  expect_entry_rejected("[1, 2]", 0, {"tensor 'w'", "not a JSON object"});
  expect_entry_rejected("\"F32\"", 0, {"tensor 'w'", "not a JSON object"});
}

TEST(SafetensorsTest, RejectsMissingOrNonStringDtype) {
  expect_entry_rejected(R"({"shape":[1],"data_offsets":[0,4]})", 4, {"tensor 'w'", "missing field 'dtype'"});
  expect_entry_rejected(R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})", 4,
                        {"tensor 'w'", "field 'dtype' is not a string"});
}

TEST(SafetensorsTest, RejectsUnknownDtype) {
  expect_entry_rejected(R"({"dtype":"Q4_X","shape":[1],"data_offsets":[0,4]})", 4,
                        {"tensor 'w'", "unknown dtype 'Q4_X'"});
  expect_entry_rejected(R"({"dtype":"q4_k","shape":[256],"data_offsets":[0,144]})", 144,
                        {"tensor 'w'", "unknown dtype 'q4_k'"});
  expect_entry_rejected(R"({"dtype":"f32","shape":[1],"data_offsets":[0,4]})", 4, {"tensor 'w'", "dtype 'f32'"});
}

TEST(SafetensorsTest, RejectsMissingOrNonArrayShape) {
  expect_entry_rejected(R"({"dtype":"F32","data_offsets":[0,4]})", 4, {"tensor 'w'", "missing field 'shape'"});
  expect_entry_rejected(R"({"dtype":"F32","shape":1,"data_offsets":[0,4]})", 4,
                        {"tensor 'w'", "field 'shape' is not an array"});
}

TEST(SafetensorsTest, RejectsNegativeDim) {
  expect_entry_rejected(R"({"dtype":"F32","shape":[2,-3],"data_offsets":[0,0]})", 0,
                        {"tensor 'w'", "shape[1] is negative (-3)"});
}

TEST(SafetensorsTest, RejectsNonIntegerDim) {
  expect_entry_rejected(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})", 4, {"tensor 'w'", "shape[0]"});
  expect_entry_rejected(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})", 4, {"tensor 'w'", "shape[0]"});
  expect_entry_rejected(R"({"dtype":"F32","shape":[1,"2"],"data_offsets":[0,8]})", 8, {"tensor 'w'", "shape[1]"});
  expect_entry_rejected(R"({"dtype":"F32","shape":[true],"data_offsets":[0,4]})", 4, {"tensor 'w'", "shape[0]"});
  expect_entry_rejected(R"({"dtype":"U8","shape":[18446744073709551616],"data_offsets":[0,0]})", 0,
                        {"tensor 'w'", "shape[0]"});
}

TEST(SafetensorsTest, RejectsDimAbove2To40) {
  expect_entry_rejected(R"({"dtype":"U8","shape":[1,1099511627777],"data_offsets":[0,0]})", 0,
                        {"tensor 'w'", "shape[1]", "2^40"});
}

TEST(SafetensorsTest, RejectsRankAbove8) {
  expect_entry_rejected(R"({"dtype":"U8","shape":[1,1,1,1,1,1,1,1,1],"data_offsets":[0,1]})", 1,
                        {"tensor 'w'", "rank 9"});
}

TEST(SafetensorsTest, RejectsMalformedDataOffsets) {
  const std::string prefix = R"({"dtype":"U8","shape":[4],)";
  expect_entry_rejected(R"({"dtype":"U8","shape":[4]})", 4, {"tensor 'w'", "missing field 'data_offsets'"});
  for (const std::string offsets :
       {"4", "[0]", "[0,2,4]", "[-1,3]", "[0,\"4\"]", "[0,4.0]", "[0,18446744073709551616]", "{\"0\":4}"}) {
    expect_entry_rejected(prefix + "\"data_offsets\":" + offsets + "}", 4,
                          {"tensor 'w'", "field 'data_offsets' is not two unsigned integers"});
  }
}

TEST(SafetensorsTest, RejectsDecreasingDataOffsets) {
  expect_entry_rejected(R"({"dtype":"U8","shape":[0],"data_offsets":[4,2]})", 4, {"tensor 'w'", "data_offsets [4, 2]"});
}

TEST(SafetensorsTest, RejectsDataOffsetsOutsideDataSection) {
  expect_entry_rejected(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})", 20,
                        {"tensor 'w': data_offsets [0, 24] outside the data section of 20 bytes"});
  expect_entry_rejected(R"({"dtype":"U8","shape":[0],"data_offsets":[21,21]})", 20, {"tensor 'w'", "outside"});
  expect_entry_rejected(R"({"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]})", 20,
                        {"tensor 'w'", "outside"});
}

TEST(SafetensorsTest, RejectsByteCountThatDiffersFromSpan) {
  expect_entry_rejected(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,20]})", 24,
                        {"tensor 'w': dtype F32 shape [2, 3] needs 24 bytes but data_offsets span 20"});
  expect_entry_rejected(R"({"dtype":"BF16","shape":[2,3],"data_offsets":[0,24]})", 24,
                        {"tensor 'w': dtype BF16 shape [2, 3] needs 12 bytes but data_offsets span 24"});
}

// A stage's shipped GGUF blocks (pipeline/weight_shipping.h) under tessera's own
// dtype names: rows of whole blocks, ggml's block sizes.
TEST(SafetensorsTest, RoundTripsQuantizedBlocks) {
  const std::vector<uint8_t> q4_k(2 * 144, 7), q8_0(3 * 34, 9);
  const std::vector<NamedTensor> tensors = {{"a", DType::kQ4_K, {1, 512}, q4_k}, {"b", DType::kQ8_0, {3, 32}, q8_0}};
  const std::vector<uint8_t> file = encode_safetensors(tensors);
  const Result<SafetensorsHeader> header = parse_safetensors(file);
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  ASSERT_EQ(header->tensors.size(), 2u);
  EXPECT_EQ(header->tensors[0].dtype, DType::kQ4_K);
  EXPECT_EQ(header->tensors[0].end - header->tensors[0].begin, 288u);
  EXPECT_EQ(header->tensors[1].dtype, DType::kQ8_0);
  EXPECT_EQ(header->tensors[1].shape, (std::vector<int64_t>{3, 32}));
}

TEST(SafetensorsTest, RejectsQuantizedRowsOfPartBlocks) {
  // 128 elements are half a Q4_K block: without the block rule they count 0 bytes.
  expect_entry_rejected(R"({"dtype":"Q4_K","shape":[2,128],"data_offsets":[0,0]})", 0,
                        {"tensor 'w': dtype Q4_K shape [2, 128] is not rows of whole blocks of 256 elements"});
  expect_entry_rejected(R"({"dtype":"Q8_0","shape":[48],"data_offsets":[0,34]})", 34,
                        {"tensor 'w'", "whole blocks of 32 elements"});
  expect_entry_rejected(R"({"dtype":"Q6_K","shape":[],"data_offsets":[0,210]})", 210,
                        {"tensor 'w'", "whole blocks of 256"});
  expect_entry_rejected(R"({"dtype":"Q5_K","shape":[1,512],"data_offsets":[0,176]})", 176,
                        {"tensor 'w': dtype Q5_K shape [1, 512] needs 352 bytes but data_offsets span 176"});
}

TEST(SafetensorsTest, RejectsByteCountOverflow) {
  // 2^32 * 2^32 wraps to 0, which would match an empty span without the overflow check.
  expect_entry_rejected(R"({"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]})", 0,
                        {"tensor 'w'", "overflow"});
  expect_entry_rejected(R"({"dtype":"F32","shape":[1099511627776,1099511627776],"data_offsets":[0,0]})", 0,
                        {"tensor 'w'", "overflow"});
}

TEST(SafetensorsTest, RejectsOverlappingTensors) {
  expect_rejected(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("b":{"dtype":"U8","shape":[4],"data_offsets":[3,7]}})",
                           8),
                  {"tensors 'a' and 'b' overlap"});
  // Contained range, listed out of offset order, with a non-overlapping tensor between.
  expect_rejected(raw_file(R"({"c":{"dtype":"U8","shape":[2],"data_offsets":[12,14]},)"
                           R"("big":{"dtype":"U8","shape":[10],"data_offsets":[0,10]},)"
                           R"("inner":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                           16),
                  {"tensors 'big' and 'inner' overlap"});
  // Same range twice.
  expect_rejected(raw_file(R"({"x":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("y":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
                           4),
                  {"tensors 'x' and 'y' overlap"});
}

TEST(SafetensorsTest, AcceptsAdjacentTensors) {
  EXPECT_TRUE(parse_safetensors(raw_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                         R"("b":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                                         8))
                  .ok());
}

TEST(SafetensorsTest, RejectsDuplicateTensorNames) {
  expect_rejected(raw_file(R"({"w":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                           R"("w":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",
                           8),
                  {"tensor 'w'", "twice"});
}

TEST(SafetensorsTest, RejectsMetadataThatIsNotAnObjectOfStrings) {
  expect_rejected(raw_file(R"({"__metadata__":["pt"]})", 0), {"'__metadata__'", "not a JSON object"});
  expect_rejected(raw_file(R"({"__metadata__":{"format":"pt","step":100}})", 0), {"'__metadata__'", "'step'"});
  expect_rejected(raw_file(R"({"__metadata__":{"format":"pt","nested":{"a":"b"}}})", 0),
                  {"'__metadata__'", "'nested'"});
}

TEST(SafetensorsTest, ReadsMetadataAndKeepsItOutOfTensors) {
  const Result<SafetensorsHeader> header = parse_safetensors(
      raw_file(R"({"__metadata__":{"format":"pt"},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}})", 1));
  ASSERT_TRUE(header.ok()) << header.status().to_string();
  EXPECT_EQ(header->metadata.at("format"), "pt");
  ASSERT_EQ(header->tensors.size(), 1u);
  EXPECT_EQ(header->tensors[0].name, "w");
}

class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("tessera_safetensors_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(SafetensorsFileTest, ViewPointsIntoTheMap) {
  const std::vector<float> w = {1.5f, -2.0f, 4.0f, 8.0f, 16.0f, 32.0f};
  const std::vector<uint16_t> b = {0x3f80, 0x4000};
  const std::string path =
      write("t.safetensors",
            encode_safetensors({{"w", DType::kF32, {3, 2}, as_bytes(w)}, {"b", DType::kBF16, {2}, as_bytes(b)}}));
  const Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(file->path(), path);
  ASSERT_NE(file->find("w"), nullptr);
  EXPECT_EQ(file->find("missing"), nullptr);
  const TensorView view = file->view(*file->find("w"));
  EXPECT_EQ(view.dtype, DType::kF32);
  EXPECT_EQ(view.shape, (std::vector<int64_t>{3, 2}));
  ASSERT_EQ(view.nbytes(), w.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(view.data, w.data(), view.nbytes()), 0);
  const TensorView bview = file->view(*file->find("b"));
  EXPECT_EQ(static_cast<const uint16_t*>(bview.data)[1], 0x4000);
}

TEST_F(SafetensorsFileTest, OpenPrefixesParseErrorsWithPath) {
  const std::string path =
      write("bad.safetensors", raw_file(R"({"w":{"dtype":"X","shape":[],"data_offsets":[0,0]}})", 0));
  const Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_EQ(file.status().message().rfind(path + ": tensor 'w'", 0), 0u) << file.status().message();
}

TEST_F(SafetensorsFileTest, OpenOfMissingFileIsNotFound) {
  const std::string path = (dir_ / "absent.safetensors").string();
  const Result<SafetensorsFile> file = SafetensorsFile::open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().kind(), ErrorKind::kNotFound);
  EXPECT_NE(file.status().message().find(path), std::string::npos);
}

}  // namespace
}  // namespace tessera
