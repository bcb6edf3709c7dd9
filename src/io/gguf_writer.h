// GgufWriter: writes a GGUF file (version 3, the layout gguf.h states), streaming
// the tensors' bytes so that a model never has to be held whole in memory.
//
// Use: set the metadata (set_* or copy), declare every tensor (add_tensor: name,
// dims innermost first as ggml's ne, type), then open(), then write_tensor() for
// each declared tensor in order, then finish(). Offsets are laid out at
// declaration (each tensor aligned to general.alignment, 32 unless set), so
// the header goes out before any tensor is computed. Every number is written
// little-endian, field by field.
//
// Not thread-safe; one writer per file.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/gguf.h"

namespace tessera {

class GgufWriter {
 public:
  GgufWriter() = default;
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;
  ~GgufWriter();

  // Metadata, in the order first set (setting a key again replaces its value in place).
  void set_u32(std::string_view key, uint32_t value);
  void set_f32(std::string_view key, float value);
  void set_bool(std::string_view key, bool value);
  void set_string(std::string_view key, std::string_view value);
  void set_string_array(std::string_view key, const std::vector<std::string>& values);
  void set_f32_array(std::string_view key, std::span<const float> values);
  void set_i32_array(std::string_view key, std::span<const int32_t> values);
  // A value as a parsed file holds it (any type, arrays nested), copied.
  void copy(std::string_view key, const GgufValue& value);
  void remove(std::string_view key);

  // Declares the next tensor; kInvalidInput for a duplicate or a name over 63 bytes,
  // or dims[0] not a whole number of the type's blocks.
  Status add_tensor(std::string_view name, std::vector<uint64_t> dims, GgmlType type);
  uint64_t tensor_bytes(size_t index) const { return tensors_.at(index).bytes; }
  size_t tensor_count() const { return tensors_.size(); }

  // Creates `path` and writes the header; kInvalidInput naming the path on failure.
  Status open(const std::string& path);
  // The bytes of the next declared tensor (exactly its size).
  Status write_tensor(std::span<const uint8_t> bytes);
  // Checks that every tensor was written and closes the file.
  Status finish();

 private:
  struct Tensor {
    std::string name;
    std::vector<uint64_t> dims;
    GgmlType type = GgmlType::kF32;
    uint64_t offset = 0;
    uint64_t bytes = 0;
  };
  struct Entry {
    std::string key;
    std::vector<uint8_t> encoded;  // u32 type | value, as the file stores it
  };
  void put(std::string_view key, std::vector<uint8_t> encoded);
  Status write_bytes(const void* data, size_t size);

  std::vector<Entry> entries_;
  std::vector<Tensor> tensors_;
  uint64_t alignment_ = 32;
  uint64_t data_bytes_ = 0;
  std::string path_;
  std::FILE* file_ = nullptr;
  size_t next_tensor_ = 0;
  uint64_t written_ = 0;  // of the data section
};

}  // namespace tessera
