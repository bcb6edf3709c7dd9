// The weight-shipping manifest (--ship-weights) that a stage's setup message
// carries (control_frame.h), and its checks on the stage side. The coordinator
// writes it and streams the weights (pipeline/weight_shipping.h).
//
//   {"config": <config.json>, "tensors": [[name, dtype, [dims...], group], ...]}
//
// in stream order: first the tensors outside the layers (embedding, final norm,
// LM head), if the stage has any, then one group per layer, numbered from 0
// without gaps. Each group travels as one layer payload (layer_payload.h) whose
// bytes are the group's tensors back to back, in one dtype.
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tessera::wire {

// One tensor of the manifest, and the groups in stream order, after every
// check: each field present and typed, a known dtype, dims whose byte count
// does not overflow, unique names, groups numbered from 0 in order with one
// dtype each, and all the bytes together within max_bytes.
struct ShipTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};
Result<std::vector<std::vector<ShipTensor>>> check_manifest(const nlohmann::json& manifest, uint64_t max_bytes);

}  // namespace tessera::wire
