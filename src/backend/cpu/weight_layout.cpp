#include "backend/cpu/weight_layout.h"

#include <cstring>

#include "backend/cpu/kernels.h"
#include "core/check.h"

namespace tessera::cpu {

bool can_interleave(DType dtype, int64_t rows, int64_t k, int64_t group) {
  const bool plain = dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16;
  return plain && (group == 4 || group == 8 || group == 16) && rows > 0 && rows % group == 0 &&
         static_cast<int64_t>(dtype_size(dtype)) * k % kLineBytes == 0;
}

void interleave_rows(const void* src, DType dtype, int64_t k, int64_t group, int64_t begin, int64_t end, void* dst) {
  TS_CHECK(begin % group == 0 && end % group == 0, "[cpu] interleaving rows [", begin, ", ", end, ") in groups of ",
           group);
  const int64_t row_bytes = static_cast<int64_t>(dtype_size(dtype)) * k, lines = row_bytes / kLineBytes;
  const auto* in = static_cast<const uint8_t*>(src);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g = begin; g < end; g += group) {
    uint8_t* block = out + g * row_bytes;
    for (int64_t r = 0; r < group; ++r) {
      const uint8_t* row = in + (g + r) * row_bytes;
      for (int64_t j = 0; j < lines; ++j)
        std::memcpy(block + (j * group + r) * kLineBytes, row + j * kLineBytes, kLineBytes);
    }
  }
}

void interleaved_row_to_f32(const void* w, DType dtype, int64_t k, int64_t group, int64_t r, float* out) {
  const auto size = static_cast<int64_t>(dtype_size(dtype));
  const int64_t line = kLineBytes / size;
  const auto* row = static_cast<const uint8_t*>(w) + (r / group * group * k + r % group * line) * size;
  for (int64_t i = 0; i < k; i += line) to_f32(row + i * group * size, dtype, line, out + i);
}

}  // namespace tessera::cpu
