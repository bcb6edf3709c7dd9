#include "collective/tcp/sum.h"

#include <cstring>

#include "core/check.h"

namespace tessera::collective {
namespace {

template <typename Convert>
void accumulate_16(std::span<float> acc, std::span<const uint8_t> x, bool first, Convert convert) {
  for (size_t i = 0; i < acc.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, x.data() + 2 * i, 2);
    acc[i] = first ? convert(bits) : acc[i] + convert(bits);
  }
}

}  // namespace

void accumulate(std::span<float> acc, std::span<const uint8_t> x, DType dtype, bool first) {
  TS_CHECK_EQ(x.size(), acc.size() * dtype_size(dtype));
  switch (dtype) {
    case DType::kF32:
      if (first) {
        if (!acc.empty()) std::memcpy(acc.data(), x.data(), x.size());
        return;
      }
      for (size_t i = 0; i < acc.size(); ++i) {
        float v;
        std::memcpy(&v, x.data() + 4 * i, 4);
        acc[i] += v;
      }
      return;
    case DType::kBF16: return accumulate_16(acc, x, first, bf16_to_f32);
    case DType::kF16: return accumulate_16(acc, x, first, f16_to_f32);
    default: TS_CHECK(false, "dtype ", dtype_name(dtype), " cannot be summed");
  }
}

void store(std::span<const float> acc, std::span<uint8_t> out, DType dtype) {
  TS_CHECK_EQ(out.size(), acc.size() * dtype_size(dtype));
  switch (dtype) {
    case DType::kF32:
      if (!acc.empty()) std::memcpy(out.data(), acc.data(), out.size());
      return;
    case DType::kBF16:
    case DType::kF16:
      for (size_t i = 0; i < acc.size(); ++i) {
        const uint16_t bits = dtype == DType::kBF16 ? f32_to_bf16(acc[i]) : f32_to_f16(acc[i]);
        std::memcpy(out.data() + 2 * i, &bits, 2);
      }
      return;
    default: TS_CHECK(false, "dtype ", dtype_name(dtype), " cannot be stored from f32");
  }
}

}  // namespace tessera::collective
