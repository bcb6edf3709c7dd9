// f16_columns.h's AVX2 kernel on x86-64: columns_kernel.h instantiated with AVX2 FMAs on
// f16 widened by F16C, compiled for them between HWY_PUSH_ATTRIBUTES and
// HWY_POP_ATTRIBUTES. A file of its own: the kernel's templates take the instructions of
// the region their header is included in, once a file (f16_columns.cpp's is AVX-512's).
// Elsewhere avx2_instructions() is nullptr.
#include "backend/cpu/f16_columns.h"

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
#define TESSERA_F16_COLUMNS_AVX2 1
#else
#define TESSERA_F16_COLUMNS_AVX2 0
#endif

namespace tessera::cpu::f16_columns {

#if TESSERA_F16_COLUMNS_AVX2

HWY_PUSH_ATTRIBUTES("avx2,f16c,fma")

}  // namespace tessera::cpu::f16_columns
#include "backend/cpu/avx2_columns.h"
#include "backend/cpu/columns_kernel.h"
namespace tessera::cpu::f16_columns {

namespace {

// The AVX-512 kernel's steps on AVX2 (avx2::Lanes: a column's 16 lanes are two vectors).
struct Avx2Ops : avx2::Lanes {
  static constexpr int64_t kUnit = 1;

  static W load(const uint16_t* p) {
    return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))),
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)))};
  }
  static void pack_units(const float* x, int64_t k, uint32_t* out) { pack_f32(x, k, bf16::padded_k(k), out); }
  // 16 rows' 32 elements into 32 units of 16 rows: their pairs transposed as 32-bit words
  // (16 rows' pair p in two vectors), then each pair's low elements (unit 2p) and high ones
  // (unit 2p + 1) packed apart.
  static void transpose_chunk(const uint16_t* src, int64_t stride, uint16_t* out) {
    alignas(32) uint32_t pairs[16 * 16];
    avx2::transpose16_words(reinterpret_cast<const uint32_t*>(src), stride / 2, pairs);
    const __m256i low = _mm256_set1_epi32(0xFFFF);
    for (int p = 0; p < 16; ++p) {
      const __m256i a = _mm256_load_si256(reinterpret_cast<const __m256i*>(pairs + 16 * p));
      const __m256i b = _mm256_load_si256(reinterpret_cast<const __m256i*>(pairs + 16 * p + 8));
      // packus works within 128-bit lanes: a's and b's halves alternate until the permute.
      const __m256i even = _mm256_packus_epi32(_mm256_and_si256(a, low), _mm256_and_si256(b, low));
      const __m256i odd = _mm256_packus_epi32(_mm256_srli_epi32(a, 16), _mm256_srli_epi32(b, 16));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * p), _mm256_permute4x64_epi64(even, 0xD8));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 32 * p + 16), _mm256_permute4x64_epi64(odd, 0xD8));
    }
  }
};

const bf16::Matmul& avx2_matmul() { return columns::Interface<Avx2Ops>::matmul; }

}  // namespace

HWY_POP_ATTRIBUTES

namespace {
bool cpu_has_avx2() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
  return has;
}
}  // namespace

const bf16::Matmul* avx2_instructions() { return cpu_has_avx2() ? &avx2_matmul() : nullptr; }

#else  // not x86-64

const bf16::Matmul* avx2_instructions() { return nullptr; }

#endif

}  // namespace tessera::cpu::f16_columns
