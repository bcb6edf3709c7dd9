// ggml's reference activation quantizers (quant_act.h), in ISO C++ f32.
#include "backend/cpu/quant_act.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/dtype.h"

namespace tessera::cpu {
namespace {

// ggml's nearest_int: round half to even through the f32 mantissa (|value| <= 4194303).
int nearest_int(float value) {
  const float shifted = value + 12582912.f;
  int32_t bits = 0;
  std::memcpy(&bits, &shifted, sizeof bits);
  return (bits & 0x007fffff) - 0x00400000;
}

// std::round (half away from zero) of a finite v with |v| < 2^31, without a call: the
// conversion truncates, and v minus its integer part is exact, so the fraction says
// which way a value rounds. The same integer as std::round for every such float
// (checked against it for every float with |v| <= 256 when this was written).
int round_away(float v) {
  const int t = static_cast<int>(v);
  const float fraction = v - static_cast<float>(t);
  return t + (fraction >= 0.5f) - (fraction <= -0.5f);
}

// A rounded value as int8; NaN (only from a non-finite block) as 0.
int8_t to_i8(float rounded) { return std::isnan(rounded) ? int8_t{0} : static_cast<int8_t>(rounded); }

bool all_finite(const float* x, int n) {
  for (int j = 0; j < n; ++j)
    if (!std::isfinite(x[j])) return false;
  return true;
}

}  // namespace

void quantize_q8_0(const float* x, int64_t k, Q8Block* out) {
  TS_CHECK(k % 32 == 0, "q8_0 activations of ", k, " elements");
  for (int64_t b = 0; b < k / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const float a = std::fabs(x[j]);
      amax = amax > a ? amax : a;  // ggml's MAX(amax, fabsf(v))
    }
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const bool finite = all_finite(x, 32);
    out[b].d = finite ? f16_to_f32(f32_to_f16(d)) : std::nanf("");
    if (finite && std::isfinite(id)) {  // |x[j] * id| <= 127 (plus rounding)
      for (int j = 0; j < 32; ++j) out[b].qs[j] = static_cast<int8_t>(round_away(x[j] * id));
    } else {
      for (int j = 0; j < 32; ++j) out[b].qs[j] = to_i8(std::round(x[j] * id));  // ties away from zero
    }
  }
}

void quantize_q8_K(const float* x, int64_t k, Q8KBlock* out) {
  TS_CHECK(k % 256 == 0, "q8_K activations of ", k, " elements");
  for (int64_t b = 0; b < k / 256; ++b, x += 256) {
    Q8KBlock& y = out[b];
    float max = 0.0f, amax = 0.0f;
    for (int j = 0; j < 256; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0.0f && all_finite(x, 256)) {
      y = Q8KBlock{};
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < 256; ++j) {
      const float v = iscale * x[j];
      // nearest_int needs |v| <= 4194303: true for finite x (|v| <= 127); a non-finite v
      // (only from a non-finite row) is taken as 0.
      const int q = std::isfinite(v) ? nearest_int(v) : 0;
      y.qs[j] = static_cast<int8_t>(q < 127 ? q : 127);
    }
    for (int j = 0; j < 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y.qs[16 * j + i];
      y.bsums[j] = static_cast<int16_t>(sum);
    }
    y.d = all_finite(x, 256) ? 1.0f / iscale : std::nanf("");
  }
}

}  // namespace tessera::cpu
