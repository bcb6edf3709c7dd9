// bf16_dot.h on x86-64: bf16_dot_kernel.h instantiated with the AVX-512 BF16 instructions,
// compiled for them between HWY_PUSH_ATTRIBUTES and HWY_POP_ATTRIBUTES (the rest of this
// file is baseline code: scratch, and the check that the CPU has them). Elsewhere
// cpu_has_instruction() is false and the rest is never called.
#include "backend/cpu/bf16_dot.h"

// Every standard header the kernel uses, before the attribute region (see the kernel).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/kernels.h"
#include "core/check.h"
#include "hwy/aligned_allocator.h"
#include "hwy/base.h"

#if HWY_ARCH_X86_64 && (HWY_COMPILER_GCC || HWY_COMPILER_CLANG)
#include <immintrin.h>
#define TESSERA_BF16_DOT 1
#else
#define TESSERA_BF16_DOT 0
#endif

namespace tessera::cpu::bf16_dot {

#if TESSERA_BF16_DOT

HWY_PUSH_ATTRIBUTES("avx512f,avx512vl,avx512dq,avx512bw,avx512bf16")
// GCC 12's AVX-512 shuffles and reductions start from its own _mm512_undefined_ps(), which
// its -Wuninitialized reports at every inlined call (GCC bug 105593).
#if HWY_COMPILER_GCC_ACTUAL
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

}  // namespace tessera::cpu::bf16_dot
#include "backend/cpu/bf16_dot_kernel.h"
#include "backend/cpu/columns_kernel.h"
namespace tessera::cpu::bf16_dot {

namespace {

// The kernel's Ops on the instructions themselves (bf16_dot_emulated.h is the same in
// portable code).
struct InstructionOps {
  using Acc = __m512;
  using Chunk = __m512i;
  using W = Chunk;  // columns_kernel.h's: 16 rows' pair, and x's pair in every lane
  using X = Chunk;
  static constexpr int64_t kUnit = 2;
  static constexpr int kTileColumns = columns::kMaxColumns;
  // Decode asks 1,280 bytes ahead of each column, where f16's FMAs (and AVX2's) read best
  // 2,048 ahead: the 1B layer's decode matmuls on Zen 5's 2 threads, f16 at 2,048 and bf16
  // at each distance taking turns in one process, three runs: bf16 at 2,048 0.94-0.99x
  // f16's GB/s, at 1,280 1.048-1.054x (768: 1.02-1.03x, 1,536: 1.03-1.05x; session 60).
  static constexpr int64_t kDecodeAhead = 1280;

  static Acc zero() { return _mm512_setzero_ps(); }
  static Chunk load(const uint16_t* p) { return _mm512_loadu_si512(p); }
  static Chunk load_partial(const uint16_t* p, int n) {
    return _mm512_maskz_loadu_epi16(static_cast<__mmask32>((1u << n) - 1u), p);
  }
  static Acc dot(Acc acc, Chunk w, Chunk x) { return _mm512_dpbf16_ps(acc, (__m512bh)w, (__m512bh)x); }
  static Acc load_acc(const float* p) { return _mm512_load_ps(p); }
  static void store_acc(float* p, Acc a) { _mm512_store_ps(p, a); }
  static Acc loadu_acc(const float* p) { return _mm512_loadu_ps(p); }
  static void storeu_acc(float* p, Acc a) { _mm512_storeu_ps(p, a); }
  static Chunk broadcast(uint32_t pair) { return _mm512_set1_epi32(static_cast<int>(pair)); }
  static void pack_units(const float* x, int64_t k, uint32_t* out) {
    bf16::round_row<InstructionOps>(x, k, reinterpret_cast<uint16_t*>(out));
  }
  static void transpose_chunk(const uint16_t* src, int64_t stride, uint16_t* out) {
    amx::transpose16(reinterpret_cast<const float*>(src), stride / 2, reinterpret_cast<float*>(out), 16);
  }

  // out[j] = the halving-tree sum of v[j]'s lanes (lane i + 8 onto i, + 4, + 2, + 1), 16
  // at once: each level adds the two halves of each group of lanes for two vectors
  // together; after the last, lane 4b + j holds v[4j + b]'s sum, put back in order by
  // one permutation.
  static void sum_lanes16(const Acc* v, float* out) {
    Acc u[8], w[4];
    for (int m = 0; m < 8; ++m)  // lanes i + 8 onto i: blocks [0 + 2, 1 + 3] of each of two vectors
      u[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0x44),
                           _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], 0xEE));
    for (int m = 0; m < 4; ++m)  // lanes i + 4 onto i: block b of w[m] is v[4m + b]'s four lanes
      w[m] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * m], u[2 * m + 1], 0x88),
                           _mm512_shuffle_f32x4(u[2 * m], u[2 * m + 1], 0xDD));
    Acc z[2];
    for (int m = 0; m < 2; ++m)  // lanes i + 2 onto i, within each block
      z[m] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * m], w[2 * m + 1], 0x44),
                           _mm512_shuffle_ps(w[2 * m], w[2 * m + 1], 0xEE));
    const Acc sums = _mm512_add_ps(_mm512_shuffle_ps(z[0], z[1], 0x88),  // lane i + 1 onto i
                                   _mm512_shuffle_ps(z[0], z[1], 0xDD));
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, sums));
  }

  static void round_x(const float* x, int64_t n, uint16_t* out) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    if (i < n) {
      const auto mask = static_cast<__mmask16>((1u << (n - i)) - 1u);
      _mm256_mask_storeu_epi16(out + i, mask, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + i)));
    }
  }
};

constexpr int kDotChains = 12;  // as kernels.cpp's FMA loop: enough to cover the latency

void round_rows(const float* x, int64_t tokens, int64_t k, uint16_t* out) {
  for (int64_t t = 0; t < tokens; ++t) kernel::round_row<InstructionOps>(x + t * k, k, out + t * kernel::padded_k(k));
}
void run_round_x(const float* x, int64_t n, uint16_t* out) { InstructionOps::round_x(x, n, out); }
void run_tiles(const uint16_t* xb, int64_t tokens, const kernel::Rows& w, float* y, int64_t ldy, int64_t ahead,
               int decode_rows) {
  kernel::tiles<InstructionOps>(xb, tokens, w, y, ldy, ahead, decode_rows);
}
void run_pack_x(const float* x, int64_t tokens, int64_t k, int64_t begin, int64_t end, uint16_t* xp, uint16_t* row) {
  kernel::pack_x<InstructionOps>(x, tokens, k, begin, end, xp, row);
}
void run_gemm(const uint16_t* xp, int64_t tokens, const kernel::Rows& w, float* y, int64_t ldy, float* acc) {
  kernel::gemm<InstructionOps>(xp, tokens, w, y, ldy, acc);
}
// The column order's interface (columns_kernel.h), instantiated here, for AVX-512 BF16.
const bf16::Matmul& column_matmul() { return columns::Interface<InstructionOps>::matmul; }
float run_dot_loop(int64_t iterations) {
  __m512 acc[kDotChains];
  for (int c = 0; c < kDotChains; ++c) acc[c] = _mm512_set1_ps(1.0f + 0.001f * static_cast<float>(c));
  const __m512i a = _mm512_set1_epi16(0x3F80);  // 1.0
  const __m512i b = _mm512_set1_epi16(0x38D1);  // about 1e-4
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kDotChains; ++c) acc[c] = InstructionOps::dot(acc[c], a, b);
  __m512 sum = acc[0];
  for (int c = 1; c < kDotChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  return _mm512_reduce_add_ps(sum);
}

}  // namespace

#if HWY_COMPILER_GCC_ACTUAL
#pragma GCC diagnostic pop
#endif
HWY_POP_ATTRIBUTES

// bf16_matmul.h's interface (reached through instructions(), so only where the CPU has
// the instruction).
namespace {

int64_t packed_floats(int64_t tokens, int64_t k) {
  return tokens < kernel::kGemmTokens ? 0 : (kernel::packed_elements(tokens, k) + 1) / 2;
}
void pack_x(const float* x, int64_t tokens, int64_t k, int64_t begin, int64_t end, float* packed) {
  std::vector<uint16_t> row(static_cast<size_t>(kernel::padded_k(k)));
  run_pack_x(x, tokens, k, begin, end, reinterpret_cast<uint16_t*>(packed), row.data());
}
void matmul_rows_packed(const float* packed, int64_t tokens, int64_t begin, int64_t end, int64_t k, const uint16_t* w,
                        int64_t rows, float* y, int64_t ldy, int64_t group) {
  TS_CHECK(begin % kernel::kMc == 0 && begin < end && (end == tokens || end % kernel::kMc == 0),
           "[cpu] bf16 GEMM tokens [", begin, ", ", end, ") of ", tokens);
  auto acc = hwy::AllocateAligned<float>(static_cast<size_t>(kernel::kAccFloats));
  TS_CHECK(acc, "[cpu] matmul scratch");
  run_gemm(reinterpret_cast<const uint16_t*>(packed + bf16::packed_offset(begin, k)), end - begin, {w, k, rows, group},
           y + begin * ldy, ldy, acc.get());
}
void matmul_rows(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y, int64_t ldy,
                 int64_t group) {
  if (tokens >= kernel::kGemmTokens) {
    std::vector<float> packed(static_cast<size_t>(packed_floats(tokens, k)));
    pack_x(x, tokens, k, 0, tokens, packed.data());
    return matmul_rows_packed(packed.data(), tokens, 0, tokens, k, w, rows, y, ldy, group);
  }
  thread_local std::vector<uint16_t> rounded;
  rounded.resize(static_cast<size_t>(tokens * kernel::padded_k(k)));
  round_rows(x, tokens, k, rounded.data());
  run_tiles(rounded.data(), tokens, {w, k, rows, group}, y, ldy, decode_prefetch_bytes(), decode_tile_rows());
}
int64_t row_group() { return decode_tile_rows(); }

bool cpu_has_instruction() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

}  // namespace

const bf16::Matmul* instructions() {
  // Cut at token blocks (the packed layout's), rows at 32 as the f32 GEMM's.
  static const bf16::Matmul matmul{matmul_rows, packed_floats, pack_x, matmul_rows_packed, row_group, kernel::kMc, 32};
  return cpu_has_instruction() ? &matmul : nullptr;
}

const bf16::Matmul* columns() { return cpu_has_instruction() ? &column_matmul() : nullptr; }

bool enabled() {
  static const bool on = cpu_has_instruction() && bf16::switched_on("TESSERA_BF16_DOT");
  return on;
}

bool columns_enabled() {
  static const bool on = enabled() && bf16::switched_on("TESSERA_BF16_COLUMNS");
  return on;
}

void round_x(const float* x, int64_t n, uint16_t* out) {
  TS_CHECK(cpu_has_instruction(), "[cpu] bf16 dot products on a CPU without AVX-512 BF16");
  run_round_x(x, n, out);
}

float dot_loop(int64_t iterations) {
  TS_CHECK(cpu_has_instruction(), "[cpu] bf16 dot products on a CPU without AVX-512 BF16");
  return run_dot_loop(iterations);
}
int64_t dot_loop_flops(int64_t iterations) { return iterations * kDotChains * 32 * 2; }

#else  // not x86-64

const bf16::Matmul* instructions() { return nullptr; }
const bf16::Matmul* columns() { return nullptr; }
bool enabled() { return false; }
bool columns_enabled() { return false; }
void round_x(const float*, int64_t, uint16_t*) { TS_CHECK(false, "[cpu] bf16 dot products need x86-64"); }
float dot_loop(int64_t) { return 0; }
int64_t dot_loop_flops(int64_t) { return 0; }

#endif

}  // namespace tessera::cpu::bf16_dot
