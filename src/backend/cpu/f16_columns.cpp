// f16_columns.h on x86-64: columns_kernel.h instantiated with AVX-512 FMAs on f16 widened
// by F16C, compiled for them between HWY_PUSH_ATTRIBUTES and HWY_POP_ATTRIBUTES (the rest
// of this file is baseline code; the AVX2 kernel is f16_columns_avx2.cpp's, as a template
// takes the instructions of the region it is defined in). Elsewhere instructions() is
// nullptr.
#include "backend/cpu/f16_columns.h"

// Every standard header the kernel uses, before the attribute region (see the kernel).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/kernels.h"
#include "core/check.h"
#include "hwy/aligned_allocator.h"
#include "hwy/base.h"

#if HWY_ARCH_X86_64 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
#include <immintrin.h>
#define TESSERA_F16_COLUMNS 1
#else
#define TESSERA_F16_COLUMNS 0
#endif

namespace tessera::cpu::f16_columns {

#if TESSERA_F16_COLUMNS

HWY_PUSH_ATTRIBUTES("avx512f,avx512vl,avx512dq,avx512bw,f16c,fma")
#if HWY_COMPILER_GCC_ACTUAL  // GCC bug 105593, as in bf16_dot.cpp
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

}  // namespace tessera::cpu::f16_columns
#include "backend/cpu/columns_kernel.h"
namespace tessera::cpu::f16_columns {

namespace {

// The steps on 16 rows' f32 elements: a GEMM's blocks, widened once for all its tokens
// (columns_kernel.h's Wide), where converting each tile's weights as it reads them held
// the GEMM to about half the FMA peak (docs/benchmarks.md, session 49).
struct F32Ops {
  using Acc = __m512;
  using W = __m512;  // 16 rows' element
  using X = __m512;  // x's element in every lane
  static constexpr int64_t kUnit = 1;
  static constexpr int kTileColumns = columns::kMaxColumns;

  static Acc zero() { return _mm512_setzero_ps(); }
  static W load(const float* p) { return _mm512_loadu_ps(p); }
  static X broadcast(uint32_t bits) { return _mm512_castsi512_ps(_mm512_set1_epi32(static_cast<int>(bits))); }
  static Acc dot(Acc acc, W w, X x) { return _mm512_fmadd_ps(w, x, acc); }
  static Acc loadu_acc(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu_acc(float* p, Acc a) { _mm512_storeu_ps(p, a); }
};

// columns_kernel.h's Ops on the instructions (f16_columns_emulated.h is the same in
// portable code): f16 widened by F16C, exactly, as each step reads it or a block at once.
struct InstructionOps : F32Ops {
  using Wide = F32Ops;

  static W load(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static X broadcast_unit(const uint32_t* x) { return broadcast(*x); }
  // n units into n units of 16 floats.
  static void widen(const uint16_t* col, int64_t n, float* out, int64_t ahead) {
    for (int64_t p = 0; p < n; ++p) {
      if (ahead > 0) __builtin_prefetch(reinterpret_cast<const char*>(col + 16 * p) + ahead, 0, 3);
      _mm512_storeu_ps(out + 16 * p, load(col + 16 * p));
    }
  }
  static void pack_units(const float* x, int64_t k, uint32_t* out) {
    std::memcpy(out, x, static_cast<size_t>(k) * sizeof(float));
    std::memset(out + k, 0, static_cast<size_t>(bf16::padded_k(k) - k) * sizeof(float));
  }
  // 16 rows' 32 elements: their pairs transposed as 32-bit words (16 rows' pair p in one
  // vector, a row's two elements side by side), then each vector's even elements (unit 2p)
  // ahead of its odd ones (unit 2p + 1).
  static void transpose_chunk(const uint16_t* src, int64_t stride, uint16_t* out) {
    alignas(64) float pairs[16 * 16];
    amx::transpose16(reinterpret_cast<const float*>(src), stride / 2, pairs, 16);
    alignas(64) static constexpr uint16_t kOrder[32] = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30,
                                                        1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31};
    const __m512i order = _mm512_load_si512(kOrder);
    for (int p = 0; p < 16; ++p)
      _mm512_storeu_si512(out + 32 * p, _mm512_permutexvar_epi16(order, _mm512_load_si512(pairs + 16 * p)));
  }
};

const bf16::Matmul& column_matmul() { return columns::Interface<InstructionOps>::matmul; }

}  // namespace

#if HWY_COMPILER_GCC_ACTUAL
#pragma GCC diagnostic pop
#endif
HWY_POP_ATTRIBUTES

namespace {
bool cpu_has_instructions() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
  return has;
}
}  // namespace

const bf16::Matmul* instructions() { return cpu_has_instructions() ? &column_matmul() : nullptr; }

bool enabled() {
  static const bool on = bf16::switched_on("TESSERA_F16_COLUMNS");
  return on;
}

#else  // not x86-64

const bf16::Matmul* instructions() { return nullptr; }
bool enabled() { return false; }

#endif

}  // namespace tessera::cpu::f16_columns
