// Blockwise int8/int4 codec (layout in quant.h).
#include "wire/quant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "core/check.h"
#include "wire/byte_io.h"
#include "wire/encoding.h"

namespace tessera::wire {

namespace {

constexpr uint64_t kScaleBytes = 4;

float load_element(DType dtype, const uint8_t* p) {
  switch (dtype) {
    case DType::kF32: return std::bit_cast<float>(get_u32({p, 4}, 0));
    case DType::kF16: return f16_to_f32(get_u16({p, 2}, 0));
    case DType::kBF16: return bf16_to_f32(get_u16({p, 2}, 0));
    default: TS_CHECK(false, "not a float dtype: ", dtype_name(dtype));
  }
  return 0;
}

// Writes one decoded element little-endian.
void store_element(DType dtype, float value, uint8_t* p) {
  uint32_t bits = 0;
  switch (dtype) {
    case DType::kF32: bits = std::bit_cast<uint32_t>(value); break;
    case DType::kF16: bits = f32_to_f16(value); break;
    case DType::kBF16: bits = f32_to_bf16(value); break;
    default: TS_CHECK(false, "not a float dtype: ", dtype_name(dtype));
  }
  for (size_t i = 0; i < dtype_size(dtype); ++i) p[i] = static_cast<uint8_t>(bits >> (8 * i));
}

uint64_t block_bytes(int bits, uint64_t group) { return kScaleBytes + (bits == 8 ? group : group / 2); }

}  // namespace

bool is_valid_group_size(uint64_t group) { return group == 32 || group == 64 || group == 128; }

std::optional<uint64_t> quantized_bytes(uint64_t numel, int bits, uint64_t group) {
  TS_CHECK(is_valid_group_size(group) && (bits == 8 || bits == 4), "group=", group, " bits=", bits);
  if (numel % group != 0) return std::nullopt;
  // (numel / group) * block <= numel * 5 for these groups: no overflow once numel < 2^61.
  uint64_t out = 0;
  if (!checked_mul(numel / group, block_bytes(bits, group), &out)) return std::nullopt;
  return out;
}

std::vector<uint8_t> quantize(DType dtype, std::span<const uint8_t> values, int bits, uint16_t group) {
  TS_CHECK(is_float(dtype), dtype_name(dtype));
  const size_t esize = dtype_size(dtype);
  TS_CHECK(values.size() % esize == 0, "bytes=", values.size());
  const uint64_t numel = values.size() / esize;
  const std::optional<uint64_t> size = quantized_bytes(numel, bits, group);
  TS_CHECK(size.has_value(), "numel=", numel, " group=", group);
  const float qmax = bits == 8 ? 127.0f : 7.0f;
  std::vector<uint8_t> out;
  out.reserve(*size);
  std::vector<float> x(group);
  for (uint64_t g = 0; g < numel / group; ++g) {
    float amax = 0;
    for (size_t i = 0; i < group; ++i) {
      x[i] = load_element(dtype, values.data() + (g * group + i) * esize);
      amax = std::max(amax, std::fabs(x[i]));
    }
    const float scale = amax / qmax;
    const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
    put_u32(out, std::bit_cast<uint32_t>(scale));
    auto q = [&](size_t i) {
      const float v = std::nearbyint(x[i] * inverse);
      return std::isnan(v) ? 0 : static_cast<int>(std::clamp(v, -qmax, qmax));
    };
    if (bits == 8) {
      for (size_t i = 0; i < group; ++i) out.push_back(static_cast<uint8_t>(static_cast<int8_t>(q(i))));
    } else {
      for (size_t i = 0; i < group; i += 2) out.push_back(static_cast<uint8_t>((q(i) & 15) | (q(i + 1) & 15) << 4));
    }
  }
  TS_CHECK_EQ(out.size(), *size);
  return out;
}

Status dequantize(std::string_view name, std::span<const uint8_t> payload, int bits, uint16_t group, DType dtype,
                  std::span<uint8_t> out) {
  auto fail = [name](const std::string& what) {
    return Status::invalid_input(std::string(name) + " quantized payload: " + what);
  };
  if (!is_float(dtype)) return fail("dtype " + std::string(dtype_name(dtype)) + " not a float");
  if (bits != 8 && bits != 4) return fail(std::to_string(bits) + " bits not 8 or 4");
  if (!is_valid_group_size(group)) {
    return fail("group_size " + std::to_string(group) + " not 32, 64 or 128");
  }
  const size_t esize = dtype_size(dtype);
  if (out.size() % (esize * group) != 0) {
    return fail("decoded size " + std::to_string(out.size()) + " not whole groups of " + std::to_string(group) + " " +
                std::string(dtype_name(dtype)));
  }
  const uint64_t numel = out.size() / esize;
  const uint64_t expected = *quantized_bytes(numel, bits, group);
  if (payload.size() != expected) {
    return fail(std::to_string(payload.size()) + " bytes != expected " + std::to_string(expected) + " for " +
                std::to_string(numel) + " elements");
  }
  const uint64_t block = block_bytes(bits, group);
  for (uint64_t g = 0; g < numel / group; ++g) {
    const std::span<const uint8_t> b = payload.subspan(g * block, block);
    const float scale = std::bit_cast<float>(get_u32(b, 0));
    uint8_t* dst = out.data() + g * group * esize;
    if (bits == 8) {
      for (size_t i = 0; i < group; ++i) {
        store_element(dtype, scale * static_cast<float>(static_cast<int8_t>(b[kScaleBytes + i])), dst + i * esize);
      }
    } else {
      for (size_t i = 0; i < group; ++i) {
        const uint8_t byte = b[kScaleBytes + i / 2];
        const int nibble = (i % 2 == 0) ? (byte & 15) : (byte >> 4);
        const int q = nibble >= 8 ? nibble - 16 : nibble;
        store_element(dtype, scale * static_cast<float>(q), dst + i * esize);
      }
    }
  }
  return {};
}

}  // namespace tessera::wire
