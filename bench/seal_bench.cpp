// Sealed-piece throughput against memcpy, single-threaded: for messages of
// 16 KiB, 256 KiB and 4 MiB cut into 256 KiB pieces, the time to seal every
// piece of a message (Sealer::seal into one wire buffer) and to open them
// (Opener::open back into the receiver's buffer), against memcpy of the same
// bytes between the same buffers in the same run. Rounds interleave the three so
// that frequency and cache state affect them alike; each reports its best round.
// GB/s are 1e9 payload bytes per second; ratio = seal (or open) speed / memcpy speed.
// Run: build/bin/seal_bench [seconds per size, default 1]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "seal/key_schedule.h"
#include "seal/piece.h"

namespace {

using namespace tessera;
using namespace tessera::seal;
using Clock = std::chrono::steady_clock;

constexpr uint32_t kPieceBytes = 256 * 1024;

void clobber(const void* p) { asm volatile("" : : "r"(p) : "memory"); }

struct Message {
  std::vector<PieceContext> pieces;  // counter 0; the caller sets it
  std::vector<size_t> plain_offset, wire_offset;
  size_t wire_bytes = 0;
};

Message plan(uint64_t bytes) {
  Message m;
  PieceContext ctx;
  ctx.op = Op::kAllSum;
  ctx.generation = 1;
  ctx.sender = 1;
  ctx.receiver = 0;
  ctx.piece_bytes = kPieceBytes;
  ctx.dtype = DType::kF32;
  ctx.element_count = bytes / 4;
  ctx.piece_count = piece_count(bytes, kPieceBytes);
  size_t plain = 0;
  for (uint32_t i = 0; i < ctx.piece_count; ++i) {
    ctx.piece_index = i;
    m.pieces.push_back(ctx);
    m.plain_offset.push_back(plain);
    m.wire_offset.push_back(m.wire_bytes);
    const size_t n = piece_payload_bytes(bytes, kPieceBytes, i);
    plain += n;
    m.wire_bytes += piece_wire_bytes(n, true);
  }
  return m;
}

void seal_message(Sealer& sealer, Message& m, uint64_t counter, const std::vector<uint8_t>& plain,
                  std::vector<uint8_t>& wire) {
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    PieceContext& ctx = m.pieces[i];
    ctx.counter = counter;
    const size_t n = piece_payload_bytes(plain.size(), kPieceBytes, ctx.piece_index);
    const Status s = sealer.seal(ctx, std::span(plain).subspan(m.plain_offset[i], n),
                                 std::span(wire).subspan(m.wire_offset[i], piece_wire_bytes(n, true)));
    TS_CHECK(s.ok(), s.to_string());
  }
}

void open_message(Opener& opener, const Message& m, const std::vector<uint8_t>& wire, std::vector<uint8_t>& plain) {
  for (size_t i = 0; i < m.pieces.size(); ++i) {
    const PieceContext& ctx = m.pieces[i];
    const size_t n = piece_payload_bytes(plain.size(), kPieceBytes, ctx.piece_index);
    const Status s = opener.open(ctx, std::span(wire).subspan(m.wire_offset[i], piece_wire_bytes(n, true)),
                                 std::span(plain).subspan(m.plain_offset[i], n));
    TS_CHECK(s.ok(), s.to_string());
  }
}

template <typename F>
double seconds_for(int reps, F&& f) {
  const auto start = Clock::now();
  for (int r = 0; r < reps; ++r) f();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const double budget = argc > 1 ? std::atof(argv[1]) : 1.0;
  Secret secret;
  for (size_t i = 0; i < secret.size(); ++i) secret[i] = static_cast<uint8_t>(i * 7 + 1);
  const DirectionKey key = derive_key(secret, KeyPurpose::kData, 1, 0, 1);

  std::printf("%-8s %7s %10s %10s %12s %11s %11s\n", "message", "pieces", "seal GB/s", "open GB/s", "memcpy GB/s",
              "seal/memcpy", "open/memcpy");
  for (uint64_t bytes : {uint64_t{16} << 10, uint64_t{256} << 10, uint64_t{4} << 20}) {
    Message m = plan(bytes);
    std::vector<uint8_t> plain(bytes), received(bytes, 1), wire(m.wire_bytes, 1);
    for (size_t i = 0; i < plain.size(); ++i) plain[i] = static_cast<uint8_t>(i * 131);
    Sealer sealer(key);
    Opener opener(key);
    uint64_t counter = 0;

    // About 8 MiB per batch; one warm-up round, then rounds until the budget is spent.
    const int reps = static_cast<int>(std::max<uint64_t>(1, (uint64_t{8} << 20) / bytes));
    double best_seal = 1e30, best_open = 1e30, best_copy = 1e30;
    const auto end = Clock::now() + std::chrono::duration<double>(budget);
    for (int round = 0; round == 0 || Clock::now() < end; ++round) {
      const double seal_s = seconds_for(reps, [&] {
        seal_message(sealer, m, counter++, plain, wire);
        clobber(wire.data());
      });
      seal_message(sealer, m, counter++, plain, wire);  // the message the opener checks against
      const uint64_t opened_counter = counter - 1;
      for (PieceContext& ctx : m.pieces) ctx.counter = opened_counter;
      const double open_s = seconds_for(reps, [&] {
        open_message(opener, m, wire, received);
        clobber(received.data());
      });
      const double copy_s = seconds_for(reps, [&] {
        std::memcpy(received.data(), plain.data(), bytes);
        clobber(received.data());
      });
      if (round == 0) continue;  // warm-up
      best_seal = std::min(best_seal, seal_s);
      best_open = std::min(best_open, open_s);
      best_copy = std::min(best_copy, copy_s);
    }
    TS_CHECK(received == plain);
    const double total = static_cast<double>(bytes) * reps / 1e9;
    const double seal_gbps = total / best_seal, open_gbps = total / best_open, copy_gbps = total / best_copy;
    std::printf("%5llu KiB %7zu %10.2f %10.2f %12.2f %11.3f %11.3f\n", static_cast<unsigned long long>(bytes >> 10),
                m.pieces.size(), seal_gbps, open_gbps, copy_gbps, seal_gbps / copy_gbps, open_gbps / copy_gbps);
  }
  return 0;
}
