// Seed corpus files for the make_*_corpus programs: one subfolder per fuzz
// target under the root (fuzz/corpus), each seed small (< 4 KiB) so libFuzzer
// starts fast. A bug in a corpus program fails a TS_CHECK.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/check.h"

namespace tessera::fuzzing {

class CorpusWriter {
 public:
  explicit CorpusWriter(std::filesystem::path root) : root_(std::move(root)) {}

  void write(const std::string& target, const std::string& name, const std::vector<uint8_t>& bytes) const {
    TS_CHECK(bytes.size() < 4096, target, "/", name, " is ", bytes.size(), " bytes");
    const std::filesystem::path dir = root_ / target;
    std::filesystem::create_directories(dir);
    std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    TS_CHECK(out.good(), (dir / name).string());
  }

 private:
  std::filesystem::path root_;
};

}  // namespace tessera::fuzzing
