#include "backend/device.h"

#include <charconv>

namespace tessera {

Result<std::unique_ptr<Device>> make_device(std::string_view name, size_t cpu_threads) {
  if (name == "cpu") return make_cpu_device(cpu_threads);
  if (name == "cuda") return make_cuda_device(0);
  if (name.starts_with("cuda:")) {
    int ordinal = -1;
    const auto digits = name.substr(5);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), ordinal);
    if (ec == std::errc() && end == digits.data() + digits.size() && ordinal >= 0) return make_cuda_device(ordinal);
  }
  return Status::invalid_input("unknown device '" + std::string(name) + "' (expected cpu, cuda or cuda:N)");
}

}  // namespace tessera
