// bf16_columns_avx2.h on x86-64: columns_kernel.h instantiated with AVX2 FMAs on bf16
// widened by a shift, compiled for them between HWY_PUSH_ATTRIBUTES and
// HWY_POP_ATTRIBUTES (the kernel's templates take the instructions of the region their
// header is included in, once a file; the rest of this file is baseline code). Elsewhere
// instructions() is nullptr.
#include "backend/cpu/bf16_columns_avx2.h"

// Every standard header the kernel uses, before the attribute region (see the kernel).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/check.h"
#include "hwy/aligned_allocator.h"
#include "hwy/base.h"

#if HWY_ARCH_X86_64 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
#include <immintrin.h>
#define TESSERA_BF16_COLUMNS_AVX2 1
#else
#define TESSERA_BF16_COLUMNS_AVX2 0
#endif

namespace tessera::cpu::bf16_columns_avx2 {

#if TESSERA_BF16_COLUMNS_AVX2

HWY_PUSH_ATTRIBUTES("avx2,fma")

}  // namespace tessera::cpu::bf16_columns_avx2
#include "backend/cpu/avx2_columns.h"
#include "backend/cpu/columns_kernel.h"
namespace tessera::cpu::bf16_columns_avx2 {

namespace {

// bf16_columns_avx2_emulated.h's Ops on the instructions (Acc and its loads and stores
// avx2::Lanes').
struct InstructionOps : avx2::Lanes {
  // The tiles' steps over the widened block: one f32 element of 16 rows a unit.
  struct WideOps : avx2::Lanes {
    static constexpr int64_t kUnit = 1;

    static W load(const float* p) { return loadu_acc(p); }
  };
  using Wide = WideOps;  // (a type of another name: WideOps::WideOps names WideOps itself)

  // Fewer tokens' steps, a unit (16 rows' pair) widened as it is read: its even elements
  // (low halves, shifted up), then its odd ones (high halves, the low halves cleared).
  struct W {
    __m256 even_lo, even_hi, odd_lo, odd_hi;
  };
  struct X {
    __m256 even, odd;
  };
  static constexpr int64_t kUnit = 2;

  static __m256 even(__m256i pairs) { return _mm256_castsi256_ps(_mm256_slli_epi32(pairs, 16)); }
  static __m256 odd(__m256i pairs) {
    return _mm256_castsi256_ps(_mm256_and_si256(pairs, _mm256_set1_epi32(static_cast<int>(0xFFFF0000u))));
  }
  static W load(const uint16_t* p) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 16));
    return {even(lo), even(hi), odd(lo), odd(hi)};
  }
  static X broadcast_unit(const uint32_t* x) { return {Wide::broadcast(x[0]), Wide::broadcast(x[1])}; }
  static Acc dot(Acc acc, const W& w, X x) {
    acc = Wide::dot(acc, {w.even_lo, w.even_hi}, x.even);
    return Wide::dot(acc, {w.odd_lo, w.odd_hi}, x.odd);
  }

  // n units into 2n units of 16 floats, each as load() widens it.
  static void widen(const uint16_t* col, int64_t n, float* out, int64_t ahead) {
    for (int64_t p = 0; p < n; ++p) {
      const uint16_t* unit = col + p * 32;
      if (ahead > 0) __builtin_prefetch(reinterpret_cast<const char*>(unit) + ahead, 0, 3);
      const W w = load(unit);
      float* even_out = out + 32 * p;
      _mm256_storeu_ps(even_out, w.even_lo);
      _mm256_storeu_ps(even_out + 8, w.even_hi);
      _mm256_storeu_ps(even_out + 16, w.odd_lo);
      _mm256_storeu_ps(even_out + 24, w.odd_hi);
    }
  }
  static void pack_units(const float* x, int64_t k, uint32_t* out) { Wide::pack_f32(x, k, bf16::padded_k(k), out); }
  // 16 rows' 32 elements into 16 units of 16 rows' pairs (32-bit words transposed).
  static void transpose_chunk(const uint16_t* src, int64_t stride, uint16_t* out) {
    avx2::transpose16_words(reinterpret_cast<const uint32_t*>(src), stride / 2, reinterpret_cast<uint32_t*>(out));
  }
};

const bf16::Matmul& column_matmul() { return columns::Interface<InstructionOps>::matmul; }

}  // namespace

HWY_POP_ATTRIBUTES

namespace {
bool cpu_has_instructions() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
}  // namespace

const bf16::Matmul* instructions() { return cpu_has_instructions() ? &column_matmul() : nullptr; }

bool enabled() {
  static const bool on = bf16::switched_on("TESSERA_BF16_COLUMNS");
  return on;
}

#else  // not x86-64

const bf16::Matmul* instructions() { return nullptr; }
bool enabled() { return false; }

#endif

}  // namespace tessera::cpu::bf16_columns_avx2
