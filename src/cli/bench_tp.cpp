// `tessera bench-tp`: tensor-parallel decode on one host, as ranks that are
// threads of this process, each with its own identity, TcpGroup on loopback,
// CPU device (--threads each) and shard of one model, against one Forward with
// ranks x threads threads. Prints per-token decode time split into compute and
// collectives (the leader's time inside all_sum / all_gather / the step
// broadcast, which includes waiting for the slowest rank), plain and sealed
// groups in alternating rounds; sealing's cost is sealed minus plain.
//   tessera bench-tp --config bench/shapes/llama-3.2-1b.json --random-weights --ranks 2 --threads 1
//   tessera bench-tp --model DIR --ranks 2 --threads 8
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <thread>

#include "cli/commands.h"
#include "collective/tcp/tcp_group.h"
#include "io/model_config.h"
#include "model/forward.h"
#include "net/identity.h"
#include "net/local_cluster.h"
#include "net/trust.h"

namespace tessera {
namespace {

using Clock = std::chrono::steady_clock;

struct BenchTpOptions {
  std::string model_dir;
  std::string config_path;
  bool random_weights = false;
  std::string dtype = "bf16";
  uint64_t seed = 1;
  int ranks = 2;
  size_t threads = 1;  // per rank; the one-process run gets ranks x threads
  int64_t prompt_tokens = 16;
  int64_t decode_tokens = 32;
  int rounds = 3;
};

// Per-token decode seconds: all of it, and the leader's part inside collectives.
struct DecodeTime {
  double total = 0;
  double collective = 0;
};

// A prompt then decode_tokens greedy steps; the median step's time.
Result<DecodeTime> time_decode(Forward& forward, const BenchTpOptions& o) {
  std::mt19937 rng(7);
  const int64_t vocab = forward.model().config().vocab_size;
  std::vector<int32_t> prompt(static_cast<size_t>(o.prompt_tokens));
  for (auto& id : prompt) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  KvCache cache = forward.make_cache(o.prompt_tokens + o.decode_tokens);
  TS_ASSIGN_OR_RETURN(std::vector<float> logits, forward.run_ids(prompt, cache));
  std::vector<double> total, collective;
  for (int64_t step = 0; step < o.decode_tokens; ++step) {
    const auto next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const double before = forward.collective_seconds();
    const auto start = Clock::now();
    TS_ASSIGN_OR_RETURN(logits, forward.run_ids(std::span(&next, 1), cache));
    total.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    collective.push_back(forward.collective_seconds() - before);
  }
  return DecodeTime{median(total), median(collective)};
}

// The ranks as threads over a group on loopback (written into `dir`); rank 0 times.
Result<DecodeTime> run_group(const Model& whole, const BenchTpOptions& o, const std::filesystem::path& dir,
                             bool plain) {
  std::filesystem::remove_all(dir);
  std::vector<net::LocalNode> nodes;
  collective::GroupOptions options;
  for (int r = 0; r < o.ranks; ++r) {
    TS_ASSIGN_OR_RETURN(const uint16_t port, net::free_loopback_port());
    nodes.push_back({"rank" + std::to_string(r), "127.0.0.1:" + std::to_string(port)});
    options.members.push_back(nodes.back().name);
  }
  TS_RETURN_IF_ERROR(net::write_local_cluster(dir, nodes));
  TS_ASSIGN_OR_RETURN(const net::TrustFile trust, net::read_trust_file(dir / "trust.json"));
  options.plain = plain;
  std::vector<Status> status(static_cast<size_t>(o.ranks));
  DecodeTime time;
  std::vector<std::thread> threads;
  for (int r = 0; r < o.ranks; ++r) {
    threads.emplace_back([&, r] {
      status[static_cast<size_t>(r)] = [&]() -> Status {
        TS_ASSIGN_OR_RETURN(const net::Identity identity, net::load_identity(dir / options.members[r]));
        TS_ASSIGN_OR_RETURN(Group group, collective::connect_group(identity, trust, options));
        TS_ASSIGN_OR_RETURN(const Model shard, whole.cut(Shard{r, o.ranks}));
        std::unique_ptr<Device> device = make_cpu_device(o.threads);
        Forward forward(shard, *device, {.kv_memory = uint64_t{256} << 20, .group = group});
        TS_RETURN_IF_ERROR(forward.status());
        if (r != 0) return forward.follow();
        TS_ASSIGN_OR_RETURN(time, time_decode(forward, o));
        return {};
      }();
    });
  }
  for (std::thread& t : threads) t.join();
  std::filesystem::remove_all(dir);
  for (const Status& s : status) TS_RETURN_IF_ERROR(s);
  return time;
}

Status bench_tp(const BenchTpOptions& o) {
  if (o.ranks < 2) return Status::invalid_input("--ranks must be at least 2");
  Result<Model> whole = Status::invalid_input("give --model or --config with --random-weights");
  if (!o.model_dir.empty()) {
    whole = Model::load(o.model_dir);
  } else if (o.random_weights && !o.config_path.empty()) {
    TS_ASSIGN_OR_RETURN(const ModelConfig config, load_model_config_file(o.config_path, check_model_type));
    TS_ASSIGN_OR_RETURN(const DType dtype, parse_weight_dtype(o.dtype));
    whole = Model::random(config, dtype, o.seed);
  }
  TS_RETURN_IF_ERROR(whole.status());
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("tessera-bench-tp-" + std::to_string(getpid()));
  std::vector<double> one_total, plain_total, plain_coll, sealed_total, sealed_coll;
  for (int round = 0; round < o.rounds; ++round) {
    {
      std::unique_ptr<Device> device = make_cpu_device(o.threads * static_cast<size_t>(o.ranks));
      Forward forward(*whole, *device, {.kv_memory = uint64_t{256} << 20});
      TS_RETURN_IF_ERROR(forward.status());
      TS_ASSIGN_OR_RETURN(const DecodeTime one, time_decode(forward, o));
      one_total.push_back(one.total);
    }
    TS_ASSIGN_OR_RETURN(const DecodeTime plain, run_group(*whole, o, dir, true));
    plain_total.push_back(plain.total);
    plain_coll.push_back(plain.collective);
    TS_ASSIGN_OR_RETURN(const DecodeTime sealed, run_group(*whole, o, dir, false));
    sealed_total.push_back(sealed.total);
    sealed_coll.push_back(sealed.collective);
  }
  const double one = median(one_total), pt = median(plain_total), pc = median(plain_coll);
  const double st = median(sealed_total), sc = median(sealed_coll);
  std::printf("decode, median ms/token over %lld steps after a %lld-token prompt; median of %d rounds\n",
              static_cast<long long>(o.decode_tokens), static_cast<long long>(o.prompt_tokens), o.rounds);
  std::printf("%-34s %9s %9s %11s %9s\n", "run", "ms/token", "compute", "collective", "vs one");
  std::printf("%-34s %9.3f %9.3f %11s %9s\n",
              ("1 process x " + std::to_string(o.threads * static_cast<size_t>(o.ranks)) + " threads").c_str(),
              one * 1e3, one * 1e3, "-", "1.00");
  const std::string shape = std::to_string(o.ranks) + " ranks x " + std::to_string(o.threads) + " threads";
  std::printf("%-34s %9.3f %9.3f %11.3f %9.2f\n", (shape + ", plain").c_str(), pt * 1e3, (pt - pc) * 1e3, pc * 1e3,
              pt / one);
  std::printf("%-34s %9.3f %9.3f %11.3f %9.2f\n", (shape + ", sealed").c_str(), st * 1e3, (st - sc) * 1e3, sc * 1e3,
              st / one);
  std::printf("sealing: %+.3f ms/token (sealed collective - plain collective); sealed/plain decode %.3f\n",
              (sc - pc) * 1e3, st / pt);
  return {};
}

}  // namespace

void register_bench_tp(CLI::App& app, int& exit_code) {
  auto o = std::make_shared<BenchTpOptions>();
  CLI::App* cmd =
      app.add_subcommand("bench-tp", "Tensor-parallel decode as threads on loopback vs one process, sealed vs plain");
  cmd->add_option("--model", o->model_dir, "Checkpoint directory");
  cmd->add_option("--config", o->config_path, "config.json of a shape, with --random-weights");
  cmd->add_flag("--random-weights", o->random_weights, "Seeded random weights in the --config shape");
  cmd->add_option("--dtype", o->dtype, "Random weights' dtype: f32, bf16 or f16")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Random weights' seed")->capture_default_str();
  cmd->add_option("--ranks", o->ranks, "Ranks (threads of this process)")
      ->check(CLI::Range(2, 64))
      ->capture_default_str();
  cmd->add_option("--threads", o->threads, "CPU threads per rank")
      ->check(CLI::Range(size_t{1}, size_t{256}))
      ->capture_default_str();
  cmd->add_option("--prompt", o->prompt_tokens, "Prompt tokens")->check(CLI::Range(1, 4096))->capture_default_str();
  cmd->add_option("--decode", o->decode_tokens, "Decode steps timed")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--rounds", o->rounds, "Rounds of (one process, plain, sealed)")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  cmd->callback([o, &exit_code] {
    const Status status = bench_tp(*o);
    exit_code = status.ok() ? 0 : report_error(status);
  });
}

}  // namespace tessera
