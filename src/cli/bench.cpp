// `tessera bench`: prefill and decode speed of one process, each as a fraction of
// the limit this command measures on the same machine, same threads, in the same
// run: decode at batch 1 reads every weight once per token, so the memory read
// bandwidth is its limit; prefill is matmuls, so the f32 FMA peak (a register-only
// FMA loop on every thread) is its limit. It also times the matmul alone, on the
// model's MLP shapes at the prompt's token count, and decode's matmuls alone (every
// weight matrix once at batch 1) against the same read bandwidth.
//   tessera bench --model DIR
//   tessera bench --config bench/shapes/llama-3.2-1b.json --random-weights --seed 1 [--dtype bf16]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/bf16_dot.h"
#include "backend/cpu/cpu_device.h"
#include "backend/cpu/kernels.h"
#include "backend/device.h"
#include "backend/timed_device.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "core/check.h"
#include "core/mapped_file.h"
#include "core/thread_pool.h"
#include "model/forward.h"

namespace tessera {

namespace {

using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string model_dir;
  std::string config_path;
  bool random_weights = false;
  uint64_t seed = 1;
  std::string dtype = "bf16";
  size_t threads = 0;
  int64_t prompt_tokens = 512;
  int64_t decode_tokens = 128;
  int64_t sequences = 0;  // > 0: also decode that many sequences together
  std::string device = "cpu";
  bool profile = false;           // time each device operation of the prefill and the decode (TimedDevice)
  std::optional<DType> kv_dtype;  // unset: default_kv_dtype
};

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// Best of three passes of summing a 1 GiB buffer with `threads` threads, each reading its
// contiguous share in the ways the decode kernels read weights (cpu::ReadLayout): 4, 8
// and 16 rows of 4 KiB side by side, and 1, 2 and 4 long sequential streams (the best
// way differs between CPUs), in bytes/s. The buffer is a mapping of its own (aligned to
// a page: a vector's data sat 16 bytes past a line, which cost the long streams a third
// of their rate on the AVX-512 dev VM), advised for huge pages as the weights are
// (map_advised), so that both are read through the same pages. Shared machines drift,
// so bench measures it before and after the timed runs and takes the higher figure (the
// lower, more conservative ratio).
double measure_read_bandwidth(size_t threads) {
  const size_t words = (size_t{1} << 30) / sizeof(uint64_t);
  const auto memory = map_advised(words * sizeof(uint64_t));
  TS_CHECK(memory, "[bench] cannot map the 1 GiB bandwidth buffer");
  auto* buffer = reinterpret_cast<uint64_t*>(memory.get());
  std::fill(buffer, buffer + words, 1);
  ThreadPool pool(threads);
  std::atomic<uint64_t> total{0};
  constexpr std::pair<cpu::ReadLayout, int> kWays[] = {{cpu::ReadLayout::kRows, 4},  {cpu::ReadLayout::kRows, 8},
                                                       {cpu::ReadLayout::kRows, 16}, {cpu::ReadLayout::kParts, 1},
                                                       {cpu::ReadLayout::kParts, 2}, {cpu::ReadLayout::kParts, 4}};
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    for (const auto& [layout, streams] : kWays) {
      const auto start = Clock::now();
      pool.parallel_for(words, 4096, [&](size_t begin, size_t end) {
        total += cpu::read_sum(buffer + begin, static_cast<int64_t>(end - begin), streams, layout);
      });
      best = std::max(best, static_cast<double>(words * sizeof(uint64_t)) / seconds_since(start));
    }
  }
  if (total.load() != 3 * std::size(kWays) * words) std::fprintf(stderr, "[bench] bandwidth buffer sum is wrong\n");
  return best;
}

// Best of three runs of a register-only loop of the matmul's instruction on every thread
// at once, in FLOP/s: the most that instruction can do on these threads. loop(n) runs n
// iterations and returns a positive value that depends on every operation; flops(n) is
// their floating-point operations.
double measure_peak(size_t threads, float (*loop)(int64_t), int64_t (*flops)(int64_t),
                    int64_t iterations = 20'000'000) {
  ThreadPool pool(threads);
  const int64_t kIterations = iterations;
  std::atomic<uint64_t> sink{0};
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = Clock::now();
    pool.parallel_for(pool.size(), 1, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) sink += loop(kIterations) > 0;
    });
    best = std::max(best,
                    static_cast<double>(pool.size()) * static_cast<double>(flops(kIterations)) / seconds_since(start));
  }
  if (sink.load() != 3 * pool.size()) std::fprintf(stderr, "[bench] peak loop result is wrong\n");
  return best;
}
double measure_fma_peak(size_t threads) { return measure_peak(threads, cpu::fma_loop, cpu::fma_loop_flops); }

// The weight matrices one token's pass through layer `l` multiplies by: attention,
// then the dense MLP or, in a layer with experts, the router, its top_k experts
// and the shared expert. A layer's experts all have one shape, so the first top_k
// stand for whichever the router picks.
std::vector<const TensorView*> token_matrices(const Model& model, const LayerWeights& l) {
  std::vector<const TensorView*> out;
  for (const TensorView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.router, &l.shared_gate,
                              &l.shared_up, &l.shared_down})
    if (!w->empty()) out.push_back(w);
  const auto top_k = static_cast<size_t>(model.arch().moe.top_k);
  for (const auto* experts : {&l.expert_gate, &l.expert_up, &l.expert_down})
    for (size_t e = 0; e < std::min(top_k, experts->size()); ++e) out.push_back(&(*experts)[e]);
  return out;
}

// Layer 0's MLP up or down projection (expert 0's in a layer with experts): the shapes the GEMM is timed on.
const TensorView& first_mlp(const Model& model, bool up) {
  const LayerWeights& l = model.weights().layers[0];
  if (l.w_up.empty()) return up ? l.expert_up[0] : l.expert_down[0];
  return up ? l.w_up : l.w_down;
}

// The bytes of the experts a batch-1 decode step does not read: all but top_k of each layer's.
double idle_expert_bytes(const Model& model) {
  double bytes = 0;
  const auto top_k = static_cast<size_t>(model.arch().moe.top_k);
  for (const LayerWeights& l : model.weights().layers)
    for (const auto* experts : {&l.expert_gate, &l.expert_up, &l.expert_down})
      for (size_t e = top_k; e < experts->size(); ++e) bytes += static_cast<double>((*experts)[e].nbytes());
  return bytes;
}

// Multiply-adds of the weight matmuls in one prefill of `tokens` tokens (the LM head
// runs for the last token only), times two: the FLOPs prefill cannot avoid.
double prefill_matmul_flops(const Model& model, int64_t tokens) {
  double per_token = 0;
  for (const LayerWeights& l : model.weights().layers)
    for (const TensorView* w : token_matrices(model, l)) per_token += static_cast<double>(w->numel());
  const double head = model.has_exit() ? static_cast<double>(model.weights().lm_head.numel()) : 0;
  return 2 * (per_token * static_cast<double>(tokens) + head);
}

// Best of three matmuls of `tokens` random rows by w, in FLOP/s.
double measure_matmul(Device& device, const TensorView& w, int64_t tokens) {
  const int64_t n = w.dim(0), k = w.dim(1);
  std::vector<float> x(static_cast<size_t>(tokens * k));
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : x) v = dist(rng);
  std::vector<float> y(static_cast<size_t>(tokens * n));
  double best = 0;
  for (int pass = 0; pass < 3; ++pass) {
    const auto start = Clock::now();
    device.matmul(x.data(), tokens, w, {}, y.data());
    best = std::max(best, 2.0 * static_cast<double>(tokens * n * k) / seconds_since(start));
  }
  return best;
}

// Every weight matrix that decode reads (the layers' and the LM head; top_k experts
// of a layer with experts), each once at batch 1 through the device's matmul, as
// decode calls it, in bytes/s. Against decode's own bytes/s it shows what the rest of a
// decode step costs (attention, norms, routing, the threads' hand-offs between ops).
// Best of three passes each, alternating: the weights as the CPU device places them (in
// the layout decode reads: weight_layout.h; copies of its own, freed on return) and as
// mapped (rows one after another), so that one run weighs one layout against the other.
struct DecodeMatmuls {
  double placed = 0, mapped = 0;
};
Result<DecodeMatmuls> measure_decode_matmuls(Device& device, const Model& model, size_t threads) {
  std::vector<const TensorView*> weights;
  for (const LayerWeights& l : model.weights().layers)
    for (const TensorView* w : token_matrices(model, l)) weights.push_back(w);
  if (model.has_exit()) weights.push_back(&model.weights().lm_head);
  int64_t widest = 1, tallest = 1;
  double bytes = 0;
  CpuDevice layout(threads);
  std::vector<TensorView> placed;
  for (const TensorView* w : weights) {
    widest = std::max(widest, w->dim(1));
    tallest = std::max(tallest, w->dim(0));
    bytes += static_cast<double>(w->nbytes());
    TS_ASSIGN_OR_RETURN(TensorView view, layout.place(*w));
    placed.push_back(std::move(view));
  }
  std::vector<float> x(static_cast<size_t>(widest), 0.01f), y(static_cast<size_t>(tallest));
  DecodeMatmuls best;
  for (int pass = 0; pass < 3; ++pass) {
    auto start = Clock::now();
    for (const TensorView& w : placed) device.matmul(x.data(), 1, w, {}, y.data());
    best.placed = std::max(best.placed, bytes / seconds_since(start));
    start = Clock::now();
    for (const TensorView* w : weights) device.matmul(x.data(), 1, *w, {}, y.data());
    best.mapped = std::max(best.mapped, bytes / seconds_since(start));
  }
  return best;
}

// Where the timed prefill's or decode's (`what`) time went: each device operation's time
// a token, its share of the phase and its calls a forward pass (`passes` of them: the
// prefill's one, a decode step each), the most first, then what no call took (the host's
// own work between them).
void print_profile(const char* what, std::vector<TimedDevice::Op> ops, double phase_s, int64_t tokens, int64_t passes) {
  std::sort(ops.begin(), ops.end(), [](const auto& a, const auto& b) { return a.seconds > b.seconds; });
  const auto n = static_cast<double>(tokens);
  double in_calls = 0;
  for (const TimedDevice::Op& op : ops) {
    std::printf("profile %-9s %-16s %8.3f ms a token = %5.1f%% of %s, %.1f calls a pass\n", what, op.name,
                1e3 * op.seconds / n, 100.0 * op.seconds / phase_s, what,
                static_cast<double>(op.calls) / static_cast<double>(passes));
    in_calls += op.seconds;
  }
  std::printf("profile %-9s %-16s %8.3f ms a token = %5.1f%% of %s\n", what, "(between calls)",
              1e3 * (phase_s - in_calls) / n, 100.0 * (phase_s - in_calls) / phase_s, what);
}

// kB values of "RssAnon:" and "RssFile:" from /proc/self/status.
std::pair<double, double> resident_mib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  double anon = 0, file = 0;
  while (in >> key) {
    double kb = 0;
    if (key == "RssAnon:" && in >> kb) anon = kb / 1024;
    if (key == "RssFile:" && in >> kb) file = kb / 1024;
  }
  return {anon, file};
}

Result<Model> load(const BenchOptions& o) {
  if (!o.random_weights) return Model::load(o.model_dir);
  TS_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config_file(o.config_path, check_model_type));
  TS_ASSIGN_OR_RETURN(const DType dtype, parse_weight_dtype(o.dtype));
  return Model::random(config, dtype, o.seed);
}

// Decode of `count` sequences stepped together (continuous batching's steady
// state): each prefilled with its own random prompt, then `decode` steps of one
// greedy token each for all of them in one forward pass (chosen on the device,
// as the engine's greedy requests are). Returns the decode's tokens/s over all
// sequences.
Result<double> measure_many(Forward& forward, const BenchOptions& o, std::mt19937& rng) {
  const int64_t vocab = forward.model().config().vocab_size;
  std::vector<KvCache> caches;
  std::vector<int32_t> next(static_cast<size_t>(o.sequences));
  for (int64_t s = 0; s < o.sequences; ++s) {
    caches.push_back(forward.make_cache(o.prompt_tokens + o.decode_tokens));
    std::vector<int32_t> prompt(static_cast<size_t>(o.prompt_tokens));
    for (auto& id : prompt) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
    TS_ASSIGN_OR_RETURN(const std::vector<float> logits, forward.run_ids(prompt, caches.back()));
    next[static_cast<size_t>(s)] =
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  std::vector<Forward::Part> parts;
  for (KvCache& cache : caches) parts.push_back({&cache, 1});
  const auto start = Clock::now();
  for (int64_t i = 0; i < o.decode_tokens; ++i) {
    TS_ASSIGN_OR_RETURN(next, forward.step_greedy(next, parts));
  }
  return static_cast<double>(o.sequences * o.decode_tokens) / seconds_since(start);
}

Status bench(const BenchOptions& o) {
  const bool from_checkpoint = !o.model_dir.empty() && !o.random_weights && o.config_path.empty();
  const bool from_shape = o.model_dir.empty() && o.random_weights && !o.config_path.empty();
  if (!from_checkpoint && !from_shape)
    return Status::invalid_input("give either --model DIR, or --config FILE with --random-weights");
  if (o.profile && o.device != "cpu")
    return Status::invalid_input(
        "--profile times each call, and a GPU's calls return before their work is done: "
        "profile with --device cpu");
  cpu::cap_isa_from_env();  // as the CPU device will: the peaks below on the ISA it computes on
  const double bandwidth_before = measure_read_bandwidth(o.threads);
  const double fma_before = measure_fma_peak(o.threads);
  const auto [anon_before, file_before] = resident_mib();

  auto start = Clock::now();
  TS_ASSIGN_OR_RETURN(const Model model, load(o));
  const double load_s = seconds_since(start);
  const ModelConfig& c = model.config();
  TS_ASSIGN_OR_RETURN(auto device, make_device(o.device, o.threads));
  TimedDevice timed(*device);
  Forward forward(model, o.profile ? static_cast<Device&>(timed) : *device, ForwardOptions{.kv_dtype = o.kv_dtype});
  KvCache cache = forward.make_cache(o.prompt_tokens + o.decode_tokens);

  std::mt19937 rng(static_cast<uint32_t>(o.seed));
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt_tokens));
  for (auto& id : prompt) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
  // The first prefill pays what happens once (kernels loaded, scratch allocated, weights' descriptors made):
  // it is reported apart, and the prefill timed is the second over the same positions, as peers time theirs
  // after a warm-up.
  start = Clock::now();
  TS_RETURN_IF_ERROR(forward.run_ids(prompt, cache).status());
  const double first_prefill_s = seconds_since(start);
  cache.truncate(0);
  timed.reset();
  start = Clock::now();
  TS_ASSIGN_OR_RETURN(std::vector<float> logits, forward.run_ids(prompt, cache));
  const double prefill_s = seconds_since(start);
  const std::vector<TimedDevice::Op> prefill_ops = timed.ops();

  timed.reset();
  start = Clock::now();
  std::vector<int32_t> next = {static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin())};
  const Forward::Part part{&cache, 1};
  for (int64_t i = 0; i < o.decode_tokens; ++i) {
    TS_ASSIGN_OR_RETURN(next, forward.step_greedy(next, {&part, 1}));
  }
  const double decode_s = seconds_since(start);
  const std::vector<TimedDevice::Op> decode_ops = timed.ops();
  double many_tps = 0;
  if (o.sequences > 0) {
    TS_ASSIGN_OR_RETURN(many_tps, measure_many(forward, o, rng));
  }
  double gemm_up = 0, gemm_down = 0;
  const bool on_cpu = o.device == "cpu";
  DecodeMatmuls decode_matmuls;
  if (on_cpu) {
    TS_ASSIGN_OR_RETURN(decode_matmuls, measure_decode_matmuls(*device, model, o.threads));
  }
  if (on_cpu && !model.weights().layers.empty()) {
    gemm_up = measure_matmul(*device, first_mlp(model, true), o.prompt_tokens);
    gemm_down = measure_matmul(*device, first_mlp(model, false), o.prompt_tokens);
  }
  double copy_bandwidth = 0, mma_peak = 0;  // a GPU's limits: its own memory, its tensor cores
  if (!on_cpu) {
    TS_ASSIGN_OR_RETURN(copy_bandwidth, measure_copy_bandwidth(*device));
    mma_peak = device->measure_bf16_peak();
  }
  const double bandwidth = std::max(bandwidth_before, measure_read_bandwidth(o.threads));
  const double fma_peak = std::max(fma_before, measure_fma_peak(o.threads));
  // bf16 weights on AVX-512 BF16 multiply by bf16 dot products (two products a lane per
  // instruction): their GEMM is measured against that instruction's peak too.
  const bool bf16_dots = on_cpu && cpu::bf16_dot_active() && !model.weights().layers.empty() &&
                         first_mlp(model, true).dtype == DType::kBF16;
  const double dot_peak =
      bf16_dots ? measure_peak(o.threads, cpu::bf16_dot::dot_loop, cpu::bf16_dot::dot_loop_flops) : 0;
  // Where the CPU has AMX-BF16 they take its tile products instead (a 16 x 16 x 32 product
  // an instruction, 16,384 FLOP: a million a thread is plenty).
  const double tile_peak = bf16_dots && cpu::amx_active()
                               ? measure_peak(o.threads, cpu::amx::dot_loop, cpu::amx::dot_loop_flops, 1'000'000)
                               : 0;
  const auto [anon_after, file_after] = resident_mib();

  // A decode step reads every weight once, except the embedding table (one row) when it is not the LM head,
  // and the experts the router did not pick (a token reads top_k of each layer's).
  const TensorView& embed = model.weights().embed;
  const bool tied = embed.data == model.weights().lm_head.data;
  const double step_bytes =
      static_cast<double>(model.weight_bytes() - (tied ? 0 : embed.nbytes())) - idle_expert_bytes(model);
  const double decode_tps = static_cast<double>(o.decode_tokens) / decode_s;
  const double weight_mib = static_cast<double>(model.weight_bytes()) / (1 << 20);
  const double kv_mib = static_cast<double>(cache.bytes()) / (1 << 20);
  // The host memory weights hold: random ones themselves, and on the CPU the copies in its matmuls' layout.
  const double owned_weights_mib = (o.random_weights ? weight_mib : 0) +
                                   (on_cpu ? static_cast<double>(forward.copied_weight_bytes()) / (1 << 20) : 0);

  std::printf("device            %s\n", device->name().c_str());
  std::printf("model             %s, %lld layers, hidden %lld, %.1f MiB of weights (%s)\n", c.model_type.c_str(),
              static_cast<long long>(c.num_hidden_layers), static_cast<long long>(c.hidden_size), weight_mib,
              o.random_weights ? "random, seeded" : "mapped");
  if (model.arch().moe.experts > 0)
    std::printf("active weights    %.1f MiB a decode step (top %lld of %lld experts a layer)\n", step_bytes / (1 << 20),
                static_cast<long long>(model.arch().moe.top_k), static_cast<long long>(model.arch().moe.experts));
  std::printf("load              %.2f s\n", load_s);
  std::printf("kv cache          %s (%s)\n", forward.kv_pool().describe().c_str(),
              o.kv_dtype ? "--kv-dtype" : "the default for these weights");
  std::printf("first prefill     %.1f tok/s (with what happens once; the prefill below is the second)\n",
              static_cast<double>(o.prompt_tokens) / first_prefill_s);
  const double prefill_flops = prefill_matmul_flops(model, o.prompt_tokens) / prefill_s;
  const double decode_bytes = step_bytes * decode_tps;
  if (on_cpu) {
    std::printf(
        "read bandwidth    %.2f GB/s (1 GiB; 4, 8 or 16 rows side by side or 1, 2 or 4 long streams a thread; "
        "best of 18 before and 18 after, same threads)\n",
        bandwidth / 1e9);
    std::printf("f32 FMA peak      %.1f GFLOP/s (%s registers only, every thread, best of 3 before and 3 after)\n",
                fma_peak / 1e9, cpu::isa_name());
    std::printf(
        "prefill           %.1f tok/s (%lld-token prompt) = %.1f GFLOP/s of weight matmuls = %.1f%% of FMA peak\n",
        static_cast<double>(o.prompt_tokens) / prefill_s, static_cast<long long>(o.prompt_tokens), prefill_flops / 1e9,
        100.0 * prefill_flops / fma_peak);
  } else {
    std::printf("copy bandwidth    %.0f GB/s on the device (1 GiB copies, bytes read plus written, best of 3)\n",
                copy_bandwidth / 1e9);
    if (mma_peak > 0)
      std::printf(
          "bf16 mma peak     %.1f TFLOP/s (mma.sync m16n8k16, the bf16 matmul's instruction, registers only, "
          "every SM, best of 3)\n",
          mma_peak / 1e12);
    std::printf("prefill           %.1f tok/s (%lld-token prompt) = %.1f TFLOP/s of weight matmuls",
                static_cast<double>(o.prompt_tokens) / prefill_s, static_cast<long long>(o.prompt_tokens),
                prefill_flops / 1e12);
    if (mma_peak > 0) std::printf(" = %.1f%% of the mma peak", 100.0 * prefill_flops / mma_peak);
    std::printf("\n");
  }
  if (gemm_up > 0) {
    const TensorView& up = first_mlp(model, true);
    std::printf(
        "matmul alone      [%lld x %lld] x [%lld x %lld]^T: %.1f GFLOP/s = %.1f%% of FMA peak; transposed: %.1f = "
        "%.1f%%\n",
        static_cast<long long>(o.prompt_tokens), static_cast<long long>(up.dim(1)), static_cast<long long>(up.dim(0)),
        static_cast<long long>(up.dim(1)), gemm_up / 1e9, 100.0 * gemm_up / fma_peak, gemm_down / 1e9,
        100.0 * gemm_down / fma_peak);
  }
  if (dot_peak > 0) {
    std::printf(
        "bf16 dot peak     %.1f GFLOP/s (AVX-512 BF16 vdpbf16ps, the bf16 matmul's instruction, registers only, every "
        "thread, best of 3): prefill %.1f%%, matmul alone %.1f%% and %.1f%% of it\n",
        dot_peak / 1e9, 100.0 * prefill_flops / dot_peak, 100.0 * gemm_up / dot_peak, 100.0 * gemm_down / dot_peak);
  }
  if (tile_peak > 0) {
    std::printf(
        "amx bf16 peak     %.1f GFLOP/s (AMX tdpbf16ps, the bf16 matmul's instruction, tiles only, every thread, best "
        "of 3): prefill %.1f%%, matmul alone %.1f%% and %.1f%% of it\n",
        tile_peak / 1e9, 100.0 * prefill_flops / tile_peak, 100.0 * gemm_up / tile_peak, 100.0 * gemm_down / tile_peak);
  }
  std::printf("decode            %.2f tok/s (batch 1, %lld tokens)\n", decode_tps,
              static_cast<long long>(o.decode_tokens));
  std::printf("decode bytes/s    %.2f GB/s = %.1f%% of %s bandwidth\n", decode_bytes / 1e9,
              100.0 * decode_bytes / (on_cpu ? bandwidth : copy_bandwidth), on_cpu ? "read" : "copy");
  if (!on_cpu)
    std::printf("cuda graphs       %lld steps ran as one graph each (TESSERA_CUDA_GRAPHS=1 asks for them)\n",
                static_cast<long long>(device->steps_as_graphs()));
  if (many_tps > 0) {
    std::printf(
        "decode x %-8lld %.1f tok/s in all, %.1f each (%lld sequences of %lld-token prompts stepped together)\n",
        static_cast<long long>(o.sequences), many_tps, many_tps / static_cast<double>(o.sequences),
        static_cast<long long>(o.sequences), static_cast<long long>(o.prompt_tokens));
  }
  if (on_cpu) {
    std::printf(
        "decode matmuls    %.2f GB/s = %.1f%% of read bandwidth (each weight matrix once at batch 1, best of 3, "
        "as placed); as mapped %.2f GB/s = %.1f%%\n",
        decode_matmuls.placed / 1e9, 100.0 * decode_matmuls.placed / bandwidth, decode_matmuls.mapped / 1e9,
        100.0 * decode_matmuls.mapped / bandwidth);
  }
  if (o.profile) {
    print_profile("prefill", prefill_ops, prefill_s, o.prompt_tokens, 1);
    print_profile("decode", decode_ops, decode_s, o.decode_tokens, o.decode_tokens);
  }
  std::printf(
      "resident          anon %.0f MiB, file-backed %.0f MiB; beyond weights and KV cache (%.0f MiB): %.0f MiB\n",
      anon_after, file_after, kv_mib, anon_after - anon_before - owned_weights_mib - kv_mib);
  return {};
}

}  // namespace

void register_bench(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* cmd = app.add_subcommand("bench", "Measure prefill and decode speed against memory bandwidth");
  cmd->add_option("--model", o->model_dir, "Checkpoint directory");
  cmd->add_option("--config", o->config_path, "config.json of a shape to fill with random weights");
  cmd->add_flag("--random-weights", o->random_weights, "Use seeded random weights (needs --config)");
  cmd->add_option("--seed", o->seed, "Seed for random weights and the prompt");
  cmd->add_option("--dtype", o->dtype, "Random weight dtype: f32, bf16 or f16");
  cmd->add_option("--threads", o->threads, "CPU threads (default: all cores)");
  cmd->add_option("--prompt", o->prompt_tokens, "Prompt tokens for prefill")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--decode", o->decode_tokens, "Tokens to decode")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--sequences", o->sequences, "Also decode this many sequences together")->check(CLI::Range(0, 1024));
  cmd->add_option("--device", o->device, "cpu or cuda[:N]");
  add_kv_dtype_option(*cmd, o->kv_dtype);
  cmd->add_flag("--profile", o->profile,
                "Time each device operation of the timed prefill and decode and print where their time goes (CPU)");
  cmd->callback([o, &exit_code] {
    const Status status = bench(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
