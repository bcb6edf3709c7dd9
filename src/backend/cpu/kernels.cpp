// Highway compiles this file once per target ISA (foreach_target.h re-includes
// it); HWY_DYNAMIC_DISPATCH picks the best one for the running CPU.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cpu/kernels.h"
#include "core/check.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;

// Loads Lanes(DF) weights starting at element i of a row, as f32.
template <typename WT>
HWY_INLINE hn::Vec<DF> load_w(DF df, const WT* HWY_RESTRICT row, int64_t i) {
  if constexpr (std::is_same_v<WT, float>) {
    return hn::LoadU(df, row + i);
  } else {
    const hn::Rebind<WT, DF> dw;
    return hn::PromoteTo(df, hn::LoadU(dw, row + i));
  }
}

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

// One tile: kRows weight rows x kTok tokens, kRows * kTok accumulators kept in registers.
template <int kRows, int kTok, typename WT>
HWY_INLINE void tile(const float* HWY_RESTRICT x, int64_t k, const WT* HWY_RESTRICT w, float* HWY_RESTRICT y,
                     int64_t ldy) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  hn::Vec<DF> acc[kRows][kTok];
  for (int r = 0; r < kRows; ++r)
    for (int t = 0; t < kTok; ++t) acc[r][t] = hn::Zero(df);
  int64_t i = 0;
  for (; i + lanes <= k; i += lanes) {
    hn::Vec<DF> xv[kTok];
    for (int t = 0; t < kTok; ++t) xv[t] = hn::LoadU(df, x + t * k + i);
    for (int r = 0; r < kRows; ++r) {
      const auto wv = load_w(df, w + r * k, i);
      for (int t = 0; t < kTok; ++t) acc[r][t] = hn::MulAdd(wv, xv[t], acc[r][t]);
    }
  }
  for (int r = 0; r < kRows; ++r) {
    for (int t = 0; t < kTok; ++t) {
      float sum = hn::GetLane(hn::SumOfLanes(df, acc[r][t]));
      for (int64_t j = i; j < k; ++j) sum += w_scalar(w + r * k, j) * x[t * k + j];
      y[t * ldy + r] = sum;
    }
  }
}

template <typename WT>
void matmul_typed(const float* HWY_RESTRICT x, int64_t tokens, int64_t k, const WT* HWY_RESTRICT w, int64_t rows,
                  float* HWY_RESTRICT y, int64_t ldy) {
  // Tokens are taken in blocks that stay in L2 while every row passes over them. A tile
  // holds 4 x kTok accumulators: 16 of 32 registers with AVX-512, 12 of 16 with AVX2.
  constexpr int64_t kTokenBlock = 64;
  constexpr int kTok = HWY_MAX_BYTES >= 64 ? 4 : 3;
  for (int64_t t0 = 0; t0 < tokens; t0 += kTokenBlock) {
    const int64_t t1 = std::min(tokens, t0 + kTokenBlock);
    int64_t r = 0;
    if (t1 - t0 == 1) {  // decode: sixteen weight rows in flight per thread keep more memory reads outstanding
      for (; r + 16 <= rows; r += 16) tile<16, 1>(x + t0 * k, k, w + r * k, y + t0 * ldy + r, ldy);
    }
    for (; r + 4 <= rows; r += 4) {
      const WT* wr = w + r * k;
      int64_t t = t0;
      for (; t + kTok <= t1; t += kTok) tile<4, kTok>(x + t * k, k, wr, y + t * ldy + r, ldy);
      for (; t < t1; ++t) tile<4, 1>(x + t * k, k, wr, y + t * ldy + r, ldy);
    }
    for (; r < rows; ++r)
      for (int64_t t = t0; t < t1; ++t) tile<1, 1>(x + t * k, k, w + r * k, y + t * ldy + r, ldy);
  }
}

void MatmulRows(const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t rows, float* y,
                int64_t ldy) {
  switch (w_dtype) {
    case DType::kF32: return matmul_typed(x, tokens, k, static_cast<const float*>(w), rows, y, ldy);
    case DType::kBF16: return matmul_typed(x, tokens, k, static_cast<const hwy::bfloat16_t*>(w), rows, y, ldy);
    case DType::kF16: return matmul_typed(x, tokens, k, static_cast<const hwy::float16_t*>(w), rows, y, ldy);
    default: TS_CHECK(false, "matmul weight dtype ", dtype_name(w_dtype));
  }
}

float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  auto acc0 = hn::Zero(df);
  auto acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
    acc1 = hn::MulAdd(hn::LoadU(df, a + i + lanes), hn::LoadU(df, b + i + lanes), acc1);
  }
  for (; i + lanes <= n; i += lanes) acc0 = hn::MulAdd(hn::LoadU(df, a + i), hn::LoadU(df, b + i), acc0);
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void Axpy(float a, const float* HWY_RESTRICT x, float* HWY_RESTRICT y, int64_t n) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto av = hn::Set(df, a);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::MulAdd(av, hn::LoadU(df, x + i), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] += a * x[i];
}

template <typename XT>
void axpy_typed(float a, const XT* HWY_RESTRICT x, float* HWY_RESTRICT y, int64_t n) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto av = hn::Set(df, a);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::MulAdd(av, load_w(df, x, i), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] += a * w_scalar(x, i);
}

void AxpyAs(float a, const void* x, DType dtype, float* y, int64_t n) {
  switch (dtype) {
    case DType::kF32: return axpy_typed(a, static_cast<const float*>(x), y, n);
    case DType::kBF16: return axpy_typed(a, static_cast<const hwy::bfloat16_t*>(x), y, n);
    case DType::kF16: return axpy_typed(a, static_cast<const hwy::float16_t*>(x), y, n);
    default: TS_CHECK(false, "axpy dtype ", dtype_name(dtype));
  }
}

template <typename WT>
void to_f32_typed(const WT* HWY_RESTRICT src, int64_t n, float* HWY_RESTRICT dst) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(load_w(df, src, i), df, dst + i);
  for (; i < n; ++i) dst[i] = w_scalar(src, i);
}

void ToF32(const void* src, DType dtype, int64_t n, float* dst) {
  switch (dtype) {
    case DType::kF32: return to_f32_typed(static_cast<const float*>(src), n, dst);
    case DType::kBF16: return to_f32_typed(static_cast<const hwy::bfloat16_t*>(src), n, dst);
    case DType::kF16: return to_f32_typed(static_cast<const hwy::float16_t*>(src), n, dst);
    default: TS_CHECK(false, "to_f32 dtype ", dtype_name(dtype));
  }
}

uint64_t ReadSum(const uint64_t* HWY_RESTRICT data, int64_t n) {
  // Four streams at once, as a matmul tile reads four weight rows: one stream per
  // core leaves memory bandwidth unused.
  const hn::ScalableTag<uint64_t> du;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(du));
  const int64_t quarter = n / 4 / lanes * lanes;
  const uint64_t* s0 = data;
  const uint64_t* s1 = data + quarter;
  const uint64_t* s2 = data + 2 * quarter;
  const uint64_t* s3 = data + 3 * quarter;
  auto acc0 = hn::Zero(du), acc1 = hn::Zero(du), acc2 = hn::Zero(du), acc3 = hn::Zero(du);
  for (int64_t i = 0; i < quarter; i += lanes) {
    acc0 = hn::Add(acc0, hn::LoadU(du, s0 + i));
    acc1 = hn::Add(acc1, hn::LoadU(du, s1 + i));
    acc2 = hn::Add(acc2, hn::LoadU(du, s2 + i));
    acc3 = hn::Add(acc3, hn::LoadU(du, s3 + i));
  }
  uint64_t sum = hn::GetLane(hn::SumOfLanes(du, hn::Add(hn::Add(acc0, acc1), hn::Add(acc2, acc3))));
  for (int64_t i = 4 * quarter; i < n; ++i) sum += data[i];
  return sum;
}

const char* IsaName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace tessera::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(MatmulRows);
HWY_EXPORT(Dot);
HWY_EXPORT(Axpy);
HWY_EXPORT(AxpyAs);
HWY_EXPORT(ToF32);
HWY_EXPORT(ReadSum);
HWY_EXPORT(IsaName);

void matmul_rows(const float* x, int64_t tokens, int64_t k, const void* w, DType w_dtype, int64_t rows, float* y,
                 int64_t ldy) {
  HWY_DYNAMIC_DISPATCH(MatmulRows)(x, tokens, k, w, w_dtype, rows, y, ldy);
}
float dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(Dot)(a, b, n); }
void axpy(float a, const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(Axpy)(a, x, y, n); }
void axpy(float a, const void* x, DType x_dtype, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyAs)(a, x, x_dtype, y, n);
}
void to_f32(const void* src, DType dtype, int64_t n, float* dst) { HWY_DYNAMIC_DISPATCH(ToF32)(src, dtype, n, dst); }
uint64_t read_sum(const uint64_t* data, int64_t n) { return HWY_DYNAMIC_DISPATCH(ReadSum)(data, n); }
const char* isa_name() { return HWY_DYNAMIC_DISPATCH(IsaName)(); }

void from_f32(const float* src, int64_t n, DType dtype, void* dst) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
      return;
    default: TS_CHECK(false, "from_f32 dtype ", dtype_name(dtype));
  }
}

}  // namespace tessera::cpu
#endif  // HWY_ONCE
