// Probes for a redesign of the CPU's 16-bit matmuls, not the engine's code (issue 15): first
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
using tessera::bench::loop_rate;
using tessera::bench::runs_a_second;
namespace cpu = tessera::cpu;

constexpr int kRowVectors = 4;  // vectors of 16 weight rows a micro-kernel
constexpr int kPanelRows = 16 * kRowVectors;
constexpr int kTokens = 6;  // tokens a micro-kernel
constexpr int64_t kKc = 256;

#define TS_BF16 __attribute__((target("avx512f,avx512bw,avx512bf16,f16c")))

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

// The probes' two kinds of step: bf16 k-pairs by vdpbf16ps (x rounded to bf16 pairs first),
// and f16 weights widened to f32 by FMAs (x as it is). A panel holds kPanelRows rows' values
// at each step of a k block, [step][row]; x is a token's values a step.
struct Bf16Pairs {
  using Value = uint32_t;  // a k-pair of bf16
  using Vector = __m512bh;
  static constexpr int64_t kPerStep = 2;  // k elements a step
  TS_BF16 static Vector load(const Value* p) {
    const __m512i bits = _mm512_load_si512(p);
    return reinterpret_cast<const __m512bh&>(bits);
  }
  TS_BF16 static Vector broadcast(Value x) {
    const __m512i bits = _mm512_set1_epi32(static_cast<int>(x));
    return reinterpret_cast<const __m512bh&>(bits);
  }
  TS_BF16 static __m512 step(__m512 acc, Vector w, Vector x) { return _mm512_dpbf16_ps(acc, w, x); }
  static Value widen(const uint16_t* w) { return *reinterpret_cast<const uint32_t*>(w); }
  // The GEMM's x: rounded to bf16 pairs into `scratch` (inside the timed loop, as the engine's).
  static const Value* prepare(const float* x, int64_t n, std::vector<uint16_t>& scratch) {
    round_x(x, n, scratch.data());
    return reinterpret_cast<const Value*>(scratch.data());
  }
  static constexpr DType kDType = DType::kBF16;
  static constexpr const char* kShare = "dot_share";  // of bf16_dot's register loop
  static double peak() { return loop_rate(cpu::bf16_dot::dot_loop, cpu::bf16_dot::dot_loop_flops); }
};
struct F16Widened {
  using Value = float;
  using Vector = __m512;
  static constexpr int64_t kPerStep = 1;
  TS_BF16 static Vector load(const Value* p) { return _mm512_load_ps(p); }
  TS_BF16 static Vector broadcast(Value x) { return _mm512_set1_ps(x); }
  TS_BF16 static __m512 step(__m512 acc, Vector w, Vector x) { return _mm512_fmadd_ps(w, x, acc); }
  TS_BF16 static Value widen(const uint16_t* w) { return _cvtsh_ss(*w); }
  static const Value* prepare(const float* x, int64_t, std::vector<uint16_t>&) { return x; }
  static constexpr DType kDType = DType::kF16;
  static constexpr const char* kShare = "fma_share";  // of the FMA loop
  static double peak() { return loop_rate(cpu::fma_loop, cpu::fma_loop_flops); }
};

// Rows r0.. (kPanelRows of them) and the steps of k from step s0 on (n of them) into panel[step][row].
template <typename Ops>
TS_BF16 void pack_panel(const uint16_t* w, int64_t k, int64_t r0, int64_t s0, int64_t n, typename Ops::Value* panel) {
  for (int64_t r = 0; r < kPanelRows; ++r) {
    const uint16_t* row = w + (r0 + r) * k + s0 * Ops::kPerStep;
    for (int64_t s = 0; s < n; ++s) panel[s * kPanelRows + r] = Ops::widen(row + s * Ops::kPerStep);
  }
}

// c[t][r] (+)= the panel's kPanelRows rows x kT tokens over `steps` steps; x: the tokens' values
// from this k block on, `stride` values a token.
template <typename Ops, int kT>
TS_BF16 void micro(const typename Ops::Value* panel, int64_t steps, const typename Ops::Value* x, int64_t stride,
                   float* c, int64_t ldc, bool first) {
  __m512 acc[kT][kRowVectors];
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t)
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v)
      acc[t][v] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(c + t * ldc + 16 * v);
  for (int64_t s = 0; s < steps; ++s) {
    typename Ops::Vector w[kRowVectors];
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v) w[v] = Ops::load(panel + s * kPanelRows + 16 * v);
#pragma GCC unroll 8
    for (int t = 0; t < kT; ++t) {
      const typename Ops::Vector xb = Ops::broadcast(x[t * stride + s]);
#pragma GCC unroll 8
      for (int v = 0; v < kRowVectors; ++v) acc[t][v] = Ops::step(acc[t][v], w[v], xb);
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < kT; ++t)
#pragma GCC unroll 8
    for (int v = 0; v < kRowVectors; ++v) _mm512_storeu_ps(c + t * ldc + 16 * v, acc[t][v]);
}

// y [tokens][rows] from x's values (stride k / kPerStep a token), rows a multiple of
// kPanelRows, k of kKc.
template <typename Ops>
TS_BF16 void gemm(const typename Ops::Value* x, int64_t tokens, int64_t k, const uint16_t* w, int64_t rows, float* y,
                  typename Ops::Value* panel) {
  const int64_t stride = k / Ops::kPerStep, steps = kKc / Ops::kPerStep;
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows)
    for (int64_t k0 = 0; k0 < k; k0 += kKc) {
      const int64_t s0 = k0 / Ops::kPerStep;
      pack_panel<Ops>(w, k, r0, s0, steps, panel);
      int64_t t = 0;
      for (; t + kTokens <= tokens; t += kTokens)
        micro<Ops, kTokens>(panel, steps, x + t * stride + s0, stride, y + t * rows + r0, rows, k0 == 0);
      for (; t < tokens; ++t)
        micro<Ops, 1>(panel, steps, x + t * stride + s0, stride, y + t * rows + r0, rows, k0 == 0);
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

// FLOP of one GEMM of GemmCase's tokens.
double gemm_flops(int64_t rows, int64_t k) { return 2.0 * static_cast<double>(GemmCase::kTokens * rows * k); }

// A decode probe's counters: GB of weights a CPU second, and y's largest difference from the
// engine's outputs for GemmCase's first token.
void decode_counters(benchmark::State& state, const GemmCase& g, const std::vector<float>& y, double runs) {
  const auto rows = static_cast<int64_t>(y.size());
  const int64_t k = static_cast<int64_t>(g.x.size()) / GemmCase::kTokens;
  std::vector<float> engine(y.size());
  cpu::matmul_rows(g.x.data(), 1, k, g.bytes.data(), DType::kBF16, rows, engine.data(), rows);
  double max_diff = 0;
  for (size_t r = 0; r < y.size(); ++r) max_diff = std::max(max_diff, std::fabs(static_cast<double>(y[r]) - engine[r]));
  state.counters["GBs"] = static_cast<double>(g.bytes.size()) * runs * 1e-9;
  state.counters["max_diff"] = max_diff;
}

template <typename Ops>
void BM_OuterGemm(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) return state.SkipWithError("no AVX-512 BF16 on this CPU");
  constexpr int64_t kCaseTokens = GemmCase::kTokens;
  const int64_t rows = state.range(0), k = state.range(1);
  GemmCase g(rows, k, Ops::kDType);
  const auto* w = reinterpret_cast<const uint16_t*>(g.bytes.data());
  std::vector<uint16_t> scratch(static_cast<size_t>(kCaseTokens * k));
  std::vector<typename Ops::Value> panel_store(kKc / Ops::kPerStep * kPanelRows + 16);
  auto* panel =
      reinterpret_cast<typename Ops::Value*>((reinterpret_cast<uintptr_t>(panel_store.data()) + 63) / 64 * 64);
  const double peak = Ops::peak();
  const double rate =
      gemm_flops(rows, k) * runs_a_second(state, [&] {
        gemm<Ops>(Ops::prepare(g.x.data(), kCaseTokens * k, scratch), kCaseTokens, k, w, rows, g.y.data(), panel);
        benchmark::DoNotOptimize(g.y.data());
      });
  std::vector<float> engine(g.y.size());
  cpu::matmul_rows(g.x.data(), kCaseTokens, k, g.bytes.data(), Ops::kDType, rows, engine.data(), rows);
  state.counters["GFLOPs"] = rate * 1e-9;
  state.counters[Ops::kShare] = rate / peak;
  state.counters["max_rel"] = max_relative(g, engine, rows, k, Ops::kDType);
}

// y [rows] for one token: rp holds blocks of kPanelRows rows, [k-pair][row] within each (the
// GEMM's micro-kernel for one token over the whole of k).
void decode(const uint32_t* rp, int64_t rows, int64_t k, const uint32_t* xp, float* y) {
  const int64_t pairs = k / 2;
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows)
    micro<Bf16Pairs, 1>(rp + r0 * pairs, pairs, xp, pairs, y + r0, rows, true);
}

void BM_OuterDecodeProbe(benchmark::State& state) {
  if (!__builtin_cpu_supports("avx512bf16")) return state.SkipWithError("no AVX-512 BF16 on this CPU");
  const int64_t rows = state.range(0), k = state.range(1), pairs = k / 2;
  GemmCase g(rows, k, DType::kBF16);
  const auto* w = reinterpret_cast<const uint16_t*>(g.bytes.data());
  std::vector<uint32_t> store(static_cast<size_t>(rows * pairs) + 16);
  auto* rp = reinterpret_cast<uint32_t*>((reinterpret_cast<uintptr_t>(store.data()) + 63) / 64 * 64);
  for (int64_t r0 = 0; r0 < rows; r0 += kPanelRows) pack_panel<Bf16Pairs>(w, k, r0, 0, pairs, rp + r0 * pairs);
  std::vector<uint16_t> xb(static_cast<size_t>(k));
  std::vector<float> y(static_cast<size_t>(rows));
  decode_counters(state, g, y, runs_a_second(state, [&] {
                    round_x(g.x.data(), k, xb.data());
                    decode(rp, rows, k, reinterpret_cast<const uint32_t*>(xb.data()), y.data());
                    benchmark::DoNotOptimize(y.data());
                  }));
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
  std::vector<float> y(static_cast<size_t>(rows));
  decode_counters(state, g, y, runs_a_second(state, [&] {
                    round_x(g.x.data(), k, xb.data());
                    decode_interleaved(ip, rows, k, xb.data(), y.data());
                    benchmark::DoNotOptimize(y.data());
                  }));
}

BENCHMARK(BM_OuterGemm<Bf16Pairs>)
    ->Name("BM_OuterProbe")
    ->Args({8192, 2048})
    ->Args({2048, 8192})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OuterGemm<F16Widened>)
    ->Name("BM_OuterProbeF16")
    ->Args({8192, 2048})
    ->Args({2048, 8192})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_OuterDecodeProbe)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);
BENCHMARK(BM_InterleavedDecodeProbe)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);

}  // namespace
