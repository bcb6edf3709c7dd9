// The CPU matmul alone on one thread, in that thread's CPU time (Google Benchmark's
// default), so that other work on a shared machine moves the figure less than wall time
// would: prefill's GEMM on the Llama-3.2-1B MLP shapes at 512 tokens, for f32, bf16 and
// f16 weights, as a share of the f32 FMA loop's rate on the same thread (and, for bf16
// where it takes AVX-512 BF16 dot products, of that instruction's loop).
//   BM_Gemm/<dtype>/<rows>/<k>   counters: GFLOPs (per CPU second of the thread), fma_share,
//                                dot_share (of those loops' rates, also in CPU time)
// Run: build/bin/cpu_matmul_bench   (docs/benchmarks.md, "f16 prefill")
#include <benchmark/benchmark.h>

#include <time.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/bf16_dot.h"
#include "backend/cpu/kernels.h"
#include "core/dtype.h"

namespace {

using tessera::DType;
namespace cpu = tessera::cpu;

double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// FLOP per CPU second of a register-only loop (best of three).
double loop_rate(float (*loop)(int64_t), int64_t (*flops)(int64_t)) {
  constexpr int64_t kIterations = 20'000'000;
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const double start = thread_seconds();
    benchmark::DoNotOptimize(loop(kIterations));
    best = std::max(best, static_cast<double>(flops(kIterations)) / (thread_seconds() - start));
  }
  return best;
}

void BM_Gemm(benchmark::State& state, DType dtype) {
  constexpr int64_t kTokens = 512;
  const int64_t rows = state.range(0), k = state.range(1);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(kTokens * k)), w(static_cast<size_t>(rows * k));
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng);
  std::vector<uint8_t> bytes(w.size() * tessera::dtype_size(dtype));
  cpu::from_f32(w.data(), static_cast<int64_t>(w.size()), dtype, bytes.data());
  std::vector<float> y(static_cast<size_t>(kTokens * rows));
  static const double fma_rate = loop_rate(cpu::fma_loop, cpu::fma_loop_flops);
  const bool dots = dtype == DType::kBF16 && cpu::bf16_dot_active();
  const double dot_rate = dots ? loop_rate(cpu::bf16_dot::dot_loop, cpu::bf16_dot::dot_loop_flops) : 0;
  int64_t runs = 0;
  const double start = thread_seconds();
  for (auto _ : state) {
    cpu::matmul_rows(x.data(), kTokens, k, bytes.data(), dtype, rows, y.data(), rows);
    benchmark::DoNotOptimize(y.data());
    ++runs;
  }
  const double rate = 2.0 * static_cast<double>(kTokens * rows * k) * static_cast<double>(runs) /
                      (thread_seconds() - start);  // FLOP per CPU second
  state.counters["GFLOPs"] = rate * 1e-9;
  state.counters["fma_share"] = rate / fma_rate;
  if (dots) state.counters["dot_share"] = rate / dot_rate;
  state.SetLabel(cpu::isa_name());
}

BENCHMARK_CAPTURE(BM_Gemm, f32, DType::kF32)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Gemm, bf16, DType::kBF16)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Gemm, f16, DType::kF16)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
