#include "core/text_file.h"

#include "core/mapped_file.h"

namespace tessera {

Result<std::string> read_text_file(const std::string& path, uint64_t max_bytes) {
  TS_ASSIGN_OR_RETURN(const MappedFile file, MappedFile::open(path));  // refuses what is not a regular file
  const auto bytes = file.bytes();
  if (bytes.size() > max_bytes)
    return Status::invalid_input(path + ": " + std::to_string(bytes.size()) + " bytes, more than the " +
                                 std::to_string(max_bytes >> 20) + " MiB such a file may hold");
  return std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

}  // namespace tessera
