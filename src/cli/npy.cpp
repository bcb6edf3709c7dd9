#include "cli/npy.h"

#include <cerrno>
#include <cstring>
#include <fstream>

namespace tessera {

Status write_npy_f32(const std::string& path, std::span<const float> values, const std::vector<int64_t>& shape) {
  std::string dims;
  for (const int64_t d : shape) dims += std::to_string(d) + ", ";
  if (shape.size() > 1) dims.resize(dims.size() - 2);  // "(3,)" for rank 1, "(3, 4)" otherwise
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Magic (6) + version (2) + header length (2) + header + '\n' is a multiple of 64.
  header.append(63 - (10 + header.size()) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  if (!out) return Status::invalid_input(path + ": cannot write: " + std::strerror(errno));
  const auto header_len = static_cast<uint16_t>(header.size());
  const char preamble[10] = {
      '\x93', 'N', 'U', 'M', 'P', 'Y', 1, 0, static_cast<char>(header_len & 0xff), static_cast<char>(header_len >> 8)};
  out.write(preamble, sizeof preamble);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size_bytes()));
  if (!out) return Status::internal(path + ": write failed");
  return {};
}

}  // namespace tessera
