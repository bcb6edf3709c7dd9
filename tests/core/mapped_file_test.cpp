// release_mapped_pages: a mapped file's pages dropped, and read back the same; anything
// else left alone.
#include "core/mapped_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace tessera {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// The resident KiB of this process's mapping that holds `p` (/proc/self/smaps), -1 if none does.
long resident_kib(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const auto at = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    unsigned long begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &begin, &end) == 2 && line.find(' ') > line.find('-')) {
      inside = at >= begin && at < end;
    } else if (inside && line.rfind("Rss:", 0) == 0) {
      return std::stol(line.substr(4));
    }
  }
  return -1;
}

std::vector<uint8_t> pattern(size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>(i * 131 + i / 4096);
  return v;
}

class MappedFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = ::testing::TempDir() + "mapped_file_test_" + std::to_string(::getpid()) + ".bin";
    const std::vector<uint8_t> bytes = pattern(8 * kMiB);
    std::ofstream(path_, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  }
  void TearDown() override { std::remove(path_.c_str()); }
  std::string path_;
};

uint64_t touch(std::span<const uint8_t> bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes.size(); i += 512) sum += bytes[i];
  return sum;
}

TEST_F(MappedFileTest, ReleasedPagesLeaveTheProcessAndReadBackTheSame) {
  auto file = MappedFile::open(path_);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const std::span<const uint8_t> bytes = file->bytes();
  const uint64_t sum = touch(bytes);
  const long before = resident_kib(bytes.data());
  ASSERT_GE(before, 7 * 1024) << "the mapping should be resident once read";
  // Not page-aligned at either end: only the whole pages inside go.
  release_mapped_pages(bytes.data() + kMiB - 100, 6 * kMiB + 200);
  const long after = resident_kib(bytes.data());
  EXPECT_LE(after, before - 6 * 1024 + 8) << "about 6 MiB of pages should have left";
  EXPECT_EQ(touch(bytes), sum);
  EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), pattern(8 * kMiB).begin())) << "the bytes read back";
}

// Fails first with the registry's check removed (madvise on any range): the vector's pages are
// anonymous, and dropping them reads back zeros.
TEST_F(MappedFileTest, AnonymousMemoryAndRangesPastAMappingAreLeftAlone) {
  const std::vector<uint8_t> expected = pattern(4 * kMiB);
  std::vector<uint8_t> anonymous = expected;
  release_mapped_pages(anonymous.data(), anonymous.size());
  EXPECT_EQ(anonymous, expected);

  auto file = MappedFile::open(path_);
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  const std::span<const uint8_t> bytes = file->bytes();
  touch(bytes);
  const long before = resident_kib(bytes.data());
  release_mapped_pages(bytes.data() + bytes.size() - 2 * kMiB, 4 * kMiB);  // runs past the end
  EXPECT_GE(resident_kib(bytes.data()), before - 8);
  release_mapped_pages(nullptr, 0);
}

}  // namespace
}  // namespace tessera
