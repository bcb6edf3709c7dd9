// What cpu_matmul_bench's files share (cpu_matmul_bench.cpp, and onednn_gemm.cpp where
// oneDNN is there): a thread's CPU time, the GEMM's operands, and a loop timed on every
// thread of a pool at once.
#pragma once

#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/kernels.h"
#include "core/dtype.h"
#include "core/thread_pool.h"

namespace tessera::bench {

inline double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// FLOP per CPU second of a register-only loop (best of three).
inline double loop_rate(float (*loop)(int64_t), int64_t (*flops)(int64_t), int64_t iterations = 20'000'000) {
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const double start = thread_seconds();
    benchmark::DoNotOptimize(loop(iterations));
    best = std::max(best, static_cast<double>(flops(iterations)) / (thread_seconds() - start));
  }
  return best;
}

// Runs of fn per CPU second of the thread, over the benchmark's iterations.
template <typename Fn>
double runs_a_second(benchmark::State& state, Fn fn) {
  int64_t runs = 0;
  const double start = thread_seconds();
  for (auto _ : state) {
    fn();
    ++runs;
  }
  return static_cast<double>(runs) / (thread_seconds() - start);
}

// A GEMM's operands: 512 tokens of random x, `rows` x k random weights in `dtype`, y.
struct GemmCase {
  static constexpr int64_t kTokens = 512;
  std::vector<float> x, y;
  std::vector<uint8_t> bytes;
  GemmCase(int64_t rows, int64_t k, DType dtype)
      : x(static_cast<size_t>(kTokens * k)), y(static_cast<size_t>(kTokens * rows)) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> w(static_cast<size_t>(rows * k));
    for (float& v : x) v = dist(rng);
    for (float& v : w) v = dist(rng);
    bytes.resize(w.size() * dtype_size(dtype));
    cpu::from_f32(w.data(), static_cast<int64_t>(w.size()), dtype, bytes.data());
  }
};

// Seconds for fn(i) run once on each thread i of the pool, all at once: the calling
// thread's CPU time when the pool is that thread alone, else wall time.
template <typename Fn>
double on_every_thread(ThreadPool& pool, Fn fn) {
  const double cpu_start = thread_seconds();
  const auto start = std::chrono::steady_clock::now();
  pool.parallel_for(pool.size(), 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) fn(i);
  });
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
  return pool.size() == 1 ? thread_seconds() - cpu_start : wall.count();
}

// FLOP per second of the register-only tile loop (amx.h's dot_loop) on `threads` threads
// at once, as on_every_thread times it, best of three: the peak the AMX GEMM on as many
// threads is put against. Only where cpu::amx_active().
inline double tile_rate(size_t threads) {
  constexpr int64_t kIterations = 1'000'000;
  ThreadPool pool(threads);
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const double seconds =
        on_every_thread(pool, [](size_t) { benchmark::DoNotOptimize(cpu::amx::dot_loop(kIterations)); });
    best = std::max(
        best, static_cast<double>(threads) * static_cast<double>(cpu::amx::dot_loop_flops(kIterations)) / seconds);
  }
  return best;
}

}  // namespace tessera::bench
