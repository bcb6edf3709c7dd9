// A probe for a redesign of the bf16 GEMM, not the engine's order (issue 15, point 3):
// the GEMM with the weights as the vector operand of vdpbf16ps and x broadcast, so that an
// accumulator lane is one output (16 weight rows a vector) and its sum runs along k in one
// lane: no lane tree at the end and no partial vectors stored between k blocks (C is
// the f32 output itself). The engine's bf16 GEMM (bf16_dot_kernel.h) holds a weight row's
// chunk in a vector and x's in another, 16 lanes of pairs a (row, token), added as a tree
// at the end; that order is what decode's tiles compute too, so a token's outputs are the
// same alone and in a batch. This probe's order would need decode to take it as well (16
// rows' k-pairs a vector: a 16 x 16 transpose of 32-bit pairs, or the weights repacked so
// at load), which is why it is a probe: it measures what the micro-kernel gains.
//   BM_OuterProbe/<rows>/<k>  512 tokens of f32 x (rounded to bf16 inside the time, as the
//       engine's GEMM rounds them), the bf16 weights of GemmCase: panels of 64 rows x kc of
//       k (kc = 256) copied into [k-pair][row] order inside the time, then micro-kernels of
//       6 tokens x 64 rows (24 accumulators, 4 weight vectors and one broadcast of x a step).
//       Counters: GFLOPs (per CPU second of the thread), dot_share (of bf16_dot's register
//       loop, as BM_Gemm/bf16's), max_rel (the largest |difference| from the engine's
//       outputs over the sum of |w| |x| of that output: the two orders' rounding).
//   BM_OuterProbeF16/<rows>/<k>  the same for f16 weights as the engine's f16 GEMM takes them
//       (widened to f32, x in f32, FMAs): panels of 64 rows x kc in [k][row] order, widened
//       inside the time; fma_share (of the FMA loop, as BM_Gemm/f16's) and max_rel.
//   BM_OuterDecodeProbe/<rows>/<k>  one token in the same order, bf16, the weights repacked
//       (untimed) into blocks of 64 rows, [k-pair][row] within a block, so that a block is
//       one sequential stream and each of its 4 vectors a chain of vdpbf16ps along k: GBs (GB
//       of weights per CPU second), as BM_Decode/bf16 counts them.
//   BM_InterleavedDecodeProbe/<rows>/<k>  the engine's own order (a row's 32-element chunks
//       into 16 lanes, added across lanes at the end), the weights repacked (untimed) so
//       that 8 rows' chunks alternate ([chunk][row] within a block of 8 rows): one stream a
//       block, the layout alone changed. GBs.
// Only on a CPU with AVX-512 BF16 (else skipped, saying so).
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/bf16_dot.h"
#include "backend/cpu/kernels.h"
#include "cpu_bench.h"

namespace {

using tessera::DType;
using tessera::bench::GemmCase;
using tessera::bench::thread_seconds;
namespace cpu = tessera::cpu;

constexpr int kRowVectors = 4;  // vectors of 16 weight rows a micro-kernel
constexpr int kPanelRows = 16 * kRowVectors;
constexpr int kTokens = 6;  // tokens a micro-kernel
constexpr int64_t kKc = 256;

#define TS_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,f16c")))

// Rows r0.. (kPanelRows of them) and k-pairs p0.. (np) of the weights into panel[p][r].
void pack_panel(const uint16_t* w, int64_t k, int64_t r0, int64_t p0, int64_t np, uint32_t* panel) {
  for (int64_t r = 0; r < kPanelRows; ++r) {
    const auto* row = reinterpret_cast<const uint32_t*>(w + (r0 + r) * k) + p0;
    for (int64_t p = 0; p < np; ++p) panel[p * kPanelRows + r] = row[p];
  }
}

// x [tokens][k] f32 to bf16 pairs (nearest even, the engine's vcvtneps2bf16), k even.
TS_BF16 void round_x(const float* x, int64_t n, uint16_t* out) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
    _mm512_storeu_si512(out + i, reinterpret_cast<const __m512i&>(v));
  }
  for (; i < n; ++i) {
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_set1_ps(x[i]));
    out[i] = static_cast<uint16_t>(_mm256_extract_epi16(reinterpret_cast<const __m256i&>(v), 0));
  }
}

// c[t][r] (+)= panel's kPanelRows rows x kT tokens over np k-pairs; x: the tokens' pairs from
// this k block on, kp2 pairs a token.
template <int kT>
TS_BF16 void micro(const uint32_t* panel, int64_t np, const uint32_t* x, int64_t kp2, float* c, int64_t ldc,
                   bool first) {
  __m512 acc[kT][kRowVectors];
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t)
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v)
      acc[t][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + t * ldc + 16 * v);
  for (int64_t p = 0; p < np; ++p) {
    __m512bh w[kRowVectors];
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v) {
      const __m512i bits = _mm512_load_si512(panel + p * kPanelRows + 16 * v);
      w[v] = reinterpret_cast<const __m512bh&>(bits);
    }
#pragma GCC unroll 8
    for (int t = 0; t < kT; ++t) {
      const __m512i bits = _mm512_set1_epi32(static_cast<int>(x[t * kp2 + p]));
      const __m512bh xb = reinterpret_cast<const __m512bh&>(bits);
#pragma GCC unroll 8
      for (int v = 0; v < kRowVectors; ++v) acc[t][v] = _mm512_dpbf16_ps(acc[t][v], w[v], xb);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t)
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v) _mm512_storeu_ps(c + t * ldc + 16 * v, acc[t][v]);
}

// y [tokens][rows] for rows a multiple of kPanelRows, k a multiple of kKc.
void gemm(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y, uint16_t* xb,
          uint32_t* panel) {
  round_x(x, tokens * k, xb);
  const auto* xp = reinterpret_cast<const uint32_t*>(xb);
  const int64_t kp2 = k / 2;
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows)
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      pack_panel(w, k, r0, k0 / 2, kKc / 2, panel);
      int64_t t = 0;
      for (; t + kTokens <= tokens; t += kTokens)
        micro<kTokens>(panel, kKc / 2, xp + t * kp2 + k0 / 2, kp2, y + t * rows + r0, rows, k0 == 0);
      for (; t < tokens; ++t) micro<1>(panel, kKc / 2, xp + t * kp2 + k0 / 2, kp2, y + t * rows + r0, rows, k0 == 0);
    }
}

// f16: rows r0.. and k k0.. (kc) widened into panel[k][r].
TS_BF16 void pack_panel_f16(const uint16_t* w, int64_t k, int64_t r0, int64_t k0, int64_t kc, float* panel) {
  for (int64_t r = 0; r < kPanelRows; ++r) {
    const uint16_t* row = w + (r0 + r) * k + k0;
    for (int64_t i = 0; i < kc; ++i) panel[i * kPanelRows + r] = _cvtsh_ss(row[i]);
  }
}

template <int kT>
TS_BF16 void micro_f32(const float* panel, int64_t kc, const float* x, int64_t k, float* c, int64_t ldc, bool first) {
  __m512 acc[kT][kRowVectors];
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t)
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v)
      acc[t][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + t * ldc + 16 * v);
  for (int64_t i = 0; i < kc; ++i) {
    __m512 w[kRowVectors];
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v) w[v] = _mm512_load_ps(panel + i * kPanelRows + 16 * v);
#pragma GCC unroll 8
    for (int t = 0; t < kT; ++t) {
      const __m512 xb = _mm512_set1_ps(x[t * k + i]);
#pragma GCC unroll 8
      for (int v = 0; v < kRowVectors; ++v) acc[t][v] = _mm512_fmadd_ps(w[v], xb, acc[t][v]);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t)
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v) _mm512_storeu_ps(c + t * ldc + 16 * v, acc[t][v]);
}

void gemm_f16(const float* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y, float* panel) {
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows)
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      pack_panel_f16(w, k, r0, k0, kKc, panel);
      int64_t t = 0;
      for (; t + kTokens <= tokens; t += kTokens)
        micro_f32<kTokens>(panel, kKc, x + t * k + k0, k, y + t * rows + r0, rows, k0 == 0);
      for (; t < tokens; ++t) micro_f32<1>(panel, kKc, x + t * k + k0, k, y + t * rows + r0, rows, k0 == 0);
    }
}

// The largest |difference| of y from `engine` over each output's sum of |w| |x|, on a sample.
double max_relative(const GemmCase& g, const std::vector<float>& engine, int64_t rows, int64_t k, DType dtype) {
  std::vector<float> row(static_cast<size_t>(k));
  double max_rel = 0;
  for (int64_t r = 0; r < rows; r += 331) {
    cpu::to_f32(g.bytes.data() + r * k * static_cast<int64_t>(tessera::dtype_size(dtype)), dtype, k, row.data());
    for (int64_t t = 0; t < GemmCase::kTokens; t += 97) {
      double scale = 0;
      for (int64_t i = 0; i < k; ++i) scale += std::fabs(static_cast<double>(row[i]) * g.x[t * k + i]);
      max_rel = std::max(max_rel, std::fabs(static_cast<double>(g.y[t * rows + r]) - engine[t * rows + r]) / scale);
    }
  }
  return max_rel;
}

void BM_OuterProbeF16(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) return state.SkipWithError("no AVX-512 BF16 on this CPU");
  constexpr int64_t kCaseTokens = GemmCase::kTokens;
  const int64_t rows = state.range(0), k = state.range(1);
  GemmCase g(rows, k, DType::kF16);
  const auto* w = reinterpret_cast<const uint16_t*>(g.bytes.data());
  std::vector<float> panel_store(kKc * kPanelRows + 16);
  auto* panel = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(panel_store.data()) + 63) / 64 * 64);
  double fma_rate = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const double start = thread_seconds();
    benchmark::DoNotOptimize(cpu::fma_loop(20'000'000));
    fma_rate = std::max(fma_rate, static_cast<double>(cpu::fma_loop_flops(20'000'000)) / (thread_seconds() - start));
  }
  int64_t runs = 0;
  const double start = thread_seconds();
  for (auto _ : state) {
    gemm_f16(g.x.data(), kCaseTokens, k, w, rows, g.y.data(), panel);
    benchmark::DoNotOptimize(g.y.data());
    ++runs;
  }
  const double rate =
      2.0 * static_cast<double>(kCaseTokens * rows * k) * static_cast<double>(runs) / (thread_seconds() - start);
  std::vector<float> engine(g.y.size());
  cpu::matmul_rows(g.x.data(), kCaseTokens, k, g.bytes.data(), DType::kF16, rows, engine.data(), rows);
  state.counters["GFLOPs"] = rate * 1e-9;
  state.counters["fma_share"] = rate / fma_rate;
  state.counters["max_rel"] = max_relative(g, engine, rows, k, DType::kF16);
}

void BM_OuterProbe(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) return state.SkipWithError("no AVX-512 BF16 on this CPU");
  constexpr int64_t kCaseTokens = GemmCase::kTokens;
  const int64_t rows = state.range(0), k = state.range(1);
  GemmCase g(rows, k, DType::kBF16);
  const auto* w = reinterpret_cast<const uint16_t*>(g.bytes.data());
  std::vector<uint16_t> xb(static_cast<size_t>(kCaseTokens * k));
  std::vector<uint32_t> panel_store(kKc / 2 * kPanelRows + 16);
  auto* panel = reinterpret_cast<uint32_t*>((reinterpret_cast<uintptr_t>(panel_store.data()) + 63) / 64 * 64);
  double dot_rate = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const double start = thread_seconds();
    benchmark::DoNotOptimize(cpu::bf16_dot::dot_loop(20'000'000));
    dot_rate =
        std::max(dot_rate, static_cast<double>(cpu::bf16_dot::dot_loop_flops(20'000'000)) / (thread_seconds() - start));
  }
  int64_t runs = 0;
  const double start = thread_seconds();
  for (auto _ : state) {
    gemm(g.x.data(), kCaseTokens, k, w, rows, g.y.data(), xb.data(), panel);
    benchmark::DoNotOptimize(g.y.data());
    ++runs;
  }
  const double rate =
      2.0 * static_cast<double>(kCaseTokens * rows * k) * static_cast<double>(runs) / (thread_seconds() - start);
  std::vector<float> engine(g.y.size());
  cpu::matmul_rows(g.x.data(), kCaseTokens, k, g.bytes.data(), DType::kBF16, rows, engine.data(), rows);
  state.counters["GFLOPs"] = rate * 1e-9;
  state.counters["dot_share"] = rate / dot_rate;
  state.counters["max_rel"] = max_relative(g, engine, rows, k, DType::kBF16);
}

// y [rows] for one token: rp holds blocks of kPanelRows rows, [k-pair][row] within each.
TS_BF16 void decode(const uint32_t* rp, int64_t rows, int64_t k, const uint32_t* xp, float* y) {
  const int64_t pairs = k / 2;
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows) {
    const uint32_t* block = rp + r0 * pairs;
    __m512 acc[kRowVectors];
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v) acc[v] = _mm512_setzero_ps();
    for (int64_t p = 0; p < pairs; ++p) {
      const __m512i xbits = _mm512_set1_epi32(static_cast<int>(xp[p]));
      const __m512bh xb = reinterpret_cast<const __m512bh&>(xbits);
#pragma GCC unroll 8
      for (int v = 0; v < kRowVectors; ++v) {
        const __m512i bits = _mm512_load_si512(block + p * kPanelRows + 16 * v);
        acc[v] = _mm512_dpbf16_ps(acc[v], reinterpret_cast<const __m512bh&>(bits), xb);
      }
    }
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v) _mm512_storeu_ps(y + r0 + 16 * v, acc[v]);
  }
}

void BM_OuterDecodeProbe(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) return state.SkipWithError("no AVX-512 BF16 on this CPU");
  const int64_t rows = state.range(0), k = state.range(1), pairs = k / 2;
  GemmCase g(rows, k, DType::kBF16);
  const auto* w = reinterpret_cast<const uint16_t*>(g.bytes.data());
  std::vector<uint32_t> store(static_cast<size_t>(rows * pairs) + 16);
  auto* rp = reinterpret_cast<uint32_t*>((reinterpret_cast<uintptr_t>(store.data()) + 63) / 64 * 64);
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows) pack_panel(w, k, r0, 0, pairs, rp + r0 * pairs);
  std::vector<uint16_t> xb(static_cast<size_t>(k));
  std::vector<float> y(static_cast<size_t>(rows)), engine(static_cast<size_t>(rows));
  int64_t runs = 0;
  const double start = thread_seconds();
  for (auto _ : state) {
    round_x(g.x.data(), k, xb.data());
    decode(rp, rows, k, reinterpret_cast<const uint32_t*>(xb.data()), y.data());
    benchmark::DoNotOptimize(y.data());
    ++runs;
  }
  state.counters["GBs"] =
      static_cast<double>(g.bytes.size()) * static_cast<double>(runs) / (thread_seconds() - start) * 1e-9;
  cpu::matmul_rows(g.x.data(), 1, k, g.bytes.data(), DType::kBF16, rows, engine.data(), rows);
  double max_diff = 0;
  for (int64_t r = 0; r < rows; ++r) max_diff = std::max(max_diff, std::fabs(static_cast<double>(y[r]) - engine[r]));
  state.counters["max_diff"] = max_diff;
}

// y [rows] for one token in the engine's order: blocks of 8 rows, chunk s of row r at
// (s * 8 + r) * 32 elements of its block.
TS_BF16 void decode_interleaved(const uint16_t* ip, int64_t rows, int64_t k, const uint16_t* xb, float* y) {
  constexpr int kRows = 8;
  const int64_t chunks = k / 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kRows) {
    const uint16_t* block = ip + r0 * k;
    __m512 acc[kRows];
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) acc[r] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      const __m512i xbits = _mm512_loadu_si512(xb + 32 * c);
      const __m512bh xv = reinterpret_cast<const __m512bh&>(xbits);
#pragma GCC unroll 8
      for (int r = 0; r < kRows; ++r) {
        const __m512i bits = _mm512_load_si512(block + (c * kRows + r) * 32);
        acc[r] = _mm512_dpbf16_ps(acc[r], reinterpret_cast<const __m512bh&>(bits), xv);
      }
    }
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {  // lanes i + 8 onto i, then i + 4, i + 2, i + 1: the engine's tree
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, acc[r]);
      for (int half = 8; half > 0; half /= 2)
        for (int i = 0; i < half; ++i) lanes[i] += lanes[i + half];
      y[r0 + r] = lanes[0];
    }
  }
}

void BM_InterleavedDecodeProbe(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) return state.SkipWithError("no AVX-512 BF16 on this CPU");
  const int64_t rows = state.range(0), k = state.range(1);
  GemmCase g(rows, k, DType::kBF16);
  const auto* w = reinterpret_cast<const uint16_t*>(g.bytes.data());
  std::vector<uint16_t> store(static_cast<size_t>(rows * k) + 32);
  auto* ip = reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(store.data()) + 63) / 64 * 64);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k / 32; ++c)
      std::memcpy(ip + (r / 8 * 8) * k + (c * 8 + r % 8) * 32, w + r * k + 32 * c, 64);
  std::vector<uint16_t> xb(static_cast<size_t>(k));
  std::vector<float> y(static_cast<size_t>(rows)), engine(static_cast<size_t>(rows));
  int64_t runs = 0;
  const double start = thread_seconds();
  for (auto _ : state) {
    round_x(g.x.data(), k, xb.data());
    decode_interleaved(ip, rows, k, xb.data(), y.data());
    benchmark::DoNotOptimize(y.data());
    ++runs;
  }
  state.counters["GBs"] =
      static_cast<double>(g.bytes.size()) * static_cast<double>(runs) / (thread_seconds() - start) * 1e-9;
  cpu::matmul_rows(g.x.data(), 1, k, g.bytes.data(), DType::kBF16, rows, engine.data(), rows);
  double max_diff = 0;
  for (int64_t r = 0; r < rows; ++r) max_diff = std::max(max_diff, std::fabs(static_cast<double>(y[r]) - engine[r]));
  state.counters["max_diff"] = max_diff;
}

BENCHMARK(BM_OuterProbe)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OuterProbeF16)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OuterDecodeProbe)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_InterleavedDecodeProbe)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);

}  // namespace
