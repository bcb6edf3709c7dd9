// Loads of f32, bf16 or f16 elements as f32 vectors, for the per-target kernel files
// (kernels.cpp, matmul.cpp). Highway's per-target header pattern: included once per
// target from inside foreach_target.h's loop, after hwy/highway.h.
#if defined(TESSERA_BACKEND_CPU_WIDEN_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TESSERA_BACKEND_CPU_WIDEN_INL_H_
#undef TESSERA_BACKEND_CPU_WIDEN_INL_H_
#else
#define TESSERA_BACKEND_CPU_WIDEN_INL_H_
#endif

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Lanes(DF) elements of a row starting at element i, widened to f32 (exactly).
template <typename WT>
HWY_INLINE VF load_w(DF df, const WT* HWY_RESTRICT row, int64_t i) {
  if constexpr (std::is_same_v<WT, float>) {
    return hn::LoadU(df, row + i);
  } else {
    const hn::Rebind<WT, DF> dw;
    return hn::PromoteTo(df, hn::LoadU(dw, row + i));
  }
}

// Element i of a row as f32.
template <typename WT>
HWY_INLINE float w_scalar(const WT* row, int64_t i) {
  if constexpr (std::is_same_v<WT, float>) {
    return row[i];
  } else if constexpr (std::is_same_v<WT, hwy::bfloat16_t>) {
    return bf16_to_f32(row[i].bits);
  } else {
    return f16_to_f32(row[i].bits);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace tessera::cpu
HWY_AFTER_NAMESPACE();

#endif  // TESSERA_BACKEND_CPU_WIDEN_INL_H_
