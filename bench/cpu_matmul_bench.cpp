// The CPU matmul alone on one thread, in that thread's CPU time (Google Benchmark's
// default), so that other work on a shared machine moves the figure less than wall time
// would: prefill's GEMM on the Llama-3.2-1B MLP shapes at 512 tokens, for f32, bf16 and
// f16 weights, as a share of the f32 FMA loop's rate on the same thread (and, for bf16
// where it takes AVX-512 BF16 dot products or AMX tiles, of that instruction's loop).
//   BM_Gemm/<dtype>/<rows>/<k>   counters: GFLOPs (per CPU second of the thread), fma_share,
//                                dot_share, amx_share (of those loops' rates, also in CPU time)
//   BM_GemmAllThreads/<bf16|f16>/<rows>/<k>/<placed>  the same through CpuDevice on every
//                                CPU (as prefill cuts it), in wall time, the weights as
//                                mapped (0) or in CpuDevice::place's layout (1, as a model's
//                                are); counters: GFLOPs, amx_share (of the tile loop on
//                                every CPU at once)
//   BM_AmxLadder/<rung>/<threads>/<place>  the AMX GEMM's inner loop one part at a time
//                                (amx.h's ladder), one thread, 8 or every CPU (0), where the
//                                OS puts them or pinned (1: CPUs 0, 1, 2, ..; 2: CPUs 0, 2,
//                                4, .., then the odd ones); GFLOPs, amx_share
//   BM_LoopThreads/<loop>/<threads>  the tile loop (0) or the f32 FMA loop (1) alone on 1 to
//                                16 threads at once: a thread's rate beside others; GFLOPs,
//                                per_thread_GFLOPs
//   BM_OnednnGemm, BM_OnednnRows  oneDNN's bf16 GEMM as a peer, where it is found
//                                (onednn_gemm.cpp)
//   BM_AmxOutside/<rows>/<k>     BM_Gemm/bf16's GEMM without its tile operations (amx.h's
//                                outside), on one thread: what it costs besides its inner
//                                loop; counter: ceiling_GFLOPs (its FLOP over that time),
//                                on any CPU with AVX-512 BF16
//   BM_Decode/<dtype>/<rows>/<k>/<lined>/<tokens>  one token (or 4: the tiles of a few),
//                                the weights from memory, rows one after another (lined 0)
//                                or in the layout CpuDevice::place gives them (1,
//                                weight_layout.h); counter: GBs (GB of weights per CPU
//                                second of the thread)
//   BM_LoneTokenAttention/<f16|bf16>/<positions>/<threads>  a lone token's attention
//                                through CpuDevice (the 1B shape's heads, a pool's scattered
//                                blocks, a layer's keys and values from memory), in wall time;
//                                counters: us_a_layer, GBs (of keys and values read)
// And attention's scores alone: dot_rows of <tokens> query rows (a KV head's query heads)
// over 512 keys of 64 in cache, 32 a call as a pool's blocks give them, in CPU time.
//   BM_CachedDotRows/<f32|f16|bf16>/<tokens>  counter: GFLOPs
// And one thread reading 1 GiB of CpuDevice's memory in pieces of <KiB> at shuffled places,
// asking for the next piece's lines as it reads its own (kernels.h's Ahead, as attention
// asks for the next block of the pool's: a head's 32 positions of a layer are 4 KiB), or in
// one stream (0): the read rate a KV cache's layout allows a core.
//   BM_PieceReads/<KiB, 0: one stream>  counter: GBs (per CPU second)
// And the thread pool's hand-off, in wall time: one parallel_for with no work on
// <threads> threads (the caller's included), what each of the ~130 a decode step makes
// costs beyond its work when every thread has a core.
//   BM_Handoff/<threads>          time per parallel_for; spin as TESSERA_SPIN_US says
// And a lone token's experts, a matmul a weight against CpuDevice::matmuls and matmuls_each
// (one parallel region for all of their rows), in turn within one run.
//   BM_LoneExperts/<threads>      counters each_GBs, together_GBs, gain
// Run: build/bin/cpu_matmul_bench   (docs/benchmarks.md, "f16 prefill")
#include <benchmark/benchmark.h>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/bf16_dot.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/weight_layout.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "cpu_bench.h"
#include "hwy/aligned_allocator.h"
#include "io/quantize.h"

namespace {

using tessera::DType;
namespace cpu = tessera::cpu;

using tessera::bench::GemmCase;
using tessera::bench::loop_rate;
using tessera::bench::on_every_thread;
using tessera::bench::runs_a_second;
using tessera::bench::thread_seconds;

void BM_Gemm(benchmark::State& state, DType dtype) {
  constexpr int64_t kTokens = GemmCase::kTokens;
  const int64_t rows = state.range(0), k = state.range(1);
  GemmCase g(rows, k, dtype);
  auto& [x, y, bytes] = g;
  static const double fma_rate = loop_rate(cpu::fma_loop, cpu::fma_loop_flops);
  const bool dots = dtype == DType::kBF16 && cpu::bf16_dot_active();
  const double dot_rate = dots ? loop_rate(cpu::bf16_dot::dot_loop, cpu::bf16_dot::dot_loop_flops) : 0;
  const bool tiles = dots && cpu::amx_active();
  const double tile_rate = tiles ? loop_rate(cpu::amx::dot_loop, cpu::amx::dot_loop_flops, 1'000'000) : 0;
  const double rate = 2.0 * static_cast<double>(kTokens * rows * k) * runs_a_second(state, [&] {
                        cpu::matmul_rows(x.data(), kTokens, k, bytes.data(), dtype, rows, y.data(), rows);
                        benchmark::DoNotOptimize(y.data());
                      });  // FLOP per CPU second
  state.counters["GFLOPs"] = rate * 1e-9;
  state.counters["fma_share"] = rate / fma_rate;
  if (dots) state.counters["dot_share"] = rate / dot_rate;
  if (tiles) state.counters["amx_share"] = rate / tile_rate;
  state.SetLabel(tiles ? "AMX" : cpu::isa_name());
}

// The same GEMM through CpuDevice on every CPU of the machine, cut over its threads as
// prefill's are (cpu_device.cpp's gemm_split), the weights as mapped or placed, in wall time: GFLOPs, and for bf16 on
// the tiles amx_share, of the tile loop run on every thread at once (best of three).
void BM_GemmAllThreads(benchmark::State& state, DType dtype) {
  const int64_t rows = state.range(0), k = state.range(1);
  GemmCase g(rows, k, dtype);
  tessera::CpuDevice device(std::thread::hardware_concurrency());
  const tessera::TensorView mapped{dtype, {rows, k}, g.bytes.data()};
  const tessera::TensorView weight = state.range(2) ? device.place(mapped).value() : mapped;
  const double tile_rate =
      dtype == DType::kBF16 && cpu::amx_active() ? tessera::bench::tile_rate(std::thread::hardware_concurrency()) : 0;
  int64_t runs = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    device.matmul(g.x.data(), GemmCase::kTokens, weight, {}, g.y.data());
    benchmark::DoNotOptimize(g.y.data());
    ++runs;
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  const double rate = 2.0 * static_cast<double>(GemmCase::kTokens * rows * k) * static_cast<double>(runs) /
                      took.count();  // FLOP per second of wall time
  state.counters["GFLOPs"] = rate * 1e-9;
  if (tile_rate > 0) state.counters["amx_share"] = rate / tile_rate;
  state.counters["threads"] = static_cast<double>(std::thread::hardware_concurrency());
}
// The MLP's two shapes, the weights as mapped and placed.
void mlp_shapes_placed(benchmark::internal::Benchmark* b) {
  for (const int64_t placed : {0, 1}) b->Args({8192, 2048, placed})->Args({2048, 8192, placed});
  b->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_GemmAllThreads, bf16, DType::kBF16)->Apply(mlp_shapes_placed);
BENCHMARK_CAPTURE(BM_GemmAllThreads, f16, DType::kF16)->Apply(mlp_shapes_placed);

// The AMX GEMM's inner loop in rungs (amx.h's ladder: 0, the tile loads from L1 only; 1,
// the A tiles through a row pair's 32 KiB; 2, the B tiles through the k block's 512 KiB; 3,
// the C tiles through the 256 KiB of partial sums; and rung 0's probes: 4, its loads
// alone, counted as if its products ran; 5, only its A tiles loaded each step), on one
// thread in its CPU time (threads 1) or on 8 or every CPU (threads 0) at once in wall
// time: GFLOPs and amx_share, of the tile loop on as many threads placed alike. BM_Gemm is
// the rung above them: the whole GEMM. Pinning the threads to consecutive CPUs or to every
// other one tells whether two of them sharing a core (a VM may not say which CPUs do) is
// what lowers the share on every CPU.
//   BM_AmxLadder/<rung>/<threads>/<place>
void BM_AmxLadder(benchmark::State& state) {
  if (!cpu::amx_active()) return state.SkipWithError("no AMX tiles on this CPU (or TESSERA_AMX=0)");
  const int rung = static_cast<int>(state.range(0));
  const size_t cpus = std::thread::hardware_concurrency();
  const size_t threads = state.range(1) == 0 ? cpus : static_cast<size_t>(state.range(1));
  const int64_t place = state.range(2);
  constexpr int64_t kPasses = 64;
  cpu_set_t caller{};
  sched_getaffinity(0, sizeof(caller), &caller);  // the calling thread runs a share too: restored below
  auto pin = [&](size_t i) {                      // the calling thread to the CPU of index i
    if (place == 0) return;
    const size_t to = place == 1 ? i % cpus : (2 * i) % cpus + (2 * i / cpus) % 2;
    cpu_set_t one{};
    CPU_SET(to, &one);
    sched_setaffinity(0, sizeof(one), &one);
  };
  tessera::ThreadPool pool(threads);
  auto pinned = [&](auto loop) {  // seconds: CPU time on one thread, else wall time
    return on_every_thread(pool, [&](size_t i) {
      pin(i);
      benchmark::DoNotOptimize(loop());
    });
  };
  double tile_seconds = 1e30;
  for (int pass = 0; pass < 3; ++pass)
    tile_seconds = std::min(tile_seconds, pinned([] { return cpu::amx::dot_loop(1'000'000); }));
  pinned([&] { return cpu::amx::ladder(rung, 1); });  // each thread's operands made
  double seconds = 0;
  int64_t runs = 0;
  for (auto _ : state) {
    seconds += pinned([&] { return cpu::amx::ladder(rung, kPasses); });
    ++runs;
  }
  const double flop = static_cast<double>(pool.size()) * static_cast<double>(cpu::amx::ladder_flops(kPasses)) *
                      static_cast<double>(runs);
  const double tile_rate =
      static_cast<double>(pool.size()) * static_cast<double>(cpu::amx::dot_loop_flops(1'000'000)) / tile_seconds;
  state.counters["GFLOPs"] = flop / seconds * 1e-9;
  state.counters["amx_share"] = flop / seconds / tile_rate;
  state.counters["threads"] = static_cast<double>(pool.size());
  sched_setaffinity(0, sizeof(caller), &caller);
}
BENCHMARK(BM_AmxLadder)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5}, {1, 8, 0}, {0}})
    ->ArgsProduct({{0, 3}, {8}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

// The register-only loops alone (0: the tile loop, amx.h's dot_loop; 1: the f32 FMA loop)
// on <threads> threads at once, where the OS puts them, in wall time (CPU time on one
// thread): what a thread's rate becomes as others run beside it, with no memory traffic
// at all. A fall that both loops share is the CPUs' (their clock, or hardware threads the
// VM does not show as such), not the tile unit's or the GEMM's blocking.
//   BM_LoopThreads/<loop>/<threads>   counters GFLOPs, per_thread_GFLOPs, running (the share
//                                     of the time the threads ran), running_GFLOPs
void BM_LoopThreads(benchmark::State& state) {
  const bool tiles = state.range(0) == 0;
  const auto threads = static_cast<size_t>(state.range(1));
  if (tiles && !cpu::amx_active()) return state.SkipWithError("no AMX tiles on this CPU (or TESSERA_AMX=0)");
  if (threads > std::thread::hardware_concurrency()) return state.SkipWithError("more threads than CPUs");
  const int64_t iterations = tiles ? 200'000 : 2'000'000;  // about 5 ms on one thread
  tessera::ThreadPool pool(threads);
  std::vector<double> ran(threads);  // each thread's CPU seconds in the loop
  double seconds = 0;
  int64_t runs = 0;
  for (auto _ : state) {
    seconds += on_every_thread(pool, [&](size_t i) {
      const double cpu_start = thread_seconds();
      benchmark::DoNotOptimize(tiles ? cpu::amx::dot_loop(iterations) : cpu::fma_loop(iterations));
      ran[i] += thread_seconds() - cpu_start;
    });
    ++runs;
  }
  const double flop =
      static_cast<double>(threads) * static_cast<double>(runs) *
      static_cast<double>(tiles ? cpu::amx::dot_loop_flops(iterations) : cpu::fma_loop_flops(iterations));
  double cpu_seconds = 0;
  for (const double r : ran) cpu_seconds += r;
  state.counters["GFLOPs"] = flop / seconds * 1e-9;
  state.counters["per_thread_GFLOPs"] = flop / seconds / static_cast<double>(threads) * 1e-9;
  // The share of the time the OS ran the threads, and a thread's rate while it ran: a fall
  // of that rate is below the OS (the CPU's clock, or a host's hardware threads), a fall
  // of the share is other work on the CPUs (or, in a VM, the host's).
  state.counters["running"] = cpu_seconds / (seconds * static_cast<double>(threads));
  state.counters["running_GFLOPs"] = flop / cpu_seconds * 1e-9;
}
BENCHMARK(BM_LoopThreads)->ArgsProduct({{0, 1}, {1, 2, 4, 8, 12, 16}})->UseRealTime()->Unit(benchmark::kMillisecond);

// BM_Gemm/bf16's GEMM with no tile operation (amx.h's outside), one thread, CPU time.
void BM_AmxOutside(benchmark::State& state) {
  if (!cpu::amx::outside_runs()) return state.SkipWithError("no AVX-512 BF16 on this CPU");
  const int64_t rows = state.range(0), k = state.range(1);
  GemmCase g(rows, k, DType::kBF16);
  const auto* w = reinterpret_cast<const uint16_t*>(g.bytes.data());
  int64_t runs = 0;
  const double start = thread_seconds();
  for (auto _ : state) {
    cpu::amx::outside(g.x.data(), GemmCase::kTokens, k, w, rows, g.y.data(), rows);
    benchmark::DoNotOptimize(g.y.data());
    ++runs;
  }
  state.counters["ceiling_GFLOPs"] = 2.0 * static_cast<double>(GemmCase::kTokens * rows * k) *
                                     static_cast<double>(runs) / (thread_seconds() - start) * 1e-9;
}
BENCHMARK(BM_AmxOutside)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);

// Decode's matmul alone: one token against the same shapes on one thread, the weights read
// once a call (32 MiB in 16 bits: from memory, not cache), in GB of weights per CPU second.
void BM_Decode(benchmark::State& state, DType dtype) {
  const int64_t rows = state.range(0), k = state.range(1), tokens = state.range(3);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens * k)), w(static_cast<size_t>(rows * k));
  for (float& v : x) v = dist(rng);
  for (float& v : w) v = dist(rng);
  const size_t size = w.size() * tessera::dtype_size(dtype);
  auto bytes = hwy::AllocateAligned<uint8_t>(size), lined = hwy::AllocateAligned<uint8_t>(size);  // as a Buffer's
  cpu::from_f32(w.data(), static_cast<int64_t>(w.size()), dtype, bytes.get());
  const int64_t group = state.range(2) == 0 ? 1 : cpu::matmul_row_group(dtype);
  if (group != 1) {
    cpu::interleave_rows(bytes.get(), dtype, k, group, 0, rows, lined.get());
    bytes.swap(lined);
  }
  std::vector<float> y(static_cast<size_t>(tokens * rows));
  state.counters["GBs"] = static_cast<double>(size) * 1e-9 * runs_a_second(state, [&] {
                            cpu::matmul_rows(x.data(), tokens, k, bytes.get(), dtype, rows, y.data(), rows, group);
                            benchmark::DoNotOptimize(y.data());
                          });
  state.SetLabel(cpu::isa_name());
}

BENCHMARK_CAPTURE(BM_Gemm, f32, DType::kF32)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Gemm, bf16, DType::kBF16)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Gemm, f16, DType::kF16)->Args({8192, 2048})->Args({2048, 8192})->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, bf16, DType::kBF16)
    ->ArgsProduct({{8192}, {2048}, {0, 1}, {1, 4}})
    ->ArgsProduct({{2048}, {8192}, {0, 1}, {1, 4}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Decode, f16, DType::kF16)
    ->ArgsProduct({{8192}, {2048}, {0, 1}, {1, 4}})
    ->ArgsProduct({{2048}, {8192}, {0, 1}, {1, 4}})
    ->Unit(benchmark::kMillisecond);

// A decode step's matmuls (16-bit or GGUF blocks) through CpuDevice on <threads> threads (0: every CPU of
// the machine), as a layer of the 1B shape calls them (q/k/v and gate/up each one call of
// matmuls, o and down one matmul each), four layers (464 MiB in 16 bits, from memory), the weights
// placed; GB of weights a second of wall time: how the rows' chunks among threads read.
void BM_DecodeAllThreads(benchmark::State& state, DType dtype) {
  const auto threads = state.range(0) > 0 ? static_cast<size_t>(state.range(0)) : std::thread::hardware_concurrency();
  tessera::CpuDevice device(threads);
  constexpr int64_t kLayers = 4, kHidden = 2048, kKv = 512, kFfn = 8192;
  const int64_t shapes[][2] = {{kHidden, kHidden}, {kKv, kHidden},     {kKv, kHidden}, {kFfn, kHidden},
                               {kFfn, kHidden},    {kHidden, kHidden}, {kHidden, kFfn}};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<std::vector<uint8_t>> blobs;
  std::vector<tessera::TensorView> w;
  double bytes = 0;
  for (int64_t layer = 0; layer < kLayers; ++layer)
    for (const auto& [rows, k] : shapes) {
      std::vector<float> values(static_cast<size_t>(rows * k));
      for (float& v : values) v = dist(rng);
      blobs.emplace_back(tessera::dtype_bytes(dtype, rows * k));
      if (tessera::dtype_is_quantized(dtype)) {
        tessera::quantize_blocks(dtype, values, blobs.back());
      } else {
        cpu::from_f32(values.data(), rows * k, dtype, blobs.back().data());
      }
      w.push_back(device.place(tessera::TensorView{dtype, {rows, k}, blobs.back().data()}).value());
      bytes += static_cast<double>(blobs.back().size());
    }
  std::vector<float> x(kFfn, 0.5f), y(4 * kFfn);
  const tessera::TensorView none;  // no bias
  const auto layer = [&](const tessera::TensorView* lw) {
    using P = tessera::Device::Projection;
    const P qkv[] = {
        {&lw[0], &none, y.data()}, {&lw[1], &none, y.data() + kHidden}, {&lw[2], &none, y.data() + kHidden + kKv}};
    device.matmuls(x.data(), 1, qkv);
    device.matmul(x.data(), 1, lw[5], {}, y.data());
    const P gate_up[] = {{&lw[3], &none, y.data()}, {&lw[4], &none, y.data() + kFfn}};
    device.matmuls(x.data(), 1, gate_up);
    device.matmul(x.data(), 1, lw[6], {}, y.data());
  };
  int64_t runs = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (int64_t l = 0; l < kLayers; ++l) layer(&w[static_cast<size_t>(l) * std::size(shapes)]);
    benchmark::DoNotOptimize(y.data());
    ++runs;
  }
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  state.counters["GBs"] = bytes * static_cast<double>(runs) / took.count() * 1e-9;
  state.counters["threads"] = static_cast<double>(threads);
  state.SetLabel(cpu::isa_name());
}
void decode_threads(benchmark::internal::Benchmark* b) {
  b->Arg(2)->Arg(0)->Iterations(400)->UseRealTime()->Unit(benchmark::kMillisecond);
}
BENCHMARK_CAPTURE(BM_DecodeAllThreads, f16, DType::kF16)->Apply(decode_threads);
BENCHMARK_CAPTURE(BM_DecodeAllThreads, bf16, DType::kBF16)->Apply(decode_threads);
BENCHMARK_CAPTURE(BM_DecodeAllThreads, q8_0, DType::kQ8_0)->Apply(decode_threads);
BENCHMARK_CAPTURE(BM_DecodeAllThreads, q4_0, DType::kQ4_0)->Apply(decode_threads);
BENCHMARK_CAPTURE(BM_DecodeAllThreads, q4_k, DType::kQ4_K)->Apply(decode_threads);

// A lone token's experts through CpuDevice on <threads> threads, in wall time: Qwen3-30B-A3B's
// 8 experts a layer (gate and up [768, 2048], down [2048, 768], bf16) of 16 layers (1.1 GiB,
// from memory), each iteration one pass of the layers as a matmul a weight (24 parallel
// regions a layer; TESSERA_MATMULS_TOGETHER=0 in tessera) and one as model/moe.cpp calls
// them (matmuls for the gates and ups, matmuls_each for the downs: 2 regions), in turn, so
// that the machine's drift falls on both. Counters: each_GBs, together_GBs (GB of weights a
// second) and gain (together / each - 1).
//   BM_LoneExperts/<threads>
void BM_LoneExperts(benchmark::State& state) {
  constexpr int64_t kHidden = 2048, kInter = 768, kExperts = 8, kLayers = 16;
  const int64_t matrix = kInter * kHidden;
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> w(static_cast<size_t>(matrix)), x(static_cast<size_t>(kHidden));
  for (float& v : w) v = dist(rng);
  for (float& v : x) v = dist(rng);
  std::vector<uint8_t> one(static_cast<size_t>(matrix) * 2);
  cpu::from_f32(w.data(), matrix, DType::kBF16, one.data());
  const int64_t count = kLayers * kExperts * 3;  // every matrix its own copy of `one`
  std::vector<uint8_t> bytes(one.size() * static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) std::copy(one.begin(), one.end(), bytes.begin() + i * matrix * 2);
  std::vector<tessera::TensorView> views;
  for (int64_t i = 0; i < count; ++i) {
    const bool down = i % 3 == 2;
    views.push_back({DType::kBF16, down ? std::vector<int64_t>{kHidden, kInter} : std::vector<int64_t>{kInter, kHidden},
                     bytes.data() + i * matrix * 2});
  }
  tessera::CpuDevice device(static_cast<size_t>(state.range(0)));
  std::vector<float> gate_up(static_cast<size_t>(2 * kExperts * kInter)), down(static_cast<size_t>(kExperts * kHidden));
  const tessera::TensorView no_bias{};
  const auto pass = [&](bool together) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t l = 0; l < kLayers; ++l) {
      std::vector<tessera::Device::Projection> ups, downs;
      std::vector<const float*> xs;
      for (int64_t e = 0; e < kExperts; ++e) {
        const auto at = static_cast<size_t>((l * kExperts + e) * 3);
        ups.push_back({&views[at], &no_bias, gate_up.data() + 2 * e * kInter});
        ups.push_back({&views[at + 1], &no_bias, gate_up.data() + (2 * e + 1) * kInter});
        downs.push_back({&views[at + 2], &no_bias, down.data() + e * kHidden});
        xs.push_back(gate_up.data() + 2 * e * kInter);
      }
      if (together) {
        device.matmuls(x.data(), 1, ups);
        device.matmuls_each(1, xs, downs);
      } else {
        for (const auto& p : ups) device.matmul(x.data(), 1, *p.w, no_bias, p.y);
        for (size_t e = 0; e < downs.size(); ++e) device.matmul(xs[e], 1, *downs[e].w, no_bias, downs[e].y);
      }
    }
    benchmark::DoNotOptimize(down.data());
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  double each = 0, together = 0;
  for (auto _ : state) {
    each += pass(false);
    together += pass(true);
  }
  const double read = static_cast<double>(bytes.size()) * static_cast<double>(state.iterations());
  state.counters["each_GBs"] = read / each * 1e-9;
  state.counters["together_GBs"] = read / together * 1e-9;
  state.counters["gain"] = each / together - 1;
}
BENCHMARK(BM_LoneExperts)->Arg(1)->Arg(2)->Iterations(40)->UseRealTime()->Unit(benchmark::kMillisecond);

// A lone token's attention (decode) through CpuDevice, in wall time: the 1B shape's 32
// query heads over 8 KV heads of 64 dimensions, <positions> positions in blocks of 32
// scattered as a pool hands them out, in the cache dtype, over 64 layers in turn (a layer's
// keys and values from memory, as in a decode step whose weights pass between layers).
// Counters: us_a_layer, GBs (of keys and values read).
//   BM_LoneTokenAttention/<f16|bf16>/<positions>/<threads>
void BM_LoneTokenAttention(benchmark::State& state, DType dtype) {
  constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 64, kLayers = 64, kBlock = 32;
  const int64_t positions = state.range(0), blocks = (positions + kBlock - 1) / kBlock;
  tessera::CpuDevice device(static_cast<size_t>(state.range(1)));
  tessera::KvPages pages{.dtype = dtype,
                         .blocks = blocks,
                         .block_size = kBlock,
                         .layers = kLayers,
                         .n_kv_heads = kKvHeads,
                         .head_dim = kHeadDim};
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(pages.blocks * pages.block_elements()));
  for (float& v : values) v = dist(rng);
  auto memory = device.alloc(pages.block_bytes() * static_cast<size_t>(blocks));  // a pool's pages, as a model's
  if (!memory.ok()) return state.SkipWithError("cannot allocate the pages");
  cpu::from_f32(values.data(), static_cast<int64_t>(values.size()), dtype, memory->data());
  pages.base = memory->data();
  std::vector<int32_t> table(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) table[static_cast<size_t>(b)] = static_cast<int32_t>(b);
  std::shuffle(table.begin(), table.end(), rng);
  std::vector<float> q(kHeads * kHeadDim), out(q.size());
  for (float& v : q) v = dist(rng);
  int64_t calls = 0;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    for (int64_t layer = 0; layer < kLayers; ++layer) {
      device.attention({.q = q.data(),
                        .out = out.data(),
                        .pages = &pages,
                        .layer = layer,
                        .blocks = table,
                        .tokens = 1,
                        .pos0 = positions - 1,
                        .n_heads = kHeads,
                        .sliding_window = 0,
                        .scale = 0.125f});
      benchmark::DoNotOptimize(out.data());
    }
    calls += kLayers;
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  state.counters["us_a_layer"] = took / static_cast<double>(calls) * 1e6;
  state.counters["GBs"] = static_cast<double>(calls * 2 * kKvHeads * positions * kHeadDim) *
                          static_cast<double>(tessera::dtype_size(dtype)) / took * 1e-9;
}
BENCHMARK_CAPTURE(BM_LoneTokenAttention, f16, DType::kF16)
    ->ArgsProduct({{512, 2048, 4096}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_LoneTokenAttention, bf16, DType::kBF16)
    ->ArgsProduct({{512, 2048, 4096}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_CachedDotRows(benchmark::State& state, DType dtype) {
  constexpr int64_t kKeys = 512, kDim = 64, kBlock = 32;
  cpu::cap_isa_from_env();  // TESSERA_ISA=avx2, as CpuDevice does
  const int64_t tokens = state.range(0);
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> keys(kKeys * kDim), q(static_cast<size_t>(tokens * kDim)), y(static_cast<size_t>(tokens * kKeys));
  for (float& v : keys) v = dist(rng);
  for (float& v : q) v = dist(rng);
  const size_t size = tessera::dtype_size(dtype);
  std::vector<uint8_t> bytes(keys.size() * size);
  cpu::from_f32(keys.data(), static_cast<int64_t>(keys.size()), dtype, bytes.data());
  for (auto _ : state) {
    for (int64_t b = 0; b < kKeys; b += kBlock)
      cpu::dot_rows(q.data(), tokens, kDim, bytes.data() + static_cast<size_t>(b * kDim) * size, dtype, kBlock,
                    y.data() + b, kKeys);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOPs"] =
      benchmark::Counter(2e-9 * static_cast<double>(tokens * kKeys * kDim) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}
BENCHMARK_CAPTURE(BM_CachedDotRows, f32, DType::kF32)->Arg(1)->Arg(4)->Arg(8);
BENCHMARK_CAPTURE(BM_CachedDotRows, f16, DType::kF16)->Arg(1)->Arg(4)->Arg(8);
BENCHMARK_CAPTURE(BM_CachedDotRows, bf16, DType::kBF16)->Arg(1)->Arg(4)->Arg(8);

void BM_PieceReads(benchmark::State& state) {
  constexpr size_t kBytes = size_t{1} << 30;
  const size_t piece = state.range(0) == 0 ? kBytes : static_cast<size_t>(state.range(0)) * 1024;
  tessera::CpuDevice device(1);
  auto memory = device.alloc(kBytes);  // huge pages, as the pool's
  if (!memory.ok()) return state.SkipWithError("cannot allocate 1 GiB");
  auto* words = static_cast<uint64_t*>(memory->data());
  for (size_t i = 0; i < kBytes / 8; ++i) words[i] = i;
  std::vector<size_t> order(kBytes / piece);  // pieces, in words from the start
  for (size_t i = 0; i < order.size(); ++i) order[i] = i * piece / 8;
  std::shuffle(order.begin(), order.end(), std::mt19937(1));
  const auto piece_words = static_cast<int64_t>(piece / 8);
  for (auto _ : state) {
    uint64_t sums[4] = {};
    for (size_t i = 0; i < order.size(); ++i) {
      const uint64_t* at = words + order[i];
      const cpu::Ahead next = i + 1 < order.size() ? cpu::Ahead{words + order[i + 1], piece} : cpu::Ahead{};
      size_t asked = 0;
      for (int64_t w = 0; w < piece_words; w += 8) {  // a line a step
        cpu::ask_ahead(next, asked, w + 8, piece_words);
        for (int j = 0; j < 8; ++j) sums[j % 4] += at[w + j];
      }
    }
    benchmark::DoNotOptimize(sums);
  }
  state.counters["GBs"] = benchmark::Counter(
      1e-9 * static_cast<double>(kBytes) * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PieceReads)->Arg(4)->Arg(16)->Arg(64)->Arg(0)->Unit(benchmark::kMillisecond);

void BM_Handoff(benchmark::State& state) {
  tessera::ThreadPool pool(static_cast<size_t>(state.range(0)));
  std::vector<int64_t> touched(pool.size() * 16);  // a cache line a thread, so the work is real
  for (auto _ : state) {
    pool.parallel_for(pool.size(), 1, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) ++touched[i * 16];
    });
  }
  benchmark::DoNotOptimize(touched.data());
}
// A fixed count: Google Benchmark's own estimate from the first iterations misjudges when
// a hand-off's time jumps a hundredfold, as it does when other work takes the cores.
BENCHMARK(BM_Handoff)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Iterations(4000)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
