// Writes NumPy .npy files (format version 1.0), for logits handed to Python.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"

namespace tessera {

// Writes f32 `values` with `shape` (little-endian '<f4', C order) to `path`.
Status write_npy_f32(const std::string& path, std::span<const float> values, const std::vector<int64_t>& shape);

}  // namespace tessera
