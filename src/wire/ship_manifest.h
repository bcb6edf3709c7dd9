// The weight-shipping manifest (--ship-weights) that a stage's setup message
// carries (control_frame.h), and its checks on the stage side. The coordinator
// writes it and streams the weights (pipeline/weight_shipping.h).
//
//   {"config": <config.json>, "tensors": [[name, dtype, [dims...], group], ...]}
//
// in stream order: first the tensors outside the layers (embedding, final norm,
// LM head), if the stage has any, then one group per layer, numbered from 0
// without gaps. Each group travels as one layer payload (layer_payload.h) whose
// bytes are the group's tensors back to back: in their one dtype, or, for a
// group that holds GGUF quantized blocks ("Q8_0", "Q4_0", "Q4_K", "Q5_K",
// "Q6_K", beside plain tensors of any dtype: a layer of a Q4_K_M file has f32
// norms, q4_k and q6_k matrices), as u8 bytes that the manifest's dtypes and
// dims alone give meaning to. Blocks are never re-encoded (no INT8/INT4).
//
// Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace tessera::wire {

// One tensor of the manifest, and the groups in stream order, after every
// check: each field present and typed, a known dtype, dims whose byte count
// does not overflow (rows of whole blocks for a quantized dtype), unique names,
// groups numbered from 0 in order with a payload dtype each, and all the bytes
// together within max_bytes.
struct ShipTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};
Result<std::vector<std::vector<ShipTensor>>> check_manifest(const nlohmann::json& manifest, uint64_t max_bytes);

// The dtype a group's payload travels as (the layer chunks' dtype): u8 when the
// group holds a quantized dtype, else the group's one dtype; nullopt for plain
// tensors of two dtypes, or none.
std::optional<DType> payload_dtype(std::span<const DType> dtypes);

}  // namespace tessera::wire
