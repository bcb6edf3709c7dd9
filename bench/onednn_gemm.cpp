// oneDNN (Debian 12's libdnnl 2.6, its brgemm kernels on AMX tiles where the CPU has
// them) as a measured peer of tessera's bf16 GEMM on the same operands as
// BM_GemmAllThreads/bf16: a well-kept library's rate as a share of the same tile loop
// tells how close to that loop's peak a GEMM gets on this CPU (issue 15, point 4).
// Part of cpu_matmul_bench only where CMake finds oneDNN (apt-get install libdnnl-dev);
// without it the benchmark is built and runs without these two. oneDNN runs on its own
// threads (OpenMP: OMP_NUM_THREADS, else every CPU), timed in wall time (on one thread in
// the calling thread's CPU time, as BM_Gemm).
//   BM_OnednnGemm/<rows>/<k>/<packed>  x rounded to bf16 by a oneDNN reorder, then the
//       matmul, both timed (tessera's GEMM rounds and packs x inside its time too); the
//       weights as tessera holds them, [rows][k] (packed 0: oneDNN copies them into its
//       kernel's layout inside each call), or reordered into its own layout once,
//       untimed (1). Counters GFLOPs, amx_share (of bench::tile_rate on as many threads);
//       label: the kernel oneDNN chose and its ISA.
//   BM_OnednnDecode/<rows>/<k>  one token, weights as given: GB of weights a second.
//   BM_OnednnRows/<rows>/<k>/<packed>  whether oneDNN's sums are batch invariant: the
//       share of outputs of tokens computed in calls of 1, 7, 16, 100 and 256 tokens that
//       differ in any bit from the same tokens' outputs in the 512-token call (differ_1 ..
//       differ_256), and the share that differ from tessera's own GEMM's (cpu::matmul_rows
//       on one thread: differ_tessera); the label names the kernels and ends with an FNV-1a
//       hash of the 512-token call's outputs, to hold runs at different OMP_NUM_THREADS (or
//       on different machines) against each other.
#include <benchmark/benchmark.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backend/cpu/kernels.h"
#include "cpu_bench.h"

namespace {

using dnnl::memory;
using Dt = memory::data_type;
using Tag = memory::format_tag;
namespace bench = tessera::bench;
namespace cpu = tessera::cpu;

// The threads oneDNN's OpenMP runtime starts: OMP_NUM_THREADS, else every CPU.
size_t omp_threads() {
  const char* text = std::getenv("OMP_NUM_THREADS");
  const long n = text == nullptr ? 0 : std::strtol(text, nullptr, 10);
  return n > 0 ? static_cast<size_t>(n) : std::thread::hardware_concurrency();
}

// y[t][r] = sum over k of bf16(x[t]) w[r]: a oneDNN reorder rounds x's `tokens` f32 rows
// to bf16, then a oneDNN matmul multiplies them by the bf16 weights [rows][k] (a k x rows
// matrix of column-major layout to oneDNN) into f32 y.
class Gemm {
 public:
  Gemm(const float* x, int64_t tokens, int64_t k, const void* weights, int64_t rows, float* y, bool packed) {
    const memory::desc x_f32({tokens, k}, Dt::f32, Tag::ab), x_bf16({tokens, k}, Dt::bf16, Tag::ab);
    const memory::desc given({k, rows}, Dt::bf16, Tag::ba), any({k, rows}, Dt::bf16, Tag::any);
    const memory::desc y_f32({tokens, rows}, Dt::f32, Tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_bf16, packed ? any : given, y_f32), engine_);
    x_ = memory(x_f32, engine_, const_cast<float*>(x));
    rounded_ = memory(x_bf16, engine_);
    y_ = memory(y_f32, engine_, y);
    memory w(given, engine_, const_cast<void*>(weights));
    if (pd.weights_desc() == given) {
      w_ = w;
    } else {  // oneDNN's own layout, reordered once
      w_ = memory(pd.weights_desc(), engine_);
      dnnl::reorder(w, w_).execute(stream_, w, w_);
      stream_.wait();
    }
    round_ = dnnl::reorder(x_, rounded_);
    matmul_ = dnnl::matmul(pd);
    kernel_ = pd.impl_info_str();
  }
  void run() {
    round_.execute(stream_, x_, rounded_);
    matmul_.execute(stream_, {{DNNL_ARG_SRC, rounded_}, {DNNL_ARG_WEIGHTS, w_}, {DNNL_ARG_DST, y_}});
    stream_.wait();
  }
  const std::string& kernel() const { return kernel_; }

 private:
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  memory x_, rounded_, w_, y_;
  dnnl::reorder round_;
  dnnl::matmul matmul_;
  std::string kernel_;
};

// Runs gemm once untimed (oneDNN's kernels generated, its threads started), then once an
// iteration of `state`, counting them in `runs`: seconds of wall time, or of the calling
// thread's CPU time when oneDNN runs on that thread alone.
double timed_runs(benchmark::State& state, Gemm& gemm, size_t threads, int64_t& runs) {
  gemm.run();
  const double cpu_start = bench::thread_seconds();
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    gemm.run();
    ++runs;
  }
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start;
  return threads == 1 ? bench::thread_seconds() - cpu_start : wall.count();
}

void BM_OnednnGemm(benchmark::State& state) {
  constexpr int64_t kTokens = bench::GemmCase::kTokens;
  const int64_t rows = state.range(0), k = state.range(1);
  bench::GemmCase g(rows, k, tessera::DType::kBF16);
  const size_t threads = omp_threads();
  // Before oneDNN's first parallel region: its threads spin a while after each one.
  const double tile_rate = cpu::amx_active() ? bench::tile_rate(threads) : 0;
  Gemm gemm(g.x.data(), kTokens, k, g.bytes.data(), rows, g.y.data(), state.range(2) != 0);
  int64_t runs = 0;
  const double seconds = timed_runs(state, gemm, threads, runs);
  const double rate = 2.0 * static_cast<double>(kTokens * rows * k) * static_cast<double>(runs) / seconds;
  state.counters["GFLOPs"] = rate * 1e-9;
  if (tile_rate > 0) state.counters["amx_share"] = rate / tile_rate;
  state.counters["threads"] = static_cast<double>(threads);
  state.SetLabel(gemm.kernel());
}
// The Llama-3.2-1B MLP shapes of BM_GemmAllThreads: up [8192 x 2048] and down [2048 x 8192].
void Shapes(benchmark::internal::Benchmark* b) {
  for (const auto& [rows, k] : {std::pair<int64_t, int64_t>{8192, 2048}, {2048, 8192}})
    for (const int64_t packed : {0, 1}) b->Args({rows, k, packed});
}
BENCHMARK(BM_OnednnGemm)->Apply(Shapes)->UseRealTime()->Unit(benchmark::kMillisecond);

// One token, as decode calls it: GB of weights read a second (32 MiB of bf16, from memory),
// against BM_Decode/bf16 (tessera's, one thread): what oneDNN would cost decode if it took
// prefill and decode had to sum in its order. Weights as tessera holds them.
//   BM_OnednnDecode/<rows>/<k>   counter GBs
void BM_OnednnDecode(benchmark::State& state) {
  const int64_t rows = state.range(0), k = state.range(1);
  bench::GemmCase g(rows, k, tessera::DType::kBF16);
  const size_t threads = omp_threads();
  Gemm gemm(g.x.data(), 1, k, g.bytes.data(), rows, g.y.data(), false);
  int64_t runs = 0;
  const double seconds = timed_runs(state, gemm, threads, runs);
  state.counters["GBs"] = static_cast<double>(g.bytes.size()) * static_cast<double>(runs) / seconds * 1e-9;
  state.counters["threads"] = static_cast<double>(threads);
  state.SetLabel(gemm.kernel());
}
BENCHMARK(BM_OnednnDecode)->Args({8192, 2048})->Args({2048, 8192})->UseRealTime()->Unit(benchmark::kMillisecond);

// The FNV-1a hash of n floats' bits, in hexadecimal.
std::string hash(const float* y, size_t n) {
  uint64_t h = 14695981039346656037ull;
  const auto* bytes = reinterpret_cast<const unsigned char*>(y);
  for (size_t i = 0; i < n * sizeof(float); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(h));
  return text;
}

void BM_OnednnRows(benchmark::State& state) {
  constexpr int64_t kTokens = bench::GemmCase::kTokens;
  const int64_t rows = state.range(0), k = state.range(1);
  const bool packed = state.range(2) != 0;
  bench::GemmCase g(rows, k, tessera::DType::kBF16);
  Gemm whole(g.x.data(), kTokens, k, g.bytes.data(), rows, g.y.data(), packed);
  whole.run();
  std::string kernels = whole.kernel();
  for (auto _ : state) {
    // Tokens [first, first + count) in a call of their own, against the whole call's rows.
    for (const int64_t count : {1, 7, 16, 100, 256}) {
      const int64_t first = count == 256 ? 256 : 100 - count / 2;
      std::vector<float> y(static_cast<size_t>(count * rows));
      Gemm part(g.x.data() + first * k, count, k, g.bytes.data(), rows, y.data(), packed);
      part.run();
      int64_t differ = 0;
      for (int64_t i = 0; i < count * rows; ++i)
        differ +=
            std::memcmp(&y[static_cast<size_t>(i)], &g.y[static_cast<size_t>(first * rows + i)], sizeof(float)) != 0;
      state.counters["differ_" + std::to_string(count)] =
          static_cast<double>(differ) / static_cast<double>(count * rows);
      if (count == 1) kernels += ", 1 token: " + part.kernel();
    }
  }
  std::vector<float> own(g.y.size());
  cpu::matmul_rows(g.x.data(), kTokens, k, g.bytes.data(), tessera::DType::kBF16, rows, own.data(), rows);
  int64_t differ = 0;
  for (size_t i = 0; i < own.size(); ++i) differ += std::memcmp(&own[i], &g.y[i], sizeof(float)) != 0;
  state.counters["differ_tessera"] = static_cast<double>(differ) / static_cast<double>(own.size());
  state.counters["threads"] = static_cast<double>(omp_threads());
  state.SetLabel(kernels + ", y " + hash(g.y.data(), g.y.size()));
}
BENCHMARK(BM_OnednnRows)->Apply(Shapes)->Iterations(1)->Unit(benchmark::kMillisecond);

}  // namespace
