// The CUDA device's operations one by one, on the Llama-3-8B shape (bf16), each
// against the device's copy bandwidth measured in the same run: matmuls at
// 1..2048 tokens, paged attention at several context lengths, and the small
// row kernels (whose time is mostly launch). Times are wall clock over many
// back-to-back calls, ended by a download (the stream drains); weights rotate
// over copies that together exceed the L2 cache, so HBM is what is measured.
//   cuda_bench [cuda:N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "backend/device.h"
#include "core/dtype.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

Buffer must(Result<Buffer> buffer) {
  if (!buffer.ok()) {
    std::fprintf(stderr, "%s\n", buffer.status().to_string().c_str());
    std::exit(1);
  }
  return std::move(buffer).value();
}

// Random bf16 (or f32) values, so no operation runs on zeros.
Buffer random_buffer(Device& device, size_t elements, DType dtype, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint8_t> host(elements * dtype_size(dtype));
  for (size_t i = 0; i < elements; ++i) {
    const float v = dist(rng);
    if (dtype == DType::kF32) {
      std::memcpy(host.data() + 4 * i, &v, 4);
    } else {
      const uint16_t bits = f32_to_bf16(v);
      std::memcpy(host.data() + 2 * i, &bits, 2);
    }
  }
  Buffer buffer = must(device.alloc(host.size()));
  device.upload(host.data(), host.size(), buffer.data());
  return buffer;
}

// Seconds per call of fn(i) over `reps` calls after 3 warm-up calls.
double time_calls(Device& device, int reps, const std::function<void(int)>& fn) {
  float sink = 0;
  Buffer probe = must(device.alloc(sizeof(float)));
  for (int i = 0; i < 3; ++i) fn(i);
  device.download(probe.data(), sizeof(float), &sink);
  const auto start = Clock::now();
  for (int i = 0; i < reps; ++i) fn(i);
  device.download(probe.data(), sizeof(float), &sink);
  return std::chrono::duration<double>(Clock::now() - start).count() / reps;
}

void bench_matmuls(Device& device, double bandwidth) {
  struct Shape {
    const char* name;
    int64_t n, k;
  };
  const Shape shapes[] = {{"q/o 4096x4096", 4096, 4096},
                          {"k/v 1024x4096", 1024, 4096},
                          {"gate/up 14336x4096", 14336, 4096},
                          {"down 4096x14336", 4096, 14336},
                          {"lm_head 128256x4096", 128256, 4096}};
  std::printf("%-22s %6s %10s %9s %8s %9s\n", "matmul (bf16)", "tokens", "us", "GB/s", "of copy", "TFLOP/s");
  for (const Shape& s : shapes) {
    const size_t weight_bytes = static_cast<size_t>(s.n * s.k) * 2;
    const int copies = static_cast<int>(std::clamp<size_t>((size_t{512} << 20) / weight_bytes + 1, 1, 16));
    std::vector<Buffer> weights;
    for (int c = 0; c < copies; ++c)
      weights.push_back(random_buffer(device, static_cast<size_t>(s.n * s.k), DType::kBF16, c));
    for (const int64_t tokens : {1, 4, 16, 32, 64, 512, 2048}) {
      Buffer x = random_buffer(device, static_cast<size_t>(tokens * s.k), DType::kF32, 99);
      Buffer y = must(device.alloc(static_cast<size_t>(tokens * s.n) * sizeof(float)));
      const int reps = tokens >= 64 ? 5 : 50;
      const double sec = time_calls(device, reps, [&](int i) {
        const TensorView w{DType::kBF16, {s.n, s.k}, weights[static_cast<size_t>(i % copies)].data()};
        device.matmul(x.f32(), tokens, w, {}, y.f32());
      });
      const double gbs = static_cast<double>(weight_bytes) / sec / 1e9;
      std::printf("%-22s %6lld %10.1f %9.1f %7.1f%% %9.2f\n", s.name, static_cast<long long>(tokens), sec * 1e6, gbs,
                  100.0 * gbs * 1e9 / bandwidth, 2.0 * static_cast<double>(tokens * s.n * s.k) / sec / 1e12);
    }
  }
}

void bench_attention(Device& device) {
  const int64_t heads = 32, kv_heads = 8, head_dim = 128, block_size = 32, max_context = 8192;
  KvPages pages{.dtype = DType::kBF16,
                .blocks = max_context / block_size,
                .block_size = block_size,
                .layers = 1,
                .n_kv_heads = kv_heads,
                .head_dim = head_dim};
  Buffer memory = random_buffer(device, static_cast<size_t>(pages.blocks * pages.block_elements()), DType::kBF16, 7);
  pages.base = memory.data();
  std::vector<int32_t> blocks(static_cast<size_t>(pages.blocks));
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<int32_t>(i);
  std::printf("\n%-22s %6s %10s %9s\n", "attention (bf16 KV)", "tokens", "us", "KV GB/s");
  for (const auto& [tokens, context] : {std::pair<int64_t, int64_t>{1, 512}, {1, 2048}, {1, 8192}, {512, 512}}) {
    Buffer q = random_buffer(device, static_cast<size_t>(tokens * heads * head_dim), DType::kF32, 3);
    Buffer out = must(device.alloc(static_cast<size_t>(tokens * heads * head_dim) * sizeof(float)));
    const double sec = time_calls(device, tokens > 1 ? 5 : 50, [&](int) {
      device.attention(AttentionArgs{.q = q.f32(),
                                     .out = out.f32(),
                                     .pages = &pages,
                                     .layer = 0,
                                     .blocks = blocks,
                                     .tokens = tokens,
                                     .pos0 = context - tokens,
                                     .n_heads = heads,
                                     .sliding_window = 0,
                                     .scale = 0.088f});
    });
    const double kv_bytes = 2.0 * static_cast<double>(context * kv_heads * head_dim * 2);
    std::printf("%-22s %6lld %10.1f %9.1f   (context %lld)\n", "", static_cast<long long>(tokens), sec * 1e6,
                kv_bytes / sec / 1e9, static_cast<long long>(context));
  }
}

void bench_small(Device& device) {
  const int64_t hidden = 4096, inter = 14336;
  Buffer x = random_buffer(device, static_cast<size_t>(inter), DType::kF32, 1);
  Buffer y = random_buffer(device, static_cast<size_t>(inter), DType::kF32, 2);
  Buffer norm = random_buffer(device, static_cast<size_t>(hidden), DType::kBF16, 3);
  Buffer inv_freq = random_buffer(device, 64, DType::kF32, 4);
  const TensorView w{DType::kBF16, {hidden}, norm.data()};
  std::printf("\n%-22s %10s\n", "decode step kernels", "us");
  const std::pair<const char*, std::function<void(int)>> ops[] = {
      {"rms_norm 4096", [&](int) { device.rms_norm(x.f32(), 1, hidden, w, 1e-5f, y.f32()); }},
      {"rope 32x128", [&](int) { device.rope(x.f32(), 1, 32, 128, 100, {.inv_freq = inv_freq.f32()}); }},
      {"silu_mul 14336", [&](int) { device.silu_mul(x.f32(), y.f32(), inter, y.f32()); }},
      {"add 4096", [&](int) { device.add(x.f32(), hidden, y.f32()); }}};
  for (const auto& [name, fn] : ops) std::printf("%-22s %10.2f\n", name, time_calls(device, 200, fn) * 1e6);
}

}  // namespace
}  // namespace tessera

int main(int argc, char** argv) {
  using namespace tessera;
  auto device = make_device(argc > 1 ? argv[1] : "cuda", 0);
  if (!device.ok()) {
    std::fprintf(stderr, "%s\n", device.status().to_string().c_str());
    return 1;
  }
  const auto bandwidth_or = measure_copy_bandwidth(**device);
  if (!bandwidth_or.ok()) {
    std::fprintf(stderr, "%s\n", bandwidth_or.status().to_string().c_str());
    return 1;
  }
  const double bandwidth = *bandwidth_or;
  std::printf("device %s\ncopy bandwidth %.0f GB/s (1 GiB device to device, bytes read plus written)\n\n",
              (*device)->name().c_str(), bandwidth / 1e9);
  const std::string only = argc > 2 ? argv[2] : "";  // matmul, attention or small: that part alone
  if (only.empty() || only == "matmul") bench_matmuls(**device, bandwidth);
  if (only.empty() || only == "attention") bench_attention(**device);
  if (only.empty() || only == "small") bench_small(**device);
  return 0;
}
