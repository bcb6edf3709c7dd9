// amx.h on x86-64 Linux: amx_kernel.h instantiated with the AMX instructions, written as
// inline assembly (each with a memory clobber, so that no load or store of the
// surrounding code moves across a tile load or store; the compiler's own intrinsics
// carry none), so this file needs no target flags. Elsewhere cpu_has_instruction() is
// false and the rest is never called.
#include "backend/cpu/amx.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/bf16_dot.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_act.h"
#include "backend/cpu/weight_layout.h"
#include "core/check.h"
#include "core/dtype.h"

#if defined(__x86_64__) && defined(__linux__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TESSERA_AMX 1
#else
#define TESSERA_AMX 0
#endif

#include "backend/cpu/amx_kernel.h"
// (after amx_kernel.h)
#include "backend/cpu/amx_attention.h"
// The column decode and AMX-INT8's kernel are compiled for AVX-512F (only CPUs with AMX run
// them), so that their accumulators stay in vector registers through the inlined steps.
#if TESSERA_AMX && defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#elif TESSERA_AMX
#pragma GCC push_options
#pragma GCC target("avx512f")
#endif
#include "backend/cpu/amx_columns.h"
#include "backend/cpu/amx_int8_kernel.h"
#if TESSERA_AMX && defined(__clang__)
#pragma clang attribute pop
#elif TESSERA_AMX
#pragma GCC pop_options
#endif

namespace tessera::cpu::amx {

#if TESSERA_AMX

namespace {

// The 64-byte tile configuration ldtilecfg reads (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// One statement per tile register: the instructions name their tiles in the encoding.
#define TESSERA_TMM(T, STMT)                             \
  do {                                                   \
    static_assert((T) >= 0 && (T) < 8, "tile register"); \
    if constexpr ((T) == 0) STMT("0");                   \
    if constexpr ((T) == 1) STMT("1");                   \
    if constexpr ((T) == 2) STMT("2");                   \
    if constexpr ((T) == 3) STMT("3");                   \
    if constexpr ((T) == 4) STMT("4");                   \
    if constexpr ((T) == 5) STMT("5");                   \
    if constexpr ((T) == 6) STMT("6");                   \
    if constexpr ((T) == 7) STMT("7");                   \
  } while (false)
#define TESSERA_TILEZERO(N) __asm__ volatile("tilezero %%tmm" N ::: "memory")
#define TESSERA_TILELOADD(N) __asm__ volatile("tileloadd (%0,%1,1), %%tmm" N ::"r"(p), "r"(stride) : "memory")
#define TESSERA_TILELOADDT1(N) __asm__ volatile("tileloaddt1 (%0,%1,1), %%tmm" N ::"r"(p), "r"(stride) : "memory")
#define TESSERA_TILESTORED(N) __asm__ volatile("tilestored %%tmm" N ", (%0,%1,1)" ::"r"(p), "r"(stride) : "memory")

#define TESSERA_AVX512F __attribute__((target("avx512f")))
struct InstructionOps {
  static void configure(int cols) {
    TileConfig config;
    for (int t = 0; t < 8; ++t) {
      config.rows[t] = 16;
      config.colsb[t] = static_cast<uint16_t>(t == 4 || t == 5 ? 64 : 4 * cols);
    }
    __asm__ volatile("ldtilecfg (%0)" ::"r"(&config) : "memory");
  }
  static void release() { __asm__ volatile("tilerelease" ::: "memory"); }
  template <int T>
  static void zero() {
    TESSERA_TMM(T, TESSERA_TILEZERO);
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    TESSERA_TMM(T, TESSERA_TILELOADD);
  }
  template <int T>
  static void load_streaming(const void* p, int64_t stride) {
    TESSERA_TMM(T, TESSERA_TILELOADDT1);
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    TESSERA_TMM(T, TESSERA_TILESTORED);
  }
  // tdpbf16ps C, A, B (AT&T order: B, A, C), for the four (C, A, B) the kernel uses.
  template <int C, int A, int B>
  static void dot() {
    if constexpr (C == 0 && A == 4 && B == 6) {
      __asm__ volatile("tdpbf16ps %%tmm6, %%tmm4, %%tmm0" ::);
    } else if constexpr (C == 1 && A == 4 && B == 7) {
      __asm__ volatile("tdpbf16ps %%tmm7, %%tmm4, %%tmm1" ::);
    } else if constexpr (C == 2 && A == 5 && B == 6) {
      __asm__ volatile("tdpbf16ps %%tmm6, %%tmm5, %%tmm2" ::);
    } else {
      static_assert(C == 3 && A == 5 && B == 7, "a (C, A, B) the kernel does not use");
      __asm__ volatile("tdpbf16ps %%tmm7, %%tmm5, %%tmm3" ::);
    }
  }
  static void round_x(const float* x, int64_t n, uint16_t* out) { bf16_dot::round_x(x, n, out); }
  static void transpose16(const float* src, int64_t ss, float* dst, int64_t ds) { amx::transpose16(src, ss, dst, ds); }

  // amx_columns.h's steps on AVX-512F: a bf16 widened by its bits, and multiplies and adds
  // under MXCSR's DAZ and FTZ (Flush, for the length of a call), the instruction's rules.
  struct Lanes {
    using V = __m512;
    struct Flush {
      unsigned saved = _mm_getcsr();
      Flush() { _mm_setcsr(saved | 0x8040u); }  // FTZ (bit 15) and DAZ (bit 6)
      ~Flush() { _mm_setcsr(saved); }
      Flush(const Flush&) = delete;
      Flush& operator=(const Flush&) = delete;
    };
    TESSERA_AVX512F static V zero() { return _mm512_setzero_ps(); }
    TESSERA_AVX512F static void split(const uint32_t* p, V& even, V& odd) {
      const __m512i pairs = _mm512_loadu_si512(p);
      // (maskz: GCC 12's plain slli_epi32 reads an undefined vector and warns)
      even = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, pairs, 16));
      odd = _mm512_castsi512_ps(_mm512_and_si512(pairs, _mm512_set1_epi32(static_cast<int>(0xFFFF0000u))));
    }
    TESSERA_AVX512F static void widen_pairs(const uint16_t* x, int64_t pairs, float* even, float* odd) {
      const auto* words = reinterpret_cast<const uint32_t*>(x);
      int64_t u = 0;
      for (; u + 16 <= pairs; u += 16) {
        V e, o;
        split(words + u, e, o);
        _mm512_storeu_ps(even + u, e);
        _mm512_storeu_ps(odd + u, o);
      }
      for (; u < pairs; ++u) {
        const uint32_t e = words[u] << 16, o = words[u] & 0xFFFF0000u;
        std::memcpy(even + u, &e, sizeof(e));
        std::memcpy(odd + u, &o, sizeof(o));
      }
    }
    TESSERA_AVX512F static V mul(V w, float x) { return _mm512_mul_ps(w, _mm512_set1_ps(x)); }
    TESSERA_AVX512F static V add(V a, V b) { return _mm512_add_ps(a, b); }
    TESSERA_AVX512F static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  };

  // amx_attention.h's two more.
  static void softmax(float* x, int64_t n, float scale) { softmax_scaled(x, n, scale); }
  TESSERA_AVX512F static void subtract_widened(float* x, const uint16_t* hi, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      // The masked forms with every lane on: GCC 12 warns that the unmasked ones read an undefined vector.
      const __m512i words =
          _mm512_maskz_cvtepu16_epi32(0xFFFF, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi + i)));
      const __m512 wide = _mm512_castsi512_ps(_mm512_maskz_slli_epi32(0xFFFF, words, 16));
      _mm512_storeu_ps(x + i, _mm512_sub_ps(_mm512_loadu_ps(x + i), wide));
    }
    for (; i < n; ++i) x[i] -= bf16_to_f32(hi[i]);
  }
};

// InstructionOps without the tiles: every tile operation does nothing, so that gemm runs
// only its work around them (packing the A tiles, asking for the next weights, taking the
// outputs out of acc), for outside().
struct NoTileOps {
  static void configure(int) {}
  static void release() {}
  template <int T>
  static void zero() {}
  template <int T>
  static void load(const void*, int64_t) {}
  template <int T>
  static void load_streaming(const void*, int64_t) {}
  template <int T>
  static void store(void*, int64_t) {}
  template <int C, int A, int B>
  static void dot() {}
  static void round_x(const float* x, int64_t n, uint16_t* out) { InstructionOps::round_x(x, n, out); }
  static void transpose16(const float* src, int64_t ss, float* dst, int64_t ds) {
    InstructionOps::transpose16(src, ss, dst, ds);
  }
};

// amx_int8_kernel.h's tiles (every one whole: 16 rows of 64 bytes) and its f32 steps on AVX-512F (every CPU with AMX
// has it), the accumulators in 16 registers.
struct Int8Ops {
  static void configure() {
    TileConfig config;
    for (int t = 0; t < 8; ++t) {
      config.rows[t] = 16;
      config.colsb[t] = 64;
    }
    __asm__ volatile("ldtilecfg (%0)" ::"r"(&config) : "memory");
  }
  static void release() { InstructionOps::release(); }
  template <int T>
  static void zero() {
    InstructionOps::zero<T>();
  }
  template <int T>
  static void load(const void* p, int64_t stride) {
    InstructionOps::load<T>(p, stride);
  }
  template <int T>
  static void store(void* p, int64_t stride) {
    InstructionOps::store<T>(p, stride);
  }
  template <int C, int A, int B>
  static void dot() {
    static_assert(A == 4 + C / 2 && B == 6 + C % 2, "a (C, A, B) the kernel does not use");
    if constexpr (C == 0) __asm__ volatile("tdpbssd %%tmm6, %%tmm4, %%tmm0" ::: "memory");
    if constexpr (C == 1) __asm__ volatile("tdpbssd %%tmm7, %%tmm4, %%tmm1" ::: "memory");
    if constexpr (C == 2) __asm__ volatile("tdpbssd %%tmm6, %%tmm5, %%tmm2" ::: "memory");
    if constexpr (C == 3) __asm__ volatile("tdpbssd %%tmm7, %%tmm5, %%tmm3" ::: "memory");
  }
  struct Acc {
    __m512 v[16];
  };
  TESSERA_AVX512F static void clear(Acc& acc) {
#pragma GCC unroll 16
    for (__m512& v : acc.v) v = _mm512_setzero_ps();
  }
  TESSERA_AVX512F static void step(Acc& acc, const float* dw, const float* dx, const int32_t* p) {
    const __m512 w = _mm512_loadu_ps(dw);
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) {
      // (maskz: GCC 12's plain cvtepi32_ps reads an undefined vector and warns)
      const __m512 sum = _mm512_maskz_cvtepi32_ps(0xFFFF, _mm512_loadu_si512(p + 16 * t));
      acc.v[t] = _mm512_fmadd_ps(_mm512_mul_ps(w, _mm512_set1_ps(dx[t])), sum, acc.v[t]);
    }
  }
  TESSERA_AVX512F static void finish(const Acc& acc, float* y, int64_t ldy) {
#pragma GCC unroll 16
    for (int t = 0; t < 16; ++t) _mm512_storeu_ps(y + t * ldy, acc.v[t]);
  }
};

#undef TESSERA_AVX512F
#undef TESSERA_TILEZERO
#undef TESSERA_TILELOADD
#undef TESSERA_TILELOADDT1
#undef TESSERA_TILESTORED
#undef TESSERA_TMM

// Linux hands out the tile data state (8 KiB of registers) only to a process that asks.
bool os_grants_tiles() {
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

// Room for n elements in v (grown as needed) from its first 64-byte line: tiles and vectors
// read from scratch then lie on cache lines (a tile row across two lines made every tile
// load twice the lines).
template <typename T>
T* aligned(std::vector<T>& v, int64_t n) {
  v.resize(std::max(v.size(), static_cast<size_t>(n) + 64 / sizeof(T)));
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(v.data()) + 63) & ~uintptr_t{63});
}

// Scratch of one thread: rounded x (up to kColumnTokens tokens) and two zero-padded row
// groups (decode; decode_columns' widened x, at most 8 x k floats, in their place); the GEMM's
// partial sums and a row pair's packed A tiles; a whole call's packed x (matmul_rows and
// outside, as CpuDevice keeps its own: no pages to fault in and zero every call).
static_assert(kernel::kColumnTokens <= kernel::kTileRows, "decode_columns' widened x fits the row groups' scratch");
struct Scratch {
  std::vector<uint16_t> x, rows, a;
  std::vector<float> acc, packed;
};
// This thread's scratch for k, aligned.
struct Lines {
  uint16_t *x, *rows, *a;
  float* acc;
  std::vector<float>& packed;  // aligned(packed, n) where a call packs its own x
};
Lines scratch_for(int64_t k) {
  thread_local Scratch s;
  const int64_t kp = kernel::padded_k(k);
  return {aligned(s.x, kernel::kColumnTokens * kp), aligned(s.rows, 2 * kernel::kTileRows * kp),
          aligned(s.a, kernel::kPackedRowElements), aligned(s.acc, kernel::kAccFloats), s.packed};
}

// The GEMM's choices of speed (amx_kernel.h's GemmTuning), read once: TESSERA_AMX_KC, the
// chunks of k a block (1 to 16), and TESSERA_AMX_STREAM_B=1, x's B tiles loaded with the
// hint that they are not reused soon. Neither changes a bit of the results.
kernel::GemmTuning gemm_tuning() {
  static const kernel::GemmTuning tuning = [] {
    kernel::GemmTuning t;
    if (const char* text = std::getenv("TESSERA_AMX_KC"))
      t.k_chunks = std::clamp<int64_t>(std::strtoll(text, nullptr, 10), 1, kernel::kKcChunks);
    if (const char* text = std::getenv("TESSERA_AMX_STREAM_B")) t.stream_b = std::strcmp(text, "1") == 0;
    return t;
  }();
  return tuning;
}

// dst[j * ds + i] = src[i * ss + j] for i, j < 8.
__attribute__((target("avx2"))) void transpose8(const float* src, int64_t ss, float* dst, int64_t ds) {
  __m256 r[8], t[8], u[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * ss);
  for (int i = 0; i < 8; i += 2) {  // t[i]: r[i], r[i + 1] interleaved, elements 0-1 and 4-5; t[i + 1]: 2-3, 6-7
    t[i] = _mm256_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {  // u: one element of four rows in each 128-bit half
    u[i] = _mm256_shuffle_ps(t[i], t[i + 2], 0x44);
    u[i + 1] = _mm256_shuffle_ps(t[i], t[i + 2], 0xEE);
    u[i + 2] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0x44);
    u[i + 3] = _mm256_shuffle_ps(t[i + 1], t[i + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {  // rows 0-3 from u[j]'s halves, rows 4-7 from u[j + 4]'s
    _mm256_storeu_ps(dst + j * ds, _mm256_permute2f128_ps(u[j], u[j + 4], 0x20));
    _mm256_storeu_ps(dst + (j + 4) * ds, _mm256_permute2f128_ps(u[j], u[j + 4], 0x31));
  }
}

// Where a call may be cut (kernels.h's matmul_split): its tokens at pairs of token tiles
// (the GEMM's 2 x 2 blocks stay whole), its rows at row blocks (the GEMM reads all of its
// tokens' B tiles once a row block, so a piece of 32 rows read them once for 32 rows:
// four times the bytes of x a product).
constexpr int64_t kSplitTokens = 2 * kernel::kTileTokens;

void matmul_rows_packed(const float* packed, int64_t tokens, int64_t begin, int64_t end, int64_t k, const uint16_t* w,
                        int64_t rows, float* y, int64_t ldy, int64_t group) {
  TS_CHECK(begin % kSplitTokens == 0 && begin < end && (end == tokens || end % kSplitTokens == 0),
           "[cpu] AMX GEMM tokens [", begin, ", ", end, ") of ", tokens);
  const Lines s = scratch_for(k);
  kernel::gemm<InstructionOps>(reinterpret_cast<const uint32_t*>(packed + bf16::packed_offset(begin, k)), end - begin,
                               k, w, rows, group, y + begin * ldy, ldy, s.acc, s.a, gemm_tuning());
}
bool columns_decode();
// None for one token, nor (decode_columns' calls) for up to kColumnTokens where bf16 weights lie in columns.
int64_t packed_floats(int64_t tokens, int64_t k) {
  return tokens < 2 || (tokens <= kernel::kColumnTokens && columns_decode()) ? 0
                                                                             : kernel::packed_elements(tokens, k) / 2;
}
void pack_x(const float* x, int64_t tokens, int64_t k, int64_t begin, int64_t end, float* packed) {
  std::vector<uint16_t> rows(static_cast<size_t>(kernel::kTileTokens * kernel::padded_k(k)));
  kernel::pack_x<InstructionOps>(x, tokens, k, begin, end, reinterpret_cast<uint32_t*>(packed), rows.data());
}
void matmul_rows(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y, int64_t ldy,
                 int64_t group) {
  const Lines s = scratch_for(k);
  if (group == kColumns && tokens <= kernel::kColumnTokens) {
    const int64_t kp = kernel::padded_k(k);
    for (int64_t t = 0; t < tokens; ++t) kernel::round_row<InstructionOps>(x + t * k, k, s.x + t * kp);
    return kernel::decode_columns<InstructionOps>(s.x, tokens, k, w, rows, y, ldy, reinterpret_cast<float*>(s.rows),
                                                  decode_prefetch_bytes());
  }
  if (tokens == 1) {
    kernel::round_row<InstructionOps>(x, k, s.x);
    return kernel::decode<InstructionOps>(s.x, k, w, rows, group, y, s.rows);
  }
  float* packed = aligned(s.packed, kernel::packed_elements(tokens, k) / 2);  // (packed_floats may say none)
  pack_x(x, tokens, k, 0, tokens, packed);
  matmul_rows_packed(packed, tokens, 0, tokens, k, w, rows, y, ldy, group);
}

// Whether this CPU's tdpbf16ps gives amx_columns.h's bits (the order amx_kernel.h states,
// measured on one Xeon): 64 rows x 256 of awkward values (exponents spread wide, zeros of
// both signs, subnormals, products that underflow) decoded both ways, compared bit for
// bit. A CPU whose instruction summed otherwise keeps decode on the tiles.
bool columns_match_tiles() {
  constexpr int64_t k = 256, rows = 64;
  uint32_t state = 12345;
  const auto next = [&state] { return state = state * 1664525u + 1013904223u; };
  std::vector<uint16_t> w(rows * k), columns(rows * k), xb(k);
  std::vector<float> x(k);
  for (uint16_t& v : w) {
    const uint32_t r = next();
    const uint32_t exponent = r % 11 == 0 ? r % 4 : r % 13 == 0 ? 0 : 100 + (r >> 8) % 50;  // tiny, subnormal, wide
    v = static_cast<uint16_t>((r >> 31) << 15 | exponent << 7 | (r >> 16) % 128);
  }
  for (size_t i = 0; i < x.size(); ++i) {
    const uint32_t r = next();
    const uint32_t exponent = r % 7 == 0 ? 0 : r % 5 == 0 ? 3 : 110 + (r >> 8) % 30;
    const uint32_t bits = (r >> 31) << 31 | exponent << 23 | (r >> 9) % (1u << 23);
    std::memcpy(&x[i], &bits, sizeof(bits));
  }
  interleave_rows(w.data(), DType::kBF16, k, kColumns, 0, rows, columns.data());
  std::vector<float> tiles(rows), vectors(rows);
  const Lines s = scratch_for(k);
  kernel::round_row<InstructionOps>(x.data(), k, xb.data());
  kernel::decode<InstructionOps>(xb.data(), k, w.data(), rows, 1, tiles.data(), s.rows);
  kernel::decode_columns<InstructionOps>(xb.data(), 1, k, columns.data(), rows, vectors.data(), rows,
                                         reinterpret_cast<float*>(s.rows), 0);
  return std::memcmp(tiles.data(), vectors.data(), tiles.size() * sizeof(float)) == 0;
}

// Decode by amx_columns.h's vector steps over weights in the column layout, which
// CpuDevice::place copies them into, unless TESSERA_AMX_COLUMNS=0 or the instruction here
// sums otherwise (then rows as mapped, each A tile loaded straight from 16 rows: the tile
// loads held a 2-thread decode to 65-78 % of the memory's bandwidth, docs/benchmarks.md).
bool columns_decode() {
  static const bool on = bf16::switched_on("TESSERA_AMX_COLUMNS") && columns_match_tiles();
  return on;
}
int64_t row_group() { return columns_decode() ? kColumns : 1; }

// Whether CPUID leaf 7 says AMX-TILE and the AMX feature at EDX bit `bit` (22: BF16, 25:
// INT8) are there.
bool cpu_has_amx(unsigned bit) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  return (d >> 24 & 1u) != 0 && (d >> bit & 1u) != 0;
}

bool cpu_has_int8() {
  static const bool has = cpu_has_amx(25) && __builtin_cpu_supports("avx512f") && os_grants_tiles();
  return has;
}

bool cpu_has_instruction() {
  static const bool has = cpu_has_amx(22) && bf16_dot::instructions() != nullptr && os_grants_tiles();
  return has;
}

}  // namespace

const bf16::Matmul* instructions() {
  static const bf16::Matmul matmul{matmul_rows, packed_floats, pack_x,           matmul_rows_packed,
                                   row_group,   kSplitTokens,  kernel::kRowBlock};
  return cpu_has_instruction() ? &matmul : nullptr;
}

bool enabled() {
  static const bool on = bf16_dot::enabled() && cpu_has_instruction() && bf16::switched_on("TESSERA_AMX");
  return on;
}

__attribute__((target("avx2"))) void transpose16(const float* src, int64_t ss, float* dst, int64_t ds) {
  // dst's rows 0-7 whole (both of their 8-element halves), then rows 8-15: with dst rows
  // 4 KiB apart or a multiple of it (y's tokens, for most models' widths) all 16 fall in
  // one L1 set, and half-written, more of them than its ways, they were evicted between
  // their halves and read in again.
  for (int64_t j = 0; j < 16; j += 8)
    for (int64_t i = 0; i < 16; i += 8) transpose8(src + i * ss + j, ss, dst + j * ds + i, ds);
}

bool int8_runs() { return cpu_has_int8(); }
bool int8_enabled() {
  static const bool on = cpu_has_int8() && bf16::switched_on("TESSERA_AMX");
  return on;
}

namespace {
// x packed into these buffers (grown as needed).
PackedX pack_into(const void* xq, int64_t tokens, int64_t units, std::vector<int8_t>& xa, std::vector<float>& xd) {
  int8_t* a = aligned(xa, tokens * int8::pairs_of(units) * 64);
  xd.resize(std::max(xd.size(), static_cast<size_t>(tokens * units)));
  int8::pack_x(static_cast<const Q8Block*>(xq), tokens, units, a, xd.data());
  return {a, xd.data()};
}
}  // namespace

PackedX pack_x8(const void* xq, int64_t tokens, int64_t units) {
  TS_CHECK(cpu_has_int8() && tokens % int8::kTokens == 0, "[cpu] AMX-INT8 x of ", tokens, " tokens");
  thread_local std::vector<int8_t> xa;
  thread_local std::vector<float> xd;
  return pack_into(xq, tokens, units, xa, xd);
}

void block32_rows(DType dtype, const uint8_t* w, int64_t rows, int64_t units, const void* xq, int64_t tokens, float* y,
                  int64_t ldy, const PackedX* packed) {
  TS_CHECK(cpu_has_int8(), "[cpu] AMX-INT8 tiles on a CPU (or OS) without them");
  TS_CHECK(block32(dtype), "[cpu] AMX-INT8 rows of ", dtype_name(dtype));
  TS_CHECK(rows % kQuantGroup == 0 && tokens % int8::kTokens == 0, "[cpu] AMX ", dtype_name(dtype), " rows ", rows,
           " and tokens ", tokens, " (multiples of 16)");
  struct Scratch {
    std::vector<int8_t> b, xa;  // xa, xd: x packed by this call (none given), apart from pack_x8's
    std::vector<float> dw, xd;
    alignas(64) int32_t p[2 * int8::kTokens * kQuantGroup];
  };
  thread_local Scratch s;
  int8_t* b = aligned(s.b, units * int8::kTileBytes);
  s.dw.resize(std::max(s.dw.size(), static_cast<size_t>(units * kQuantGroup)));
  const PackedX x = packed != nullptr ? *packed : pack_into(xq, tokens, units, s.xa, s.xd);
  const auto run = dtype == DType::kQ8_0 ? int8::rows_of<Int8Ops, DType::kQ8_0> : int8::rows_of<Int8Ops, DType::kQ4_0>;
  run(w, rows, units, x.xa, x.xd, tokens, y, ldy, b, s.dw.data(), s.p);
}

bool attention_enabled(int64_t head_dim, int64_t block_size) {
  static const bool on = enabled() && bf16::switched_on("TESSERA_AMX_ATTENTION");
  return on && head_dim % kernel::kChunk == 0 && block_size % kAttentionChunk == 0;
}

void attend(const AttentionUnit& unit) {
  TS_CHECK(attention_enabled(unit.head_dim, unit.block_size) && unit.tokens >= 1 && unit.heads >= 1 &&
               unit.tokens * unit.heads <= kAttentionRows && unit.values_to >= unit.pos0 + unit.tokens - 1,
           "[cpu] AMX attention of ", unit.tokens, " tokens x ", unit.heads, " heads from position ", unit.pos0,
           ", values written to ", unit.values_to, ", head_dim ", unit.head_dim, ", blocks of ", unit.block_size);
  thread_local std::vector<float> scratch;
  kernel::attend_unit<InstructionOps>(unit, aligned(scratch, kernel::attend_floats(kernel::UnitSpan{unit})));
}

void attend_step(const AttentionUnit& unit, AttentionStep step, int64_t begin, int64_t end, float* shared) {
  const kernel::UnitSpan span{unit};
  TS_CHECK(attention_enabled(unit.head_dim, unit.block_size) && unit.tokens >= 1 && unit.heads >= 1 &&
               unit.tokens * unit.heads <= kAttentionRows && unit.values_to >= unit.pos0 + unit.tokens - 1 &&
               0 <= begin && begin <= end && end <= kernel::step_items(span, step),
           "[cpu] AMX attention step ", static_cast<int>(step), " over [", begin, ", ", end, ") of ", unit.tokens,
           " tokens x ", unit.heads, " heads from position ", unit.pos0, ", head_dim ", unit.head_dim);
  thread_local std::vector<float> scratch;
  const auto own =
      kernel::ThreadScratch::cut(aligned(scratch, kernel::ThreadScratch::floats(unit.head_dim)), unit.head_dim);
  kernel::unit_step<InstructionOps>(span, step, begin, end, kernel::UnitScratch::cut(shared, span.width()), own);
}

float dot_loop(int64_t iterations) {
  TS_CHECK(cpu_has_instruction(), "[cpu] AMX tiles on a CPU (or OS) without them");
  return kernel::dot_loop<InstructionOps>(iterations);
}

float ladder(int rung, int64_t passes) {
  TS_CHECK(cpu_has_instruction(), "[cpu] AMX tiles on a CPU (or OS) without them");
  TS_CHECK(rung >= 0 && rung <= 5, "[cpu] AMX ladder rung ", rung, " (0 to 5)");
  struct Operands {  // 1 x 2^-24 products, exact sums: the result says the loop ran
    std::vector<uint16_t> a;
    std::vector<uint32_t> b;
    std::vector<float> acc;
  };
  thread_local Operands o;
  uint16_t* a = aligned(o.a, kernel::kPackedRowElements);
  uint32_t* b = aligned(o.b, kernel::kLadderBElements);
  float* acc = aligned(o.acc, kernel::kAccFloats);
  std::fill(a, a + kernel::kPackedRowElements, uint16_t{0x3F80});
  std::fill(b, b + kernel::kLadderBElements, 0x33803380u);
  std::fill(acc, acc + kernel::kAccFloats, 0.0f);
  return kernel::ladder<InstructionOps>(rung, passes, a, b, acc, gemm_tuning());
}

bool outside_runs() { return bf16_dot::instructions() != nullptr && __builtin_cpu_supports("avx2"); }

void outside(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y, int64_t ldy) {
  TS_CHECK(outside_runs(), "[cpu] the AMX GEMM's work outside the tiles needs AVX-512 BF16 and AVX2");
  TS_CHECK(tokens > 1, "[cpu] the AMX GEMM takes more than one token, not ", tokens);
  const Lines s = scratch_for(k);
  float* packed = aligned(s.packed, kernel::packed_elements(tokens, k) / 2);
  std::vector<uint16_t> rows16(static_cast<size_t>(kernel::kTileTokens * kernel::padded_k(k)));
  kernel::pack_x<NoTileOps>(x, tokens, k, 0, tokens, reinterpret_cast<uint32_t*>(packed), rows16.data());
  kernel::gemm<NoTileOps>(reinterpret_cast<const uint32_t*>(packed), tokens, k, w, rows, 1, y, ldy, s.acc, s.a,
                          gemm_tuning());
}

#else  // not x86-64 Linux

const bf16::Matmul* instructions() { return nullptr; }
bool enabled() { return false; }
bool int8_runs() { return false; }
bool int8_enabled() { return false; }
void block32_rows(DType, const uint8_t*, int64_t, int64_t, const void*, int64_t, float*, int64_t, const PackedX*) {
  TS_CHECK(false, "[cpu] AMX-INT8 tiles need x86-64 Linux");
}
PackedX pack_x8(const void*, int64_t, int64_t) {
  TS_CHECK(false, "[cpu] AMX-INT8 tiles need x86-64 Linux");
  return {};
}
void transpose16(const float*, int64_t, float*, int64_t) { TS_CHECK(false, "[cpu] AMX tiles need x86-64 Linux"); }
bool attention_enabled(int64_t, int64_t) { return false; }
void attend(const AttentionUnit&) { TS_CHECK(false, "[cpu] AMX tiles need x86-64 Linux"); }
void attend_step(const AttentionUnit&, AttentionStep, int64_t, int64_t, float*) {
  TS_CHECK(false, "[cpu] AMX tiles need x86-64 Linux");
}
float dot_loop(int64_t) { return 0; }
float ladder(int, int64_t) { return 0; }
bool outside_runs() { return false; }
void outside(const float*, int64_t, int64_t, const uint16_t*, int64_t, float*, int64_t) {
  TS_CHECK(false, "[cpu] the AMX GEMM needs x86-64 Linux");
}

#endif

int64_t attention_items(const AttentionUnit& unit, AttentionStep step) {
  return kernel::step_items(kernel::UnitSpan{unit}, step);
}
int64_t attention_shared_floats(const AttentionUnit& unit) {
  return kernel::UnitScratch::floats(kernel::UnitSpan{unit}.width());
}

namespace {
// x's n elements rounded to bf16 as from_f32 rounds them, in a buffer of the calling thread
// (valid until its next call).
const uint16_t* rounded_bf16(const float* x, int64_t n) {
  thread_local std::vector<uint16_t> rounded;
  rounded.resize(static_cast<size_t>(n));
  from_f32(x, n, DType::kBF16, rounded.data());
  return rounded.data();
}
}  // namespace

void store_key(const float* k, int64_t head_dim, int64_t block_size, int64_t row, uint16_t* keys) {
  const uint16_t* rounded = rounded_bf16(k, head_dim);
  for (int64_t d = 0; d < head_dim; ++d) keys[d / 2 * 2 * block_size + 2 * row + d % 2] = rounded[d];
}

void store_value(const float* v, int64_t head_dim, int64_t row, uint16_t* values) {
  const uint16_t* rounded = rounded_bf16(v, head_dim);
  uint16_t* pair = values + row / 2 * 2 * head_dim + row % 2;
  for (int64_t d = 0; d < head_dim; ++d) pair[2 * d] = rounded[d];
}
int64_t dot_loop_flops(int64_t iterations) { return iterations * 4 * kernel::kTileRows * kernel::kTileTokens * 64; }
int64_t ladder_flops(int64_t passes) {
#if TESSERA_AMX
  const int64_t steps = std::clamp<int64_t>(gemm_tuning().k_chunks, 1, kernel::kKcChunks);
#else
  const int64_t steps = kernel::kKcChunks;
#endif
  return passes * (kernel::kTokBlock / (2 * kernel::kTileTokens)) * steps * dot_loop_flops(1);
}

}  // namespace tessera::cpu::amx
