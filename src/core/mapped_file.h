// MappedFile: a read-only memory map of a whole file (RAII). Weights are used in
// place from the map, or copied from it by a device into its own layout or memory,
// which then releases the copied pages (release_mapped_pages). Immutable after open;
// safe to read from any thread. The map is advised for huge pages (advise_huge_pages).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/status.h"

namespace tessera {

// Asks the kernel to back [data, data + bytes) (data: the start of a mapping, so
// page-aligned) with transparent huge pages
// (madvise(MADV_HUGEPAGE)) unless TESSERA_HUGEPAGES is "0" (read once; for measuring one
// against the other). Weights are read once a decode step, and 2 MiB pages take the
// TLB misses out of that stream. A hint: where the kernel does not take it, nothing
// changes. Call it before the memory is first touched.
void advise_huge_pages(const void* data, size_t bytes);

// `bytes` of zeros in an anonymous mapping of their own (page-aligned), advised for huge
// pages before any of it is touched; nullptr when it cannot be mapped (errno says why).
// The memory that reads stand in for weights, or hold them, in the weights' pages.
std::shared_ptr<uint8_t> map_advised(size_t bytes);

// Drops this process's pages of [data, data + bytes) where the range lies inside a live
// MappedFile (its whole pages only, madvise(MADV_DONTNEED)): a weight that a device has
// copied into its own layout or memory then stops holding its bytes resident twice. The
// file stays mapped, so a later read of the range faults the same bytes back in from the
// file. Anywhere else (anonymous memory, a buffer, a range past a mapping's end) it does
// nothing, since dropping those pages would lose their contents.
void release_mapped_pages(const void* data, size_t bytes);

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
