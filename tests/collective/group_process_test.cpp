// Groups of 2, 3 and 4 ranks as separate processes over TCP (in network
// namespaces when run as root; loopback otherwise): results against the
// fixed-order reference, sealed bitwise equal to plain, and the tamper matrix.
// TESSERA_DIST_QUICK=1 (the ThreadSanitizer run) trims sizes and cases.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "support/cluster.h"

namespace {

using nlohmann::json;
using tessera::test::Cluster;

bool quick() { return std::getenv("TESSERA_DIST_QUICK") != nullptr; }

// Runs one rank process per node and returns each rank's JSON lines.
std::vector<std::vector<json>> run_ranks(Cluster& cluster, const std::string& scenario, bool plain) {
  for (int rank = 0; rank < cluster.size(); ++rank) {
    std::vector<std::string> argv = {TESSERA_RANK_BINARY,
                                     "--identity",
                                     cluster.identity(rank).string(),
                                     "--trust",
                                     cluster.trust_file().string(),
                                     "--members",
                                     cluster.members(),
                                     "--scenario",
                                     scenario,
                                     "--out",
                                     (cluster.dir() / ("out" + std::to_string(rank))).string()};
    if (plain) argv.push_back("--plain");
    if (quick()) argv.push_back("--quick");
    cluster.spawn(rank, argv, cluster.dir() / ("log" + std::to_string(rank)));
  }
  const std::vector<int> codes = cluster.wait_all(std::chrono::seconds(600));
  std::vector<std::vector<json>> out(cluster.size());
  for (int rank = 0; rank < cluster.size(); ++rank) {
    std::ifstream in(cluster.dir() / ("out" + std::to_string(rank)));
    for (std::string line; std::getline(in, line);) out[rank].push_back(json::parse(line));
    std::ifstream log(cluster.dir() / ("log" + std::to_string(rank)));
    const std::string log_text((std::istreambuf_iterator<char>(log)), {});
    EXPECT_EQ(codes[rank], 0) << "rank " << rank << " log:\n" << log_text;
    EXPECT_FALSE(out[rank].empty() || !out[rank].back().contains("done")) << "rank " << rank << " did not finish:\n"
                                                                          << log_text;
  }
  return out;
}

class GroupProcessTest : public ::testing::TestWithParam<int> {};

TEST_P(GroupProcessTest, CollectivesMatchReferenceAndSealedEqualsPlainBitwise) {
  Cluster cluster(GetParam());
  std::cout << "ranks in " << (cluster.in_namespaces() ? "network namespaces" : "loopback (no namespaces)") << "\n";
  const auto sealed = run_ranks(cluster, "collectives", false);
  const auto plain = run_ranks(cluster, "collectives", true);
  for (int rank = 0; rank < GetParam(); ++rank) {
    ASSERT_EQ(sealed[rank].size(), plain[rank].size());
    ASSERT_GT(sealed[rank].size(), 10u);
    for (size_t i = 0; i + 1 < sealed[rank].size(); ++i) {
      const json& s = sealed[rank][i];
      SCOPED_TRACE("rank " + std::to_string(rank) + ": " + s.dump());
      EXPECT_TRUE(s["ok"].get<bool>());
      EXPECT_TRUE(plain[rank][i]["ok"].get<bool>()) << plain[rank][i].dump();
      EXPECT_EQ(s["digest"], plain[rank][i]["digest"]);
      const std::string collective = s["collective"];
      if (collective == "all_sum" || collective == "all_gather" || collective == "broadcast") {
        EXPECT_EQ(s["digest"], sealed[0][i]["digest"]) << "rank " << rank << " differs from rank 0";
      }
    }
  }
}

// Every case: rank 0 corrupts one piece to rank 1. Every rank must raise, naming
// the check rank 1's opener made, within 100 ms of each other, then rebuild the
// group (a new generation) and compute a clean all_sum.
TEST_P(GroupProcessTest, TamperMatrixEveryRankRefusesNamingTheCheckAndRecovers) {
  Cluster cluster(GetParam());
  const auto out = run_ranks(cluster, "tamper", false);
  ASSERT_GE(out[0].size(), 3u);
  for (int rank = 0; rank < GetParam(); ++rank) {
    EXPECT_TRUE(out[rank][0]["clean"].get<bool>());
    ASSERT_EQ(out[rank].size(), out[0].size());
  }
  int64_t worst_spread = 0;
  for (size_t i = 1; i + 1 < out[0].size(); ++i) {
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (int rank = 0; rank < GetParam(); ++rank) {
      const json& line = out[rank][i];
      SCOPED_TRACE("rank " + std::to_string(rank) + ": " + line.dump());
      ASSERT_TRUE(line.contains("raised_ns"));
      const std::string error = line["error"];
      EXPECT_NE(error.find(line["expect"].get<std::string>()), std::string::npos);
      EXPECT_TRUE(line["recovered"].get<bool>());
      if (rank != 1) {
        EXPECT_NE(error.find("rank 1 aborted"), std::string::npos);
      }
      first = std::min<int64_t>(first, line["raised_ns"]);
      last = std::max<int64_t>(last, line["raised_ns"]);
    }
    EXPECT_LT(last - first, 100'000'000) << out[0][i].dump();
    worst_spread = std::max(worst_spread, last - first);
  }
  std::cout << out[0].size() - 2
            << " cases; worst spread between the first and last rank to raise: " << worst_spread / 1000 << " us\n";
}

INSTANTIATE_TEST_SUITE_P(Ranks, GroupProcessTest, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

}  // namespace
