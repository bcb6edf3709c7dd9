#include "wire/ship_manifest.h"

#include <algorithm>
#include <optional>
#include <set>

#include "wire/byte_io.h"

namespace tessera::wire {

using json = nlohmann::json;

Result<std::vector<std::vector<ShipTensor>>> check_manifest(const json& manifest, uint64_t max_bytes) {
  if (!manifest.is_object() || !manifest.contains("tensors") || !manifest["tensors"].is_array() ||
      !manifest.contains("config") || !manifest["config"].is_object()) {
    return Status::invalid_input("ship manifest: expected {\"config\": {...}, \"tensors\": [...]}");
  }
  std::vector<std::vector<ShipTensor>> groups;
  std::set<std::string> names;
  for (const json& entry : manifest["tensors"]) {
    const std::string at = "ship manifest tensor " + std::to_string(names.size()) + ": ";
    if (!entry.is_array() || entry.size() != 4 || !entry[0].is_string() || !entry[1].is_string() ||
        !entry[2].is_array() || !entry[3].is_number_unsigned()) {
      return Status::invalid_input(at + "expected [name, dtype, [dims], group]");
    }
    ShipTensor tensor;
    tensor.name = entry[0];
    if (tensor.name.empty() || !names.insert(tensor.name).second)
      return Status::invalid_input(at + "empty or repeated name");
    std::optional<DType> dtype = dtype_from_safetensors(entry[1].get<std::string>());
    if (!dtype) return Status::invalid_input(at + "unknown dtype");
    tensor.dtype = *dtype;
    uint64_t elements = 1;
    for (const json& dim : entry[2]) {
      if (!dim.is_number_unsigned() || !wire::checked_mul(elements, dim.get<uint64_t>(), &elements)) {
        return Status::invalid_input(at + "bad dims");
      }
      tensor.shape.push_back(dim.get<int64_t>());
    }
    const std::optional<uint64_t> bytes = tensor_bytes(tensor.dtype, tensor.shape);
    if (!bytes) {
      return Status::invalid_input(
          at + "bad dims for " + std::string(dtype_name(tensor.dtype)) + ": " +
          (dtype_is_quantized(tensor.dtype)
               ? "rows of whole blocks of " + std::to_string(dtype_block_elements(tensor.dtype)) + " elements, and "
               : "") +
          "a byte count within 64 bits");
    }
    tensor.bytes = *bytes;
    if (tensor.bytes > max_bytes) {
      return Status::invalid_input(at + "larger than the stage's bound of " + std::to_string(max_bytes) + " bytes");
    }
    const uint64_t group = entry[3];
    if (group > groups.size() || (group + 1 < groups.size())) {
      return Status::invalid_input(at + "group " + std::to_string(group) + " out of order");
    }
    if (group == groups.size()) groups.emplace_back();
    groups[group].push_back(std::move(tensor));
  }
  if (groups.empty()) return Status::invalid_input("ship manifest: no tensors");
  for (size_t g = 0; g < groups.size(); ++g) {
    std::vector<DType> dtypes;
    for (const ShipTensor& t : groups[g]) dtypes.push_back(t.dtype);
    if (!payload_dtype(dtypes)) {
      return Status::invalid_input("ship manifest group " + std::to_string(g) +
                                   ": a group holds one dtype, or quantized blocks beside plain tensors");
    }
  }
  uint64_t total = 0;  // all of it must fit the same bound: many small groups cannot add up past it
  for (const auto& group : groups) {
    for (const ShipTensor& t : group) {
      if (!wire::checked_add(total, t.bytes, &total) || total > max_bytes) {
        return Status::invalid_input("ship: the weights exceed the stage's bound of " + std::to_string(max_bytes) +
                                     " bytes");
      }
    }
  }
  return groups;
}

std::optional<DType> payload_dtype(std::span<const DType> dtypes) {
  if (std::any_of(dtypes.begin(), dtypes.end(), dtype_is_quantized)) return DType::kU8;
  if (dtypes.empty() || std::any_of(dtypes.begin(), dtypes.end(), [&](DType d) { return d != dtypes.front(); }))
    return std::nullopt;
  return dtypes.front();
}

}  // namespace tessera::wire
