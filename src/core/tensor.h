// TensorView: a non-owning view of a dense, row-major tensor (weights in a
// memory map, activations in a buffer). The shape is outermost first, as in
// PyTorch: a Linear weight is [out_features, in_features].
#pragma once

#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace tessera {

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  // 1: row-major. g > 1: a 2-D weight's rows in groups of g whose 64-byte lines alternate;
  // cpu::kColumns (negative): groups of 16 rows whose units of k alternate
  // (backend/cpu/weight_layout.h), as CpuDevice::place lays weights out for its matmuls.
  int64_t row_group = 1;

  int64_t numel() const { return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>()); }
  size_t nbytes() const { return dtype_bytes(dtype, numel()); }  // whole blocks for quantized types
  int64_t dim(int i) const { return shape.at(static_cast<size_t>(i)); }
  bool empty() const { return data == nullptr; }
};

std::string shape_string(const std::vector<int64_t>& shape);  // "[64, 512]"

}  // namespace tessera
