// safetensors: Hugging Face's tensor file format, read in place from a memory map.
//
// Layout (https://github.com/huggingface/safetensors):
//   u64 little-endian N | N bytes of JSON header | data section
// The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data section) and may hold "__metadata__": {str: str}.
//
// parse_safetensors is a pure function over the file's bytes and never trusts
// them: it checks the header length against the file, the JSON, every dtype,
// that shape x dtype size equals end - begin (checked u64 arithmetic), that
// every span lies inside the data section, and that no two tensors overlap.
// Errors are kInvalidInput naming the tensor and the field. It is fuzzed
// (fuzz/safetensors_fuzz.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace tessera {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // in file order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
};

// Largest header accepted (the reference implementation's limit is 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100u << 20;

Result<SafetensorsHeader> parse_safetensors(std::span<const uint8_t> file);

// Builds a safetensors file in memory (used by tests, fixtures and bench).
struct NamedTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::span<const uint8_t> bytes;
};
std::vector<uint8_t> encode_safetensors(const std::vector<NamedTensor>& tensors,
                                        const std::map<std::string, std::string>& metadata = {});

// A mapped, validated safetensors file. Immutable; readable from any thread.
class SafetensorsFile {
 public:
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  const SafetensorsEntry* find(const std::string& name) const;
  TensorView view(const SafetensorsEntry& entry) const;

 private:
  MappedFile file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;  // name -> position in header_.tensors
};

}  // namespace tessera
