// MappedFile: a read-only memory map of a whole file (RAII). Weights are used in
// place from the map, never copied. Immutable after open; safe to read from any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "core/status.h"

namespace tessera {

class MappedFile {
 public:
  static Result<MappedFile> open(const std::string& path);

  MappedFile() = default;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tessera
