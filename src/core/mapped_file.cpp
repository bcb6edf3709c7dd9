#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>

namespace tessera {

namespace {

// The live MappedFiles' ranges, by their first byte: release_mapped_pages touches nothing else.
struct Mappings {
  std::mutex mutex;
  std::map<uintptr_t, size_t> ranges;
};

Mappings& mappings() {
  static Mappings m;
  return m;
}

void unmap(const uint8_t* data, size_t size) {
  {
    Mappings& m = mappings();
    const std::lock_guard lock(m.mutex);
    m.ranges.erase(reinterpret_cast<uintptr_t>(data));
  }
  ::munmap(const_cast<uint8_t*>(data), size);
}

}  // namespace

void release_mapped_pages(const void* data, size_t bytes) {
  const auto first = reinterpret_cast<uintptr_t>(data);
  if (bytes == 0 || first + bytes < first) return;
  Mappings& m = mappings();
  const std::lock_guard lock(m.mutex);  // held through madvise: the mapping cannot go meanwhile
  auto it = m.ranges.upper_bound(first);
  if (it == m.ranges.begin()) return;
  --it;  // the mapping starting at or before `first`
  if (first + bytes > it->first + it->second) return;
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (first + page - 1) / page * page, end = (first + bytes) / page * page;
  if (begin < end) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void advise_huge_pages(const void* data, size_t bytes) {
  static const bool on = [] {
    const char* text = std::getenv("TESSERA_HUGEPAGES");
    return text == nullptr || std::strcmp(text, "0") != 0;
  }();
  if (on && bytes > 0) ::madvise(const_cast<void*>(data), bytes, MADV_HUGEPAGE);
}

std::shared_ptr<uint8_t> map_advised(size_t bytes) {
  void* data = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) return nullptr;
  advise_huge_pages(data, bytes);
  return {static_cast<uint8_t*>(data), [bytes](uint8_t* p) { ::munmap(p, bytes); }};
}

Result<MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer (it is then refused as not a regular file).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    std::string message = path + ": cannot open: " + std::strerror(err);
    return err == ENOENT ? Status::not_found(message) : Status::invalid_input(message);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::invalid_input(path + ": not a regular file");
  }
  MappedFile file;
  file.path_ = path;
  file.size_ = static_cast<size_t>(st.st_size);
  if (file.size_ > 0) {
    void* p = ::mmap(nullptr, file.size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Status::internal(path + ": mmap failed: " + std::strerror(err));
    }
    file.data_ = static_cast<const uint8_t*>(p);
    advise_huge_pages(p, file.size_);
    Mappings& m = mappings();
    const std::lock_guard lock(m.mutex);
    m.ranges[reinterpret_cast<uintptr_t>(p)] = file.size_;
  }
  ::close(fd);
  return file;
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_) unmap(data_, size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_) unmap(data_, size_);
}

}  // namespace tessera
