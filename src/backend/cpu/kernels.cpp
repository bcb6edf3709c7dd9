// Highway compiles this file once per target ISA (foreach_target.h re-includes
// it); HWY_DYNAMIC_DISPATCH picks the best one for the running CPU.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/kernels.cpp"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include "hwy/contrib/math/math-inl.h"  // after highway.h, once a target

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "backend/cpu/kernels.h"
#include "backend/cpu/widen-inl.h"
#include "core/check.h"

HWY_BEFORE_NAMESPACE();
namespace tessera::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

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

// a * x + y as MulAdd gives it on this target, for the scalar tails beside its vectors: fused
// where the target has FMA, else a product and a sum each rounded (SSSE3, SSE4), so that an
// element's bits do not depend on whether a vector or the tail takes it.
HWY_INLINE float mul_add(float a, float x, float y) {
#if HWY_NATIVE_FMA
  return std::fma(a, x, y);
#else
  const float product = a * x;  // (no FMA on the target to contract it into)
  return product + y;
#endif
}

template <typename XT>
void axpy_typed(float a, const XT* HWY_RESTRICT x, float* HWY_RESTRICT y, int64_t n) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const auto av = hn::Set(df, a);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(hn::MulAdd(av, load_w(df, x, i), hn::LoadU(df, y + i)), df, y + i);
  for (; i < n; ++i) y[i] = mul_add(a, w_scalar(x, i), y[i]);
}

void AxpyAs(float a, const void* x, DType dtype, float* y, int64_t n) {
  switch (dtype) {
    case DType::kF32: return axpy_typed(a, static_cast<const float*>(x), y, n);
    case DType::kBF16: return axpy_typed(a, static_cast<const hwy::bfloat16_t*>(x), y, n);
    case DType::kF16: return axpy_typed(a, static_cast<const hwy::float16_t*>(x), y, n);
    default: TS_CHECK(false, "axpy dtype ", dtype_name(dtype));
  }
}

// Columns [i, i + kGroup vectors) of kM rows of y (ldy apart; their a rows lda apart) in
// axpy_rows: kM x kGroup vectors of y held in registers across the rows of x, as many chains
// of multiply-adds side by side, each vector of x loaded once for the kM rows.
template <int kM, int kGroup, typename XT>
HWY_INLINE void axpy_columns(const float* HWY_RESTRICT a, int64_t lda, const XT* HWY_RESTRICT x, int64_t ldx,
                             int64_t rows, float* HWY_RESTRICT y, int64_t ldy, int64_t i, const Ahead& ahead) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  VF acc[kM][kGroup];
  for (int j = 0; j < kM; ++j)
    for (int v = 0; v < kGroup; ++v) acc[j][v] = hn::LoadU(df, y + j * ldy + i + v * lanes);
  size_t asked = 0;
  for (int64_t r = 0; r < rows; ++r) {
    ask_ahead(ahead, asked, r + 1, rows);
    VF xv[kGroup];
    for (int v = 0; v < kGroup; ++v) xv[v] = load_w(df, x + r * ldx, i + v * lanes);
    for (int j = 0; j < kM; ++j) {
      const auto av = hn::Set(df, a[j * lda + r]);
      for (int v = 0; v < kGroup; ++v) acc[j][v] = hn::MulAdd(av, xv[v], acc[j][v]);
    }
  }
  for (int j = 0; j < kM; ++j)
    for (int v = 0; v < kGroup; ++v) hn::StoreU(acc[j][v], df, y + j * ldy + i + v * lanes);
}

// Vectors of y a target keeps in registers across the rows: 16 of AVX-512's 32, 8 of
// AVX2's 16 (the rest for x and a).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr int kAxpyRegisters = 16;
#else
constexpr int kAxpyRegisters = 8;
#endif

// kM rows of y: groups of kMost columns' vectors (at most 8, kAxpyRegisters in all), then
// one of 4, 2 and 1 as the columns left allow (a head of 64 on AVX-512 with 4 heads: one
// group of 4 vectors a head, 16 chains side by side), then the scalar tail.
// `ahead` asked for in the first pass over the rows (the first group of columns).
template <int kM, typename XT>
void axpy_rows_of(const float* HWY_RESTRICT a, int64_t lda, const XT* HWY_RESTRICT x, int64_t ldx, int64_t rows,
                  float* HWY_RESTRICT y, int64_t ldy, int64_t n, const Ahead& ahead) {
  constexpr int kMost = std::max(1, std::min(8, kAxpyRegisters / kM));
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  int64_t i = 0;
  const auto first = [&] { return i == 0 ? ahead : Ahead{}; };
  for (; i + kMost * lanes <= n; i += kMost * lanes) axpy_columns<kM, kMost>(a, lda, x, ldx, rows, y, ldy, i, first());
  if constexpr (kMost > 4) {
    if (i + 4 * lanes <= n) {
      axpy_columns<kM, 4>(a, lda, x, ldx, rows, y, ldy, i, first());
      i += 4 * lanes;
    }
  }
  if constexpr (kMost > 2) {
    if (i + 2 * lanes <= n) {
      axpy_columns<kM, 2>(a, lda, x, ldx, rows, y, ldy, i, first());
      i += 2 * lanes;
    }
  }
  if constexpr (kMost > 1) {
    if (i + lanes <= n) {
      axpy_columns<kM, 1>(a, lda, x, ldx, rows, y, ldy, i, first());
      i += lanes;
    }
  }
  for (int j = 0; j < kM; ++j)
    for (int64_t c = i; c < n; ++c)
      for (int64_t r = 0; r < rows; ++r)
        y[j * ldy + c] = mul_add(a[j * lda + r], w_scalar(x + r * ldx, c), y[j * ldy + c]);
}

// y_j += a_j[r] * x[r] for r = 0, 1, ..., rows - 1 and each of the m rows j of y, each
// element taking the rows in that order by the same multiply-add as axpy (so the same bits
// as `rows` axpy calls a row of y), 4 rows of y at a time, then 2, then 1.
template <typename XT>
void axpy_rows_typed(const float* HWY_RESTRICT a, int64_t lda, int64_t m, const XT* HWY_RESTRICT x, int64_t ldx,
                     int64_t rows, float* HWY_RESTRICT y, int64_t ldy, int64_t n, const Ahead& ahead) {
  int64_t j = 0;
  const auto first = [&] { return j == 0 ? ahead : Ahead{}; };
  for (; j + 4 <= m; j += 4) axpy_rows_of<4>(a + j * lda, lda, x, ldx, rows, y + j * ldy, ldy, n, first());
  if (j + 2 <= m) {
    axpy_rows_of<2>(a + j * lda, lda, x, ldx, rows, y + j * ldy, ldy, n, first());
    j += 2;
  }
  if (j < m) axpy_rows_of<1>(a + j * lda, lda, x, ldx, rows, y + j * ldy, ldy, n, first());
}

void AxpyRows(const float* a, int64_t lda, int64_t m, const void* x, DType dtype, int64_t ldx, int64_t rows, float* y,
              int64_t ldy, int64_t n, const Ahead& ahead) {
  switch (dtype) {
    case DType::kF32: return axpy_rows_typed(a, lda, m, static_cast<const float*>(x), ldx, rows, y, ldy, n, ahead);
    case DType::kBF16:
      return axpy_rows_typed(a, lda, m, static_cast<const hwy::bfloat16_t*>(x), ldx, rows, y, ldy, n, ahead);
    case DType::kF16:
      return axpy_rows_typed(a, lda, m, static_cast<const hwy::float16_t*>(x), ldx, rows, y, ldy, n, ahead);
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

// The first index of x's largest element, std::max_element's answer: the largest by
// vectors, then the first element equal to it. A row with a NaN or an infinity (x - x
// is not 0 in some lane) takes std::max_element itself, whose answer there depends on
// where the NaN sits.
int64_t Argmax(const float* HWY_RESTRICT x, int64_t n) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  if (n < lanes) return std::max_element(x, x + n) - x;
  VF best = hn::LoadU(df, x), finite = hn::Zero(df);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const VF v = hn::LoadU(df, x + i);
    best = hn::Max(best, v);
    finite = hn::Add(finite, hn::Sub(v, v));
  }
  float max = hn::GetLane(hn::MaxOfLanes(df, best));
  for (int64_t j = i; j < n; ++j) {
    if (x[j] - x[j] != 0.0f) return std::max_element(x, x + n) - x;
    max = std::max(max, x[j]);
  }
  if (!hn::AllTrue(df, hn::Eq(finite, hn::Zero(df)))) return std::max_element(x, x + n) - x;
  const VF target = hn::Set(df, max);
  for (i = 0; i + lanes <= n; i += lanes) {
    const intptr_t at = hn::FindFirstTrue(df, hn::Eq(hn::LoadU(df, x + i), target));
    if (at >= 0) return i + at;
  }
  return std::find(x + i, x + n, max) - x;
}

// Reads n words as kStreams streams at once, a vector of each in turn (one stream per
// core leaves memory bandwidth unused, and how many it takes differs between CPUs).
// Rows: blocks of kStreams consecutive rows of kRowWords words, the rows of a block side
// by side, as a decode tile reads 16-bit weight rows. Parts: one block of kStreams rows
// of n / kStreams words, so each stream is one long sequential read, as each of the
// quantized decode's streams is (quant_dot.cpp). Nothing is asked for ahead: on the
// AVX-512 dev VM that read slower (docs/benchmarks.md).
constexpr int64_t kRowWords = 512;  // 4 KiB: a bf16 row of 2048

template <int kStreams, bool kParts>
uint64_t read_sum_streams(const uint64_t* HWY_RESTRICT data, int64_t n) {
  const hn::ScalableTag<uint64_t> du;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(du));
  const int64_t row = kParts ? n / kStreams / lanes * lanes : kRowWords, block = kStreams * row;
  const int64_t end = kParts ? block : n / block * block;
  hn::Vec<decltype(du)> acc[kStreams];
  for (int s = 0; s < kStreams; ++s) acc[s] = hn::Zero(du);
  for (int64_t b = 0; b < end; b += block)
    for (int64_t i = 0; i < row; i += lanes)
      for (int s = 0; s < kStreams; ++s) acc[s] = hn::Add(acc[s], hn::LoadU(du, data + b + s * row + i));
  for (int s = 1; s < kStreams; ++s) acc[0] = hn::Add(acc[0], acc[s]);
  uint64_t sum = hn::GetLane(hn::SumOfLanes(du, acc[0]));
  for (int64_t i = end; i < n; ++i) sum += data[i];
  return sum;
}

uint64_t ReadSum(const uint64_t* HWY_RESTRICT data, int64_t n, int streams, ReadLayout layout) {
  if (layout == ReadLayout::kParts) {
    switch (streams) {
      case 1: return read_sum_streams<1, true>(data, n);
      case 2: return read_sum_streams<2, true>(data, n);
      case 4: return read_sum_streams<4, true>(data, n);
      default: TS_CHECK(false, "read_sum parts ", streams);
    }
  }
  switch (streams) {
    case 4: return read_sum_streams<4, false>(data, n);
    case 8: return read_sum_streams<8, false>(data, n);
    case 16: return read_sum_streams<16, false>(data, n);
    default: TS_CHECK(false, "read_sum streams ", streams);
  }
}

// x[i] = exp(x[i] * scale - max) / sum, max the largest x[i] * scale and sum that of
// the exponentials: attention's softmax over a head's scores. Highway's Exp (within
// 1 ULP of std::exp) on whole vectors and on the tail's lanes one at a time; the sum
// by lanes, then the lanes in order, then the tail: one order for every n.
void SoftmaxScaled(float* HWY_RESTRICT x, int64_t n, float scale) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df)), whole = n / lanes * lanes;
  const VF s = hn::Set(df, scale);
  VF top = hn::Set(df, -std::numeric_limits<float>::infinity());
  for (int64_t i = 0; i < whole; i += lanes) {
    const VF v = hn::Mul(hn::LoadU(df, x + i), s);
    hn::StoreU(v, df, x + i);
    top = hn::Max(top, v);
  }
  float max = hn::GetLane(hn::MaxOfLanes(df, top));
  for (int64_t i = whole; i < n; ++i) x[i] *= scale, max = std::max(max, x[i]);
  const VF m = hn::Set(df, max);
  VF sums = hn::Zero(df);
  for (int64_t i = 0; i < whole; i += lanes) {
    const VF e = hn::Exp(df, hn::Sub(hn::LoadU(df, x + i), m));
    hn::StoreU(e, df, x + i);
    sums = hn::Add(sums, e);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, sums));
  for (int64_t i = whole; i < n; ++i) {
    x[i] = hn::GetLane(hn::Exp(df, hn::Set(df, x[i] - max)));
    sum += x[i];
  }
  const VF inv = hn::Set(df, 1.0f / sum);
  for (int64_t i = 0; i < whole; i += lanes) hn::StoreU(hn::Mul(hn::LoadU(df, x + i), inv), df, x + i);
  for (int64_t i = whole; i < n; ++i) x[i] *= 1.0f / sum;
}

// out[i] = gate[i] / (1 + exp(-gate[i])) * up[i] (SiLU times up), Highway's Exp on whole
// vectors and on the tail's lanes one at a time: each element's bits depend on its
// inputs alone, not on where a call starts or ends.
void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const VF one = hn::Set(df, 1.0f);
  const auto silu = [&](VF g, VF u) { return hn::Mul(hn::Div(g, hn::Add(one, hn::Exp(df, hn::Neg(g)))), u); };
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(silu(hn::LoadU(df, gate + i), hn::LoadU(df, up + i)), df, out + i);
  for (; i < n; ++i) out[i] = hn::GetLane(silu(hn::Set(df, gate[i]), hn::Set(df, up[i])));
}

// kFmaChains independent chains of fused multiply-adds on registers only: enough
// chains to cover the FMA latency on every unit (4 cycles x 2 units on Zen 3 and
// Sapphire Rapids), few enough to stay in the 16 registers of AVX2.
constexpr int kFmaChains = 12;

float FmaLoop(int64_t iterations) {
  const DF df;
  VF acc[kFmaChains];
  for (int c = 0; c < kFmaChains; ++c) acc[c] = hn::Set(df, 1.0f + 0.001f * static_cast<float>(c));
  const VF m = hn::Set(df, 0.9999f);
  const VF a = hn::Set(df, 0.0001f);
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kFmaChains; ++c) acc[c] = hn::MulAdd(acc[c], m, a);
  VF sum = acc[0];
  for (int c = 1; c < kFmaChains; ++c) sum = hn::Add(sum, acc[c]);
  return hn::GetLane(hn::SumOfLanes(df, sum));
}

int64_t FmaLoopFlops(int64_t iterations) { return iterations * kFmaChains * static_cast<int64_t>(hn::Lanes(DF())) * 2; }

const char* IsaName() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace tessera::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace tessera::cpu {

HWY_EXPORT(Dot);
HWY_EXPORT(Axpy);
HWY_EXPORT(AxpyAs);
HWY_EXPORT(AxpyRows);
HWY_EXPORT(ToF32);
HWY_EXPORT(ReadSum);
HWY_EXPORT(Argmax);
HWY_EXPORT(SoftmaxScaled);
HWY_EXPORT(SiluMul);
HWY_EXPORT(FmaLoop);
HWY_EXPORT(FmaLoopFlops);
HWY_EXPORT(IsaName);

float dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(Dot)(a, b, n); }
void axpy(float a, const float* x, float* y, int64_t n) { HWY_DYNAMIC_DISPATCH(Axpy)(a, x, y, n); }
void axpy(float a, const void* x, DType x_dtype, float* y, int64_t n) {
  HWY_DYNAMIC_DISPATCH(AxpyAs)(a, x, x_dtype, y, n);
}
void axpy_rows(const float* a, int64_t lda, int64_t m, const void* x, DType x_dtype, int64_t ldx, int64_t rows,
               float* y, int64_t ldy, int64_t n, const Ahead& ahead) {
  HWY_DYNAMIC_DISPATCH(AxpyRows)(a, lda, m, x, x_dtype, ldx, rows, y, ldy, n, ahead);
}
void to_f32(const void* src, DType dtype, int64_t n, float* dst) { HWY_DYNAMIC_DISPATCH(ToF32)(src, dtype, n, dst); }
int64_t argmax(const float* x, int64_t n) { return HWY_DYNAMIC_DISPATCH(Argmax)(x, n); }
void softmax_scaled(float* x, int64_t n, float scale) { HWY_DYNAMIC_DISPATCH(SoftmaxScaled)(x, n, scale); }
void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SiluMul)(gate, up, n, out);
}
int64_t decode_prefetch_bytes(int64_t preferred) {
  static const int64_t asked = [] {  // -1: unset
    const char* text = std::getenv("TESSERA_DECODE_PREFETCH");
    return text == nullptr ? int64_t{-1} : std::max<int64_t>(0, std::strtoll(text, nullptr, 10));
  }();
  return asked < 0 ? preferred : asked;
}
int decode_tile_rows() {
  static const int rows = [] {
    const char* text = std::getenv("TESSERA_DECODE_ROWS");
    const long value = text == nullptr ? 8 : std::strtol(text, nullptr, 10);
    return value == 4 || value == 16 ? static_cast<int>(value) : 8;
  }();
  return rows;
}
uint64_t read_sum(const uint64_t* data, int64_t n, int streams, ReadLayout layout) {
  return HWY_DYNAMIC_DISPATCH(ReadSum)(data, n, streams, layout);
}
float fma_loop(int64_t iterations) { return HWY_DYNAMIC_DISPATCH(FmaLoop)(iterations); }
int64_t fma_loop_flops(int64_t iterations) { return HWY_DYNAMIC_DISPATCH(FmaLoopFlops)(iterations); }
const char* isa_name() { return HWY_DYNAMIC_DISPATCH(IsaName)(); }
void cap_isa_from_env() {
  static const bool capped = [] {
    const char* text = std::getenv("TESSERA_ISA");
    if (text == nullptr || std::strcmp(text, "avx2") != 0) return false;
    hwy::DisableTargets(HWY_AVX3 | HWY_AVX3_DL);
    return true;
  }();
  (void)capped;
}

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
