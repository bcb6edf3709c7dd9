// `tessera bench-collective`: latency and bandwidth of every collective of a
// TcpGroup of N ranks on this machine (threads of this process, each a full rank
// with its own identity, TLS channels and loopback data connections), sealed and
// plain in the same run so the cost of sealing is a ratio, not a guess.
//   tessera bench-collective --ranks 2 --bytes 16K,1M,64M [--plain]
// Bandwidth is the per-rank buffer size over the median time of one collective;
// plain and sealed runs alternate (bench_rank).
#include <unistd.h>
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "cli/commands.h"
#include "collective/tcp/tcp_group.h"
#include "net/identity.h"
#include "net/local_cluster.h"
#include "net/trust.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchCollectiveOptions {
  int ranks = 2;
  std::vector<uint64_t> bytes = {16 << 10, 1 << 20, 64 << 20};
  bool plain_only = false;
  uint32_t piece_bytes = 256 << 10;
};

enum class Op { kAllSum, kReduceScatter, kAllGather, kBroadcast, kSendRecv };
constexpr Op kOps[] = {Op::kAllSum, Op::kReduceScatter, Op::kAllGather, Op::kBroadcast, Op::kSendRecv};
const char* op_name(Op op) {
  switch (op) {
    case Op::kAllSum: return "all_sum";
    case Op::kReduceScatter: return "reduce_scatter";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
    case Op::kSendRecv: return "send_recv";
  }
  return "?";
}

// One collective on `bytes` bytes per rank (f32): reduce_scatter's input and
// all_gather's output are `bytes`; send_recv sends rank 0 -> rank 1.
Status run_op(Group& group, Op op, std::vector<uint8_t>& a, std::vector<uint8_t>& b) {
  const int n = group.size();
  switch (op) {
    case Op::kAllSum: return group.all_sum(a, DType::kF32);
    case Op::kReduceScatter: return group.reduce_scatter(a, std::span(b).first(a.size() / n), DType::kF32);
    case Op::kAllGather: return group.all_gather(std::span(a).first(b.size() / n), b, DType::kF32);
    case Op::kBroadcast: return group.broadcast(a, DType::kF32, 0);
    case Op::kSendRecv:
      if (group.rank() == 0) return group.send(a, DType::kF32, 1);
      if (group.rank() == 1) return group.recv(a, DType::kF32, 0);
      return {};
  }
  return {};
}

struct Timing {
  double plain_s = 0;   // median of the plain runs
  double sealed_s = 0;  // median of the sealed runs (0 with --plain)
};

// Every rank runs the same schedule: for each size and collective, runs of the
// plain and the sealed group alternate, so a change in the host's load falls on
// both alike. Ranks line up with a 1-element all_sum before each run. Rank 0's
// medians are reported.
Status bench_rank(Group& plain, Group* sealed, const BenchCollectiveOptions& o, std::vector<Timing>& out) {
  std::vector<float> sync(1);
  auto time_run = [&](Group& group, Op op, std::vector<uint8_t>& a, std::vector<uint8_t>& b) -> Result<double> {
    TS_RETURN_IF_ERROR(group.all_sum({reinterpret_cast<uint8_t*>(sync.data()), 4}, DType::kF32));
    const auto start = Clock::now();
    TS_RETURN_IF_ERROR(run_op(group, op, a, b));
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  for (uint64_t bytes : o.bytes) {
    const uint64_t rounded = bytes / (4 * o.ranks) * (4 * o.ranks);  // whole f32 elements per rank chunk
    std::vector<uint8_t> a(rounded, 1), b(rounded, 1);
    const int runs =
        static_cast<int>(std::clamp<uint64_t>((uint64_t{512} << 20) / std::max<uint64_t>(rounded, 1), 5, 200));
    for (Op op : kOps) {
      std::vector<double> plain_times, sealed_times;
      for (int run = -2; run < runs; ++run) {  // two warm-up runs
        TS_ASSIGN_OR_RETURN(const double p, time_run(plain, op, a, b));
        if (run >= 0) plain_times.push_back(p);
        if (!sealed) continue;
        TS_ASSIGN_OR_RETURN(const double s, time_run(*sealed, op, a, b));
        if (run >= 0) sealed_times.push_back(s);
      }
      out.push_back({median(plain_times), sealed ? median(sealed_times) : 0});
    }
  }
  return {};
}

// A cluster of o.ranks loopback nodes in `dir` (identities and trust file).
Status write_cluster(const BenchCollectiveOptions& o, const std::filesystem::path& dir) {
  std::vector<net::LocalNode> nodes;
  for (int r = 0; r < o.ranks; ++r) {
    TS_ASSIGN_OR_RETURN(const uint16_t port, net::free_loopback_port());
    nodes.push_back({"rank" + std::to_string(r), "127.0.0.1:" + std::to_string(port)});
  }
  return net::write_local_cluster(dir, nodes);
}

Result<Group> connect(const BenchCollectiveOptions& o, const std::filesystem::path& dir, int rank, bool plain) {
  TS_ASSIGN_OR_RETURN(const net::TrustFile trust, net::read_trust_file(dir / "trust.json"));
  collective::GroupOptions options;
  for (int r = 0; r < o.ranks; ++r) options.members.push_back("rank" + std::to_string(r));
  options.plain = plain;
  options.piece_bytes = o.piece_bytes;
  TS_ASSIGN_OR_RETURN(const net::Identity identity, net::load_identity(dir / options.members[rank]));
  return collective::connect_group(identity, trust, options);
}

// Each rank (a thread) joins a plain group and, unless --plain, a sealed one.
Result<std::vector<Timing>> bench_ranks(const BenchCollectiveOptions& o, const std::filesystem::path& dir) {
  TS_RETURN_IF_ERROR(write_cluster(o, dir / "plain"));
  if (!o.plain_only) TS_RETURN_IF_ERROR(write_cluster(o, dir / "sealed"));
  std::vector<Status> status(o.ranks);
  std::vector<std::vector<Timing>> timings(o.ranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r) {
    threads.emplace_back([&, r] {
      status[r] = [&]() -> Status {
        TS_ASSIGN_OR_RETURN(Group plain, connect(o, dir / "plain", r, true));
        if (o.plain_only) return bench_rank(plain, nullptr, o, timings[r]);
        TS_ASSIGN_OR_RETURN(Group sealed, connect(o, dir / "sealed", r, false));
        return bench_rank(plain, &sealed, o, timings[r]);
      }();
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const Status& s : status) TS_RETURN_IF_ERROR(s);
  return timings[0];
}

Status bench_collective(const BenchCollectiveOptions& o) {
  if (o.ranks < 2) return Status::invalid_input("--ranks must be at least 2 (a group of 1 does nothing)");
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessera-bench-collective-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  Result<std::vector<Timing>> timings = bench_ranks(o, dir);
  std::filesystem::remove_all(dir);
  TS_RETURN_IF_ERROR(timings.status());

  std::printf("%d ranks on loopback, f32, pieces of %u KiB; per-rank buffer bytes; median of runs,\n", o.ranks,
              o.piece_bytes >> 10);
  std::printf("plain and sealed runs alternating\n");
  std::printf("%-15s %10s  %12s %10s", "collective", "bytes", "plain_us", "plain_GB/s");
  if (!o.plain_only) std::printf("  %12s %10s  %8s %9s", "sealed_us", "sealed_GB/s", "bw_ratio", "added_us");
  std::printf("\n");
  size_t i = 0;
  for (uint64_t bytes : o.bytes) {
    for (Op op : kOps) {
      const double p = (*timings)[i].plain_s;
      std::printf("%-15s %10llu  %12.1f %10.2f", op_name(op), static_cast<unsigned long long>(bytes), p * 1e6,
                  static_cast<double>(bytes) / p / 1e9);
      if (!o.plain_only) {
        const double s = (*timings)[i].sealed_s;
        std::printf("  %12.1f %10.2f  %8.2f %9.1f", s * 1e6, static_cast<double>(bytes) / s / 1e9, p / s,
                    (s - p) * 1e6);
      }
      std::printf("\n");
      ++i;
    }
  }
  return {};
}

}  // namespace

void register_bench_collective(CLI::App& app, int& exit_code) {
  auto options = std::make_shared<BenchCollectiveOptions>();
  CLI::App* cmd = app.add_subcommand("bench-collective", "latency and bandwidth of each collective, sealed vs plain");
  cmd->add_option("--ranks", options->ranks, "ranks (threads of this process)")->capture_default_str();
  cmd->add_option("--bytes", options->bytes, "per-rank buffer sizes, e.g. 16K,1M,64M")
      ->delimiter(',')
      ->transform(CLI::AsSizeValue(false));
  cmd->add_option("--piece-bytes", options->piece_bytes, "sealed piece size")->capture_default_str();
  cmd->add_flag("--plain", options->plain_only, "plain only (no sealed run)");
  cmd->callback([options, &exit_code] {
    const Status status = bench_collective(*options);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
