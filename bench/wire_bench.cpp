// Wire decode cost against memcpy (issue 4's "fast" criterion), on unflagged
// f32 hidden-state frames [tokens, 1024] of 4 KiB, 1 MiB and 64 MiB:
//   BM_CheckFrame          decode_frame + decode_tensor_header + borrow: the
//                          per-frame cost of the checks (no payload byte touched)
//   BM_DecodeCopyVsMemcpy  the same checks plus a copy into the receiver's buffer
//                          (decode_tensor_payload), timed in batches interleaved
//                          with memcpy of the same bytes into the same buffer;
//                          (one iteration = one batch of about 4 MiB); counters:
//                          decode_GBps, memcpy_GBps, ratio = decode / memcpy speed
//   BM_FloorVsMemcpy       the same, with the decoder replaced by the least any
//                          complete check can do: a straight-line comparison of
//                          every field of this one frame layout against constants,
//                          no error reporting (not a decoder: a floor, docs/benchmarks.md)
// Run: build/bin/wire_bench  (single-threaded)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <vector>

#include "core/check.h"
#include "wire/byte_io.h"
#include "wire/frame.h"
#include "wire/limits.h"
#include "wire/tensor_codec.h"

namespace {

using namespace tessera;
using namespace tessera::wire;

constexpr uint64_t kHidden = 1024;

struct Fixture {
  std::vector<uint8_t> frame;
  StageLimits limits;
  std::vector<uint8_t> out;  // the receiver's buffer, touched once up front
};

Fixture& fixture(int64_t bytes) {
  static std::map<int64_t, Fixture> cache;
  auto it = cache.find(bytes);
  if (it != cache.end()) return it->second;
  StageLimitsOptions options;
  options.activation_dtype = DType::kF32;
  Fixture f;
  f.limits = *make_stage_limits(kHidden, 32000, options);
  const uint64_t tokens = static_cast<uint64_t>(bytes) / (kHidden * 4);
  std::vector<uint8_t> data(static_cast<size_t>(bytes));
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131);
  const uint64_t shape[] = {tokens, kHidden};
  f.frame = encode_tensor_frame(1, Encoding{}, shape, data);
  f.out.assign(data.size(), 1);
  return cache.emplace(bytes, std::move(f)).first->second;
}

// The receiver's path for one frame: frame, header, then a borrowed payload.
std::span<const uint8_t> check(const Fixture& f) {
  const Result<Frame> frame = decode_frame(f.frame, f.limits.frame);
  TS_CHECK(frame.ok(), frame.status().to_string());
  const Result<TensorHeader> header = decode_tensor_header(frame->header, f.limits.hidden_states);
  TS_CHECK(header.ok(), header.status().to_string());
  const Result<std::span<const uint8_t>> payload =
      borrow_tensor_payload(*header, frame->payload, f.limits.hidden_states);
  TS_CHECK(payload.ok(), payload.status().to_string());
  return *payload;
}

void decode_copy(Fixture& f) {
  const Result<Frame> frame = decode_frame(f.frame, f.limits.frame);
  TS_CHECK(frame.ok(), frame.status().to_string());
  const Result<TensorHeader> header = decode_tensor_header(frame->header, f.limits.hidden_states);
  TS_CHECK(header.ok(), header.status().to_string());
  const Status status = decode_tensor_payload(*header, frame->payload, f.out, f.limits.hidden_states);
  TS_CHECK(status.ok(), status.to_string());
}

void BM_CheckFrame(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0));
  for (auto _ : state) {
    std::span<const uint8_t> payload = check(f);
    benchmark::DoNotOptimize(payload);
  }
  state.counters["frame_bytes"] = static_cast<double>(state.range(0));
}

// The floor: every prefix and header field of an unflagged f32 [tokens, 1024]
// frame compared with what the receiver expects, then the copy. Nothing else.
[[gnu::noinline]] bool floor_check_copy(Fixture& f) {
  const std::span<const uint8_t> b = f.frame;
  constexpr size_t kHeader = kTensorHeaderFixedBytes + 2 * 8;
  if (b.size() < kFramePrefixBytes + kHeader) return false;
  const uint64_t payload = get_u64(b, 24);
  const uint64_t tokens = get_u64(b, 56);
  uint64_t decoded = 0;
  if (get_u32(b, 0) != 0x46575354 /* "TSWF" */ || get_u16(b, 4) != kProtocolMajor || get_u32(b, 8) != 1 ||
      get_u32(b, 12) != kHeader || payload > f.limits.frame.max_payload_bytes ||
      b.size() != kFramePrefixBytes + kHeader + payload || get_u8(b, 32) != 1 || get_u8(b, 33) != 0 ||
      get_u16(b, 34) != 0 || get_u32(b, 36) != 2 || tokens < 1 || tokens > kMaxTokensPerFrame ||
      get_u64(b, 64) != kHidden || !checked_mul(tokens * kHidden, 4, &decoded) || get_u64(b, 40) != decoded ||
      get_u64(b, 48) != decoded || payload != decoded || decoded != f.out.size()) {
    return false;
  }
  std::memcpy(f.out.data(), b.data() + kFramePrefixBytes + kHeader, decoded);
  return true;
}

// Times `decode(f)` against memcpy of the frame's payload into the same buffer.
template <typename Decode>
void time_against_memcpy(benchmark::State& state, Decode decode) {
  Fixture& f = fixture(state.range(0));
  const std::span<const uint8_t> payload = check(f);
  const size_t n = payload.size();
  // Batches of about 4 MiB, so the clock's own cost stays negligible at 4 KiB.
  const size_t reps = std::max<size_t>(1, (size_t{4} << 20) / n);
  using Clock = std::chrono::steady_clock;
  double decode_s = 0;
  double memcpy_s = 0;
  bool memcpy_first = true;
  for (auto _ : state) {
    auto run_memcpy = [&] {
      const auto t0 = Clock::now();
      for (size_t r = 0; r < reps; ++r) {
        std::memcpy(f.out.data(), payload.data(), n);
        benchmark::ClobberMemory();
      }
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    auto run_decode = [&] {
      const auto t0 = Clock::now();
      for (size_t r = 0; r < reps; ++r) {
        decode(f);
        benchmark::ClobberMemory();
      }
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    double d = 0;
    double m = 0;
    if (memcpy_first) {  // alternate, so neither always finds the other's data in cache
      m = run_memcpy();
      d = run_decode();
    } else {
      d = run_decode();
      m = run_memcpy();
    }
    memcpy_first = !memcpy_first;
    decode_s += d;
    memcpy_s += m;
    state.SetIterationTime(d);  // one iteration: a batch of `reps` decoded frames
  }
  const double bytes = static_cast<double>(n) * static_cast<double>(reps) * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(n * reps) * state.iterations());
  state.counters["frames_per_iter"] = static_cast<double>(reps);
  state.counters["decode_GBps"] = bytes / decode_s / 1e9;
  state.counters["memcpy_GBps"] = bytes / memcpy_s / 1e9;
  state.counters["ratio"] = memcpy_s / decode_s;
}

void BM_DecodeCopyVsMemcpy(benchmark::State& state) { time_against_memcpy(state, decode_copy); }

void BM_FloorVsMemcpy(benchmark::State& state) {
  time_against_memcpy(state, [](Fixture& f) { TS_CHECK(floor_check_copy(f)); });
}

constexpr int64_t k4K = 4 << 10;
constexpr int64_t k1M = 1 << 20;
constexpr int64_t k64M = 64 << 20;

BENCHMARK(BM_CheckFrame)->Arg(k4K)->Arg(k1M)->Arg(k64M);
BENCHMARK(BM_DecodeCopyVsMemcpy)->Arg(k4K)->Arg(k1M)->Arg(k64M)->UseManualTime()->MinTime(1.0);
BENCHMARK(BM_FloorVsMemcpy)->Arg(k4K)->UseManualTime()->MinTime(1.0);

}  // namespace

BENCHMARK_MAIN();
