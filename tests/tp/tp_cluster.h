// Tensor-parallel ranks as threads of one test process: each thread is one rank
// with its own identity, its own TcpGroup over loopback (sealed or plain), its
// own shard of a checkpoint, CPU device and Forward. Rank 0 leads (runs what
// the test gives it); the others follow() until its Forward is destroyed.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "collective/tcp/tcp_group.h"
#include "model/forward.h"
#include "net/identity.h"
#include "net/local_cluster.h"
#include "net/trust.h"

namespace tessera::testing {

class TpCluster {
 public:
  explicit TpCluster(int ranks) : ranks_(ranks) { write(); }
  ~TpCluster() { std::filesystem::remove_all(dir_); }

  // Every rank's group, formed on threads (sealed unless `plain`). A port taken
  // by another process between free_loopback_port and the listen fails the
  // group's forming: then again on fresh ports.
  std::vector<Result<Group>> connect(bool plain) {
    std::vector<Result<Group>> groups = try_connect(plain);
    for (int attempt = 0; attempt < 2 && !all_ok(groups); ++attempt) {
      groups.clear();
      write();
      groups = try_connect(plain);
    }
    return groups;
  }

 private:
  static bool all_ok(const std::vector<Result<Group>>& groups) {
    return std::all_of(groups.begin(), groups.end(), [](const Result<Group>& g) { return g.ok(); });
  }
  // Identities and a trust file with every rank on a free loopback port.
  void write() {
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
    dir_ = std::filesystem::path(::testing::TempDir()) /
           ("tp_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::remove_all(dir_);
    std::vector<net::LocalNode> nodes;
    members_.clear();
    for (int r = 0; r < ranks_; ++r) {
      nodes.push_back({"rank" + std::to_string(r), "127.0.0.1:" + std::to_string(*net::free_loopback_port())});
      members_.push_back(nodes.back().name);
    }
    EXPECT_TRUE(net::write_local_cluster(dir_, nodes).ok());
    trust_ = *net::read_trust_file(dir_ / "trust.json");
  }
  std::vector<Result<Group>> try_connect(bool plain) {
    collective::GroupOptions options;
    options.members = members_;
    options.plain = plain;
    options.connect_timeout = std::chrono::milliseconds(10000);
    options.progress_timeout = std::chrono::milliseconds(5000);
    std::vector<std::optional<Result<Group>>> groups(static_cast<size_t>(ranks_));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks_; ++r)
      threads.emplace_back([&, r] {
        const net::Identity identity = *net::load_identity(dir_ / ("rank" + std::to_string(r)));
        groups[static_cast<size_t>(r)].emplace(collective::connect_group(identity, trust_, options));
      });
    for (std::thread& t : threads) t.join();
    std::vector<Result<Group>> out;
    for (auto& g : groups) out.push_back(std::move(*g));
    return out;
  }

 public:
  // What a rank runs on, when not a CPU device and its TCP group: its device,
  // and the group it makes of its TCP group (every rank at once: an NCCL group).
  struct RankSetup {
    std::function<Result<std::unique_ptr<Device>>(int rank)> device;
    std::function<Result<Group>(Group tcp, int rank)> group;
  };

  // Loads `dir`'s shard (of `range`'s layers, or all) on every rank and runs
  // `lead` with rank 0's Forward while the others follow; every rank's Forward
  // setup and follow() must succeed. Returns false (with failures recorded)
  // when something did not.
  bool run(const std::string& dir, bool plain, const std::function<void(Forward&)>& lead, ForwardOptions options = {},
           std::optional<LayerRange> range = std::nullopt, const RankSetup& setup = {}) {
    std::vector<Result<Group>> groups = connect(plain);
    for (auto& g : groups)
      if (!g.ok()) {
        ADD_FAILURE() << g.status().to_string();
        return false;
      }
    std::vector<std::thread> threads;
    std::vector<Status> follow(static_cast<size_t>(ranks_));
    for (int r = 0; r < ranks_; ++r)
      threads.emplace_back([&, r] {
        auto model = Model::load(dir, range, Shard{r, ranks_});
        ASSERT_TRUE(model.ok()) << model.status().to_string();
        Result<std::unique_ptr<Device>> device =
            setup.device ? setup.device(r) : Result<std::unique_ptr<Device>>(make_cpu_device(1));
        ASSERT_TRUE(device.ok()) << "rank " << r << ": " << device.status().to_string();
        Result<Group> group = *groups[static_cast<size_t>(r)];
        if (setup.group) group = setup.group(*group, r);
        ASSERT_TRUE(group.ok()) << "rank " << r << ": " << group.status().to_string();
        ForwardOptions mine = options;
        mine.group = *group;
        Forward forward(*model, **device, mine);
        ASSERT_TRUE(forward.status().ok()) << "rank " << r << ": " << forward.status().to_string();
        if (r == 0) {
          lead(forward);
        } else {
          follow[static_cast<size_t>(r)] = forward.follow();
        }
      });
    for (std::thread& t : threads) t.join();
    for (int r = 1; r < ranks_; ++r) EXPECT_TRUE(follow[static_cast<size_t>(r)].ok()) << follow[r].to_string();
    return !::testing::Test::HasFailure();
  }

 private:
  static inline int counter_ = 0;
  int ranks_;
  std::filesystem::path dir_;
  std::vector<std::string> members_;
  net::TrustFile trust_;
};

}  // namespace tessera::testing
