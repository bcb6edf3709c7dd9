// Tests of parse_gguf and GgufFile. The valid file is llama.cpp's own: written
// by gguf-py and read back by gguf-py into valid.json (make_gguf_fixtures.py).
// Each malformed file is built byte by byte by GgufBytes below, one per published
// GGUF parser bug and per guard; each test expects the error kind and the words
// that only its guard's message holds, so removing the guard fails it (the
// input then errs elsewhere, crashes, or is accepted).
#include "io/gguf.h"

#include "io/gguf_quant.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

namespace tessera {
namespace {

const std::string kFixtureDir = std::string(TESSERA_SOURCE_DIR) + "/tests/fixtures/gguf/";
constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

// A little-endian byte writer for hand-made GGUF files.
struct GgufBytes {
  std::vector<uint8_t> b;

  GgufBytes& uint(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
    return *this;
  }
  GgufBytes& u8(uint64_t v) { return uint(v, 1); }
  GgufBytes& u32(uint64_t v) { return uint(v, 4); }
  GgufBytes& u64(uint64_t v) { return uint(v, 8); }
  GgufBytes& type(GgufType t) { return u32(static_cast<uint32_t>(t)); }
  GgufBytes& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  GgufBytes& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return u32(kGgufMagic).u32(version).u64(tensors).u64(kvs);
  }
  GgufBytes& kv_u32(std::string_view key, uint32_t v) { return str(key).type(GgufType::kU32).u32(v); }
  GgufBytes& tensor(std::string_view name, std::initializer_list<uint64_t> dims, uint32_t ggml_type, uint64_t offset) {
    str(name).u32(dims.size());
    for (uint64_t d : dims) u64(d);
    return u32(ggml_type).u64(offset);
  }
  // Zero padding to `alignment`, then `n` data bytes.
  GgufBytes& data(uint64_t n, uint64_t alignment = 32) {
    while (b.size() % alignment != 0) b.push_back(0);
    for (uint64_t i = 0; i < n; ++i) b.push_back(static_cast<uint8_t>(i * 7));
    return *this;
  }
};

constexpr uint32_t kF32 = 0, kQ8_0 = 8;

// One F32 tensor 'w' of `dims` at `offset`, followed by `data_size` bytes.
std::vector<uint8_t> one_tensor(std::initializer_list<uint64_t> dims, uint32_t type, uint64_t offset,
                                uint64_t data_size) {
  return GgufBytes().header(1, 0).tensor("w", dims, type, offset).data(data_size).b;
}

// A small valid file from GgufBytes: two keys, an F32 [4, 2] and a Q8_0 [32].
std::vector<uint8_t> small_valid_file() {
  return GgufBytes()
      .header(2, 2)
      .kv_u32("general.alignment", 32)
      .str("general.name")
      .type(GgufType::kString)
      .str("tiny")
      .tensor("a", {4, 2}, kF32, 0)
      .tensor("b", {32}, kQ8_0, 32)
      .data(32 + 34)
      .b;
}

void expect_error(const std::vector<uint8_t>& file, ErrorKind kind, std::initializer_list<std::string> parts) {
  const Result<GgufHeader> header = parse_gguf(file);
  ASSERT_FALSE(header.ok()) << "accepted a bad file";
  EXPECT_EQ(header.status().kind(), kind) << header.status().to_string();
  for (const std::string& part : parts) {
    EXPECT_NE(header.status().message().find(part), std::string::npos)
        << "message \"" << header.status().message() << "\" lacks \"" << part << "\"";
  }
}
void expect_rejected(const std::vector<uint8_t>& file, std::initializer_list<std::string> parts) {
  expect_error(file, ErrorKind::kInvalidInput, parts);
}

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string hex(std::span<const uint8_t> bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}
std::string hex(std::string_view s) { return hex({reinterpret_cast<const uint8_t*>(s.data()), s.size()}); }
std::string hex_le(uint64_t bits, size_t n) {
  std::vector<uint8_t> bytes;
  for (size_t i = 0; i < n; ++i) bytes.push_back(static_cast<uint8_t>(bits >> (8 * i)));
  return hex(bytes);
}

// gguf-py's GGUFValueType names.
std::string py_type_name(GgufType type) {
  static const char* const kNames[] = {"UINT8", "INT8",   "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                       "BOOL",  "STRING", "ARRAY",  "UINT64", "INT64",  "FLOAT64"};
  return kNames[static_cast<uint32_t>(type)];
}

TEST(GgufTest, ReadsTheGgufPyFileAsGgufPyDoes) {
  const nlohmann::json ref = nlohmann::json::parse(read_file(kFixtureDir + "valid.json"));
  const Result<GgufFile> file = GgufFile::open(kFixtureDir + "valid.gguf");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const GgufHeader& h = file->header();
  EXPECT_EQ(h.version, ref["version"].get<uint32_t>());
  EXPECT_EQ(h.alignment, ref["alignment"].get<uint64_t>());
  EXPECT_EQ(h.data_offset, ref["data_offset"].get<uint64_t>());

  const auto& keys = ref["keys"];
  ASSERT_EQ(h.metadata.entries().size(), keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    const GgufKeyValue& kv = h.metadata.entries()[i];
    const auto& want = keys[i];
    SCOPED_TRACE(want["key"].get<std::string>());
    EXPECT_EQ(kv.key, want["key"].get<std::string>());
    EXPECT_EQ(py_type_name(kv.value.type), want["type"].get<std::string>());
    if (kv.value.type == GgufType::kArray) {
      EXPECT_EQ(py_type_name(kv.value.element_type), want["element_type"].get<std::string>());
      EXPECT_EQ(kv.value.count, want["count"].get<uint64_t>());
      if (kv.value.element_type == GgufType::kString) {
        ASSERT_EQ(kv.value.strings.size(), want["strings_hex"].size());
        for (size_t j = 0; j < kv.value.strings.size(); ++j) {
          EXPECT_EQ(hex(kv.value.strings[j]), want["strings_hex"][j].get<std::string>());
        }
      } else {
        EXPECT_EQ(hex(kv.value.raw), want["raw_hex"].get<std::string>());
      }
    } else if (kv.value.type == GgufType::kString) {
      EXPECT_EQ(hex(kv.value.string), want["string_hex"].get<std::string>());
    } else {
      const std::string raw = want["raw_hex"].get<std::string>();
      EXPECT_EQ(hex_le(kv.value.bits, raw.size() / 2), raw);
    }
  }
  // The typed getters agree with gguf-py's decoded values.
  const GgufMetadata& m = h.metadata;
  EXPECT_EQ(m.get_uint("test.u64").value_or(0), kU64Max);
  EXPECT_EQ(m.get_int("test.i64").value_or(0), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(m.get_int("test.i8").value_or(0), -100);
  EXPECT_EQ(m.get_int("test.i16").value_or(0), -30000);
  EXPECT_EQ(m.get_int("test.i32").value_or(0), -2000000000);
  EXPECT_EQ(m.get_uint("test.u32").value_or(0), 4000000000u);
  EXPECT_EQ(m.get_float("test.f32").value_or(0), double{0.1f});
  EXPECT_EQ(m.get_float("test.f64").value_or(0), -1.0 / 3.0);
  EXPECT_TRUE(m.get_bool("test.bool_true").value_or(false));
  EXPECT_FALSE(m.get_bool("test.bool_false").value_or(true));
  EXPECT_EQ(m.get_string("general.architecture").value_or(""), "llama");
  const Result<std::vector<std::string_view>> tokens = m.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ((*tokens)[3], "\u0120the");
  EXPECT_EQ((*tokens)[5], std::string(300, 'a'));
  EXPECT_EQ(m.get_f32_array("tokenizer.ggml.scores").value_or({}),
            (std::vector<float>{0, -1.5, 3.25, -0.0, 1e-30f, 7}));
  EXPECT_EQ(m.get_i32_array("tokenizer.ggml.token_type").value_or({}), (std::vector<int32_t>{3, 3, 1, 1, -1, 6}));

  const auto& tensors = ref["tensors"];
  ASSERT_EQ(h.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& t = h.tensors[i];
    const auto& want = tensors[i];
    SCOPED_TRACE(want["name"].get<std::string>());
    EXPECT_EQ(t.name, want["name"].get<std::string>());
    EXPECT_EQ(static_cast<uint32_t>(t.type), want["type"].get<uint32_t>());
    EXPECT_EQ(t.dims, want["dims"].get<std::vector<uint64_t>>());
    EXPECT_EQ(h.data_offset + t.offset, want["data_offset"].get<uint64_t>());
    EXPECT_EQ(t.nbytes, want["nbytes"].get<uint64_t>());
    EXPECT_EQ(hex(file->bytes(t)), want["data_hex"].get<std::string>());
    EXPECT_EQ(file->find(t.name), &t);
  }
  EXPECT_EQ(file->find("absent"), nullptr);
}

TEST(GgufTest, ReadsVersion2AndRefusesOtherVersionsAndBigEndian) {
  std::vector<uint8_t> file = read_file(kFixtureDir + "valid.gguf");
  file[4] = 2;
  const Result<GgufHeader> v2 = parse_gguf(file);
  ASSERT_TRUE(v2.ok()) << v2.status().to_string();
  EXPECT_EQ(v2->version, 2u);
  file[4] = 1;
  expect_error(file, ErrorKind::kUnsupported, {"GGUF version 1"});
  file[4] = 4;
  expect_error(file, ErrorKind::kUnsupported, {"GGUF version 4"});
  file[4] = 0;
  file[7] = 3;
  expect_error(file, ErrorKind::kUnsupported, {"big-endian"});
  file[0] = 'X';
  expect_rejected(file, {"magic", "is not \"GGUF\""});
}

TEST(GgufTest, SmallHandMadeFileParses) {
  const std::vector<uint8_t> file = small_valid_file();
  const Result<GgufHeader> h = parse_gguf(file);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_EQ(h->tensors.size(), 2u);
  EXPECT_EQ(h->tensors[0].nbytes, 32u);
  EXPECT_EQ(h->tensors[1].nbytes, 34u);
  EXPECT_EQ(h->tensors[1].type, GgmlType::kQ8_0);
  EXPECT_EQ(h->metadata.get_string("general.name").value_or(""), "tiny");
}

// Every prefix of a valid file that cuts a header, key, value, tensor info or
// tensor's bytes is refused; only the trailing padding after the last tensor
// may go. Run under ASan (make sanitize), no prefix reads outside its bytes.
TEST(GgufTest, TruncationAtEveryByteIsRefused) {
  for (const std::vector<uint8_t>& file : {read_file(kFixtureDir + "valid.gguf"), small_valid_file()}) {
    const Result<GgufHeader> whole = parse_gguf(file);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    uint64_t end = whole->data_offset;
    for (const GgufTensorInfo& t : whole->tensors) end = std::max(end, whole->data_offset + t.offset + t.nbytes);
    for (size_t n = 0; n < file.size(); ++n) {
      const std::vector<uint8_t> prefix(file.begin(), file.begin() + static_cast<std::ptrdiff_t>(n));
      const Result<GgufHeader> h = parse_gguf(prefix);
      if (n < end) {
        ASSERT_FALSE(h.ok()) << "accepted the first " << n << " bytes";
        ASSERT_EQ(h.status().kind(), ErrorKind::kInvalidInput) << n << ": " << h.status().to_string();
      } else {
        ASSERT_TRUE(h.ok()) << n << ": " << h.status().to_string();
      }
    }
  }
}

// CVE-2024-21802: ggml multiplied tensor dims without an overflow check.
TEST(GgufTest, Cve2024_21802_TensorDimsOverflowingAreRefused) {
  expect_rejected(one_tensor({uint64_t{1} << 32, uint64_t{1} << 32}, kF32, 0, 64),
                  {"tensor 'w'", "dims [4294967296, 4294967296]", "more than 2^63-1 elements"});
  // 2^63 elements: fits u64 but not the i64 element count of ggml and TensorView.
  expect_rejected(one_tensor({uint64_t{1} << 32, uint64_t{1} << 31}, kF32, 0, 64), {"more than 2^63-1 elements"});
  expect_rejected(one_tensor({kU64Max}, kF32, 0, 64), {"more than 2^63-1 elements"});
}

// CVE-2024-23605: an overflowing key-value count sized an allocation.
TEST(GgufTest, Cve2024_23605_KeyValueCountBeyondTheFileIsRefused) {
  for (const uint64_t count : {kU64Max, uint64_t{1} << 60, uint64_t{3}}) {
    expect_rejected(GgufBytes().header(0, count).kv_u32("k", 1).b, {"key-value count " + std::to_string(count)});
  }
  expect_rejected(GgufBytes().header(kU64Max, 0).data(64).b, {"tensor count 18446744073709551615"});
}

// CVE-2025-49847: vocabulary (string array) loading trusted the file's lengths.
TEST(GgufTest, Cve2025_49847_VocabularyArrayLengthsAreBounded) {
  auto tokens = [](uint64_t count) {
    return GgufBytes()
        .header(0, 1)
        .str("tokenizer.ggml.tokens")
        .type(GgufType::kArray)
        .type(GgufType::kString)
        .u64(count);
  };
  // A count the budget allows but the file cannot hold.
  expect_rejected(tokens(uint64_t{1} << 20).str("a").b,
                  {"key 'tokenizer.ggml.tokens'", "array of 1048576 string", "needs at least 8 bytes"});
  // A count whose views alone would take more than the metadata budget (a file of
  // zeros that large would parse as that many empty strings).
  for (const uint64_t count : {kU64Max, (kMaxGgufMetadataAllocation / 16) + 1}) {
    expect_rejected(tokens(count).str("a").b, {"key 'tokenizer.ggml.tokens'",
                                               std::to_string(count) + " elements of 16 bytes", "MiB metadata budget"});
  }
  // A token whose length runs past the file, or wraps a 64-bit offset.
  for (const uint64_t len : {uint64_t{100}, kU64Max, kU64Max - 7}) {
    expect_rejected(tokens(2).str("ok").u64(len).u64(0).b,
                    {"key 'tokenizer.ggml.tokens'[1]", "needs " + std::to_string(len) + " bytes"});
  }
}

// CVE-2025-53630 and later: an exabyte tensor backed by a small file, and
// offset + size wrapping past 2^64 to look small.
TEST(GgufTest, Cve2025_53630_TensorSizesBeyondTheFileAreRefused) {
  const uint64_t blocks = uint64_t{1} << 55;  // 2^55 Q8_0 blocks: about 1.2 EB
  expect_rejected(one_tensor({32 * blocks}, kQ8_0, 0, 64), {"tensor 'w'", "lie outside the data section of 64 bytes"});
  // Byte count overflowing u64 though the element count fits i64.
  expect_rejected(one_tensor({uint64_t{1} << 62}, kF32, 0, 64), {"overflow a 64-bit byte count"});
  // offset + nbytes wraps to 32, inside the data; the offset alone is outside.
  expect_rejected(one_tensor({16}, kF32, kU64Max - 31, 64), {"64 bytes at offset 18446744073709551584"});
}

TEST(GgufTest, AlignmentMustBeABoundedU32PowerOfTwo) {
  auto aligned = [](uint64_t alignment) {
    return GgufBytes()
        .header(1, 1)
        .kv_u32("general.alignment", static_cast<uint32_t>(alignment))
        .tensor("w", {4}, kF32, 0)
        .data(16)
        .b;
  };
  for (const uint64_t a : {0, 3, 48}) expect_rejected(aligned(a), {"'general.alignment' = " + std::to_string(a)});
  expect_rejected(aligned(uint64_t{1} << 31), {"'general.alignment' = 2147483648", "at most 65536"});
  // The largest alignment pads the data offset past the end of a small file.
  expect_rejected(aligned(kMaxGgufAlignment), {"data section at offset 65536", "past the end"});
  expect_rejected(GgufBytes().header(0, 1).str("general.alignment").type(GgufType::kU64).u64(32).b,
                  {"'general.alignment' is u64, not u32"});
  // An offset that is not a multiple of the alignment.
  expect_rejected(one_tensor({4}, kF32, 16, 64), {"offset 16 is not a multiple of the alignment 32"});
}

TEST(GgufTest, TensorOffsetsOutsideTheDataSectionAreRefused) {
  expect_rejected(one_tensor({4}, kF32, 64, 64), {"tensor 'w'", "16 bytes at offset 64", "data section of 64 bytes"});
  expect_rejected(one_tensor({32}, kF32, 0, 64), {"128 bytes at offset 0"});
  expect_rejected(one_tensor({4}, kF32, uint64_t{1} << 40, 64), {"at offset 1099511627776"});
  const std::vector<uint8_t> overlap =
      GgufBytes().header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {4}, kF32, 32).data(64).b;
  expect_rejected(overlap, {"tensors 'a' and 'b' overlap"});
}

TEST(GgufTest, ArrayDeclaredAsOneTypeIsNeverReadAsAnother) {
  const std::vector<uint8_t> file = GgufBytes()
                                        .header(0, 2)
                                        .str("tokenizer.ggml.tokens")
                                        .type(GgufType::kArray)
                                        .type(GgufType::kU32)
                                        .u64(2)
                                        .u32(5)
                                        .u32(6)
                                        .kv_u32("n", 7)
                                        .b;
  const Result<GgufHeader> h = parse_gguf(file);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  const Result<std::vector<std::string_view>> as_strings = h->metadata.get_string_array("tokenizer.ggml.tokens");
  ASSERT_FALSE(as_strings.ok());
  EXPECT_EQ(as_strings.status().kind(), ErrorKind::kInvalidInput);
  EXPECT_EQ(as_strings.status().message(), "key 'tokenizer.ggml.tokens' is array of u32, not array of string");
  EXPECT_FALSE(h->metadata.get_f32_array("tokenizer.ggml.tokens").ok());
  EXPECT_FALSE(h->metadata.get_i32_array("tokenizer.ggml.tokens").ok());
  EXPECT_FALSE(h->metadata.get_uint("tokenizer.ggml.tokens").ok());
  EXPECT_EQ(h->metadata.get_string("n").status().message(), "key 'n' is u32, not string");
  EXPECT_FALSE(h->metadata.get_float("n").ok());
  EXPECT_FALSE(h->metadata.get_bool("n").ok());
  EXPECT_EQ(h->metadata.get_uint("absent").status().kind(), ErrorKind::kNotFound);
  // An element type that is not a GGUF type at all.
  expect_rejected(GgufBytes().header(0, 1).str("k").type(GgufType::kArray).u32(13).u64(0).b,
                  {"key 'k' element type 13 is not a GGUF type"});
  expect_rejected(GgufBytes().header(0, 1).str("k").u32(99).u32(0).b, {"key 'k' value type 99"});
}

TEST(GgufTest, IntegerGettersRefuseValuesThatDoNotFit) {
  const std::vector<uint8_t> file = GgufBytes()
                                        .header(0, 2)
                                        .str("neg")
                                        .type(GgufType::kI32)
                                        .u32(static_cast<uint32_t>(-5))
                                        .str("big")
                                        .type(GgufType::kU64)
                                        .u64(kU64Max)
                                        .b;
  const Result<GgufHeader> h = parse_gguf(file);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->metadata.get_int("neg").value_or(0), -5);
  EXPECT_EQ(h->metadata.get_uint("neg").status().message(), "key 'neg' = -5 is negative");
  EXPECT_EQ(h->metadata.get_int("big").status().message(), "key 'big' = 18446744073709551615 does not fit in i64");
}

// Arrays of arrays, `depth` deep around an empty u8 array.
std::vector<uint8_t> nested(uint64_t depth) {
  GgufBytes f;
  f.header(0, 1).str("nested").type(GgufType::kArray);
  for (uint64_t i = 1; i < depth; ++i) f.type(GgufType::kArray).u64(1);
  return f.type(GgufType::kU8).u64(0).b;
}

TEST(GgufTest, DeeplyNestedArraysAreRefused) {
  const Result<GgufHeader> deepest = parse_gguf(nested(kMaxGgufArrayDepth));
  ASSERT_TRUE(deepest.ok()) << deepest.status().to_string();
  expect_rejected(nested(kMaxGgufArrayDepth + 1), {"key 'nested'[0][0][0][0]", "nested deeper than 4"});
  // Arrays of arrays draw on the same budget, at sizeof(GgufValue) each.
  expect_rejected(GgufBytes().header(0, 1).str("n").type(GgufType::kArray).type(GgufType::kArray).u64(kU64Max / 2).b,
                  {"key 'n'", "elements of " + std::to_string(sizeof(GgufValue)) + " bytes", "metadata budget"});
  // Deep enough to overflow the stack of a parser that recursed without a bound.
  expect_rejected(nested(1'000'000), {"nested deeper than 4"});
}

TEST(GgufTest, DuplicateKeysAndTensorNamesAreRefused) {
  expect_rejected(GgufBytes().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).b, {"key 'k' appears twice"});
  expect_rejected(GgufBytes().header(2, 0).tensor("w", {4}, kF32, 0).tensor("w", {4}, kF32, 32).data(64).b,
                  {"tensor 'w' appears twice"});
}

TEST(GgufTest, TensorInfoFieldsAreChecked) {
  expect_rejected(one_tensor({1, 1, 1, 1, 1}, kF32, 0, 64), {"tensor 'w'", "n_dims 5 is more than 4"});
  expect_rejected(one_tensor({33}, kQ8_0, 0, 64), {"dims[0] = 33 is not a multiple of Q8_0's block of 32"});
  expect_rejected(GgufBytes().header(1, 0).tensor(std::string(64, 'n'), {4}, kF32, 0).data(64).b,
                  {"tensor 0 name is 64 bytes, more than the limit of 63"});
  expect_rejected(GgufBytes().header(0, 1).str(std::string(65536, 'k')).type(GgufType::kU8).u8(0).b,
                  {"key 0 of 1 is 65536 bytes"});
  expect_rejected(GgufBytes().header(0, 1).str("").type(GgufType::kU8).u8(0).u8(0).b, {"key 0 is empty"});
  expect_rejected(GgufBytes().header(0, 1).str("b").type(GgufType::kBool).u8(2).b, {"key 'b': bool is 2"});
  expect_rejected(GgufBytes().header(0, 1).str("b").type(GgufType::kArray).type(GgufType::kBool).u64(2).u8(1).u8(7).b,
                  {"key 'b'[1]: bool is 7"});
}

TEST(GgufTest, TypesOutsideTheSupportedSetNameTheTensorAndType) {
  expect_error(one_tensor({32}, 3, 0, 64), ErrorKind::kUnsupported, {"tensor 'w'", "ggml type Q4_1 is not supported"});
  expect_error(one_tensor({256}, 10, 0, 128), ErrorKind::kUnsupported, {"ggml type Q2_K"});
  expect_rejected(one_tensor({4}, 4, 0, 64), {"tensor 'w'", "ggml type 4 is unknown"});
  expect_rejected(one_tensor({4}, 0xffffffff, 0, 64), {"ggml type 4294967295 is unknown"});
}

// Every tensor of gguf-py's file, dequantized, equals gguf-py's NumPy
// dequantizer bit for bit: quantizer output (Q8_0, Q4_0) and random blocks with
// finite scales (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K), plus F32, F16 and BF16.
TEST(GgufQuantTest, DequantizationIsBitwiseGgufPys) {
  const nlohmann::json ref = nlohmann::json::parse(read_file(kFixtureDir + "valid.json"));
  const Result<GgufFile> file = GgufFile::open(kFixtureDir + "valid.gguf");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  std::set<GgmlType> covered;
  for (const auto& want : ref["tensors"]) {
    const GgufTensorInfo* t = file->find(want["name"].get<std::string>());
    ASSERT_NE(t, nullptr);
    SCOPED_TRACE(std::string(t->name));
    uint64_t numel = 1;
    for (uint64_t d : t->dims) numel *= d;
    std::vector<float> out(numel);
    dequantize_gguf(t->type, file->bytes(*t), out);
    EXPECT_EQ(hex({reinterpret_cast<const uint8_t*>(out.data()), out.size() * sizeof(float)}),
              want["f32_hex"].get<std::string>());
    covered.insert(t->type);
  }
  EXPECT_EQ(covered.size(), 8u) << "the fixture lacks a supported type";
}

}  // namespace
}  // namespace tessera
