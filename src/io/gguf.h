// GGUF: llama.cpp's model file format (versions 2 and 3), read in place from a
// memory map. Spec: llama.cpp docs/gguf.md. All numbers are little-endian.
//
//   u32 magic "GGUF" | u32 version (2 or 3) | u64 tensor_count | u64 kv_count
//   kv_count x  { string key | u32 value_type | value }
//   tensor_count x { string name | u32 n_dims | u64 dims[n_dims] | u32 ggml_type | u64 offset }
//   zero padding to `general.alignment` (default 32) | data section
//
// A string is u64 length + bytes (no terminator). A value is a scalar of its
// type, a string, or an array: u32 element type | u64 count | count elements
// (arrays may nest). dims[0] is the innermost (fastest-varying) axis; a tensor's
// offset is relative to the data section and a multiple of the alignment.
//
// parse_gguf is a pure function over the file's bytes and never trusts them.
// Before anything is used or allocated it checks, in u64 arithmetic against the
// bytes that remain: the magic and version, both counts (each entry needs a
// minimum number of bytes), every string and array length, the array nesting
// depth (kMaxGgufArrayDepth), what string and nested arrays may allocate
// (kMaxGgufMetadataAllocation, checked before reserving), bool values, unique keys and tensor names, the rank
// (at most 4, as ggml), each dimension and their product, that dims[0] is a
// whole number of blocks of the ggml type, the type's byte size, that
// `general.alignment` is a u32 power of two at most kMaxGgufAlignment, that the
// padded data offset lies inside the file, and that each tensor's byte range is
// aligned, inside the data section and overlaps no other. Errors are
// kInvalidInput naming the key or tensor and the value; a known ggml type that
// tessera does not compute on is kUnsupported naming the tensor and the type.
// It is fuzzed (fuzz/gguf_fuzzer.cpp).
//
// Parsed strings and arrays are views into the bytes given to parse_gguf: they
// live as long as those bytes (GgufFile keeps its map for them). Immutable;
// readable from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"

namespace tessera {

// The spec's value types; the numbers are the file's.
enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
inline constexpr uint32_t kGgufTypeCount = 13;
std::string_view gguf_type_name(GgufType type);  // "u32", "string", "array", ...
uint64_t gguf_scalar_size(GgufType type);        // bytes of a scalar; 0 for string and array

// The ggml tensor types tessera loads (numbers are ggml's). Any other known
// ggml type is refused as kUnsupported, an unknown number as kInvalidInput.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};
std::string_view ggml_type_name(GgmlType type);  // "F32", "Q4_K", ...
uint64_t ggml_block_size(GgmlType type);         // elements per block: 1, 32 or 256
uint64_t ggml_type_size(GgmlType type);          // bytes per block
// The DType tessera computes on for each loaded ggml type (the same block bytes), and back.
DType dtype_of_ggml(GgmlType type);
std::optional<GgmlType> ggml_type_of(DType dtype);

// One metadata value. Scalars hold their bits in `bits` (integers zero- or
// sign-extended, f32/f64 as their IEEE bits, bool 0/1); use the typed getters
// of GgufMetadata rather than reading fields. Arrays hold `count` elements of
// `element_type`: fixed-size elements as their raw little-endian bytes in
// `raw`, strings in `strings`, nested arrays in `arrays`.
struct GgufValue {
  GgufType type = GgufType::kU8;
  uint64_t bits = 0;
  std::string_view string;
  GgufType element_type = GgufType::kU8;
  uint64_t count = 0;
  std::span<const uint8_t> raw;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> arrays;
};

struct GgufKeyValue {
  std::string_view key;
  GgufValue value;
};

// Metadata in file order, with typed getters. A getter fails with kNotFound
// for a missing key and kInvalidInput naming the key and both types when the
// stored type is not the one asked for (an array of u32 is never read as
// strings, an i32 never as a u64, ...). Integer getters accept any integer
// type whose value fits.
class GgufMetadata {
 public:
  const std::vector<GgufKeyValue>& entries() const { return entries_; }
  const GgufValue* find(std::string_view key) const;

  Result<uint64_t> get_uint(std::string_view key) const;
  Result<int64_t> get_int(std::string_view key) const;
  Result<double> get_float(std::string_view key) const;  // f32 or f64
  Result<bool> get_bool(std::string_view key) const;
  Result<std::string_view> get_string(std::string_view key) const;
  Result<std::vector<std::string_view>> get_string_array(std::string_view key) const;
  Result<std::vector<float>> get_f32_array(std::string_view key) const;
  Result<std::vector<int32_t>> get_i32_array(std::string_view key) const;

  // Appends an entry (the parser's job); refuses a key already present.
  Status add(GgufKeyValue entry);

 private:
  std::vector<GgufKeyValue> entries_;
  std::map<std::string_view, size_t> index_;
};

struct GgufTensorInfo {
  std::string_view name;
  std::vector<uint64_t> dims;  // dims[0] innermost, as ggml's ne
  GgmlType type = GgmlType::kF32;
  uint64_t offset = 0;  // relative to the data section
  uint64_t nbytes = 0;  // whole blocks: numel / block size * type size
};

struct GgufHeader {
  uint32_t version = 0;
  GgufMetadata metadata;
  std::vector<GgufTensorInfo> tensors;  // in file order
  uint64_t alignment = 32;
  uint64_t data_offset = 0;  // from the start of the file
};

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" little-endian
inline constexpr uint64_t kMaxGgufArrayDepth = 4;   // an array inside 3 others is the deepest
inline constexpr uint64_t kMaxGgufAlignment = uint64_t{1} << 16;
inline constexpr uint64_t kMaxGgufKeyBytes = 65535;  // the spec's bound
inline constexpr uint64_t kMaxGgufNameBytes = 63;    // ggml's GGML_MAX_NAME - 1
inline constexpr uint32_t kMaxGgufDims = 4;          // ggml's GGML_MAX_DIMS
// What parsed metadata may allocate: 16 bytes a string of an array, sizeof(GgufValue)
// a nested array. The largest vocabularies (262k tokens, 500k merges) use ~12 MiB.
inline constexpr uint64_t kMaxGgufMetadataAllocation = uint64_t{256} << 20;

Result<GgufHeader> parse_gguf(std::span<const uint8_t> file);

// A mapped, validated GGUF file. Immutable; readable from any thread.
class GgufFile {
 public:
  static Result<GgufFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const GgufHeader& header() const { return header_; }
  const GgufMetadata& metadata() const { return header_.metadata; }
  const GgufTensorInfo* find(std::string_view name) const;
  // The tensor's bytes in the map (its blocks, as the file stores them).
  std::span<const uint8_t> bytes(const GgufTensorInfo& tensor) const;

 private:
  MappedFile file_;
  GgufHeader header_;
  std::map<std::string_view, size_t> index_;  // name -> position in header_.tensors
};

}  // namespace tessera
