// PipelineCluster: the pipeline as separate processes for tests: `tessera stage`
// workers on nodes 1..3 of a test Cluster (tests/support/cluster.h: network
// namespaces as root, loopback otherwise) and coordinators run as node 0.
//
// Used from one test thread.
#pragma once

#include <signal.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cluster.h"
#include "support/run_tessera.h"

namespace tessera::test {

using tessera::testing::slurp;

constexpr int kStages = 3;  // nodes 1..3; node 0 coordinates

class PipelineCluster {
 public:
  // `stage_args`: more flags for every `tessera stage`; `node_args`: more for
  // the stage on one node (a device, say).
  explicit PipelineCluster(std::vector<std::string> stage_args = {},
                           std::function<std::vector<std::string>(int node)> node_args = {})
      : cluster_(1 + kStages), stage_args_(std::move(stage_args)), node_args_(std::move(node_args)) {
    for (int node = 1; node <= kStages; ++node) start_stage(node);
  }
  void start_stage(int node) {
    std::vector<std::string> argv = {TESSERA_BINARY, "stage",
                                     "--listen",     cluster_.address(node),
                                     "--identity",   cluster_.identity(node).string(),
                                     "--trust",      cluster_.trust_file().string(),
                                     "--threads",    "1"};
    argv.insert(argv.end(), stage_args_.begin(), stage_args_.end());
    if (node_args_) {
      const std::vector<std::string> more = node_args_(node);
      argv.insert(argv.end(), more.begin(), more.end());
    }
    stage_process_[node] = cluster_.spawn(node, argv, cluster_.dir() / ("stage" + std::to_string(node) + ".log"));
  }
  void signal_stage(int node, int signal) { cluster_.kill(stage_process_[node], signal); }
  void kill_stage(int node) {
    cluster_.kill(stage_process_[node], SIGKILL);
    wait_stage(node);
  }
  void wait_stage(int node) { cluster_.wait(stage_process_[node], std::chrono::seconds(5)); }
  // Writes a plan giving stage i the layers [cuts[i], cuts[i+1]) of `model`.
  std::string plan(const std::string& model, const std::vector<int>& cuts) {
    nlohmann::json stages = nlohmann::json::array();
    for (size_t i = 0; i + 1 < cuts.size(); ++i) {
      stages.push_back(
          {{"name", cluster_.name(static_cast<int>(i) + 1)}, {"model", model}, {"layers", {cuts[i], cuts[i + 1]}}});
    }
    const auto path = cluster_.dir() / ("plan" + std::to_string(plans_++) + ".json");
    std::ofstream(path) << nlohmann::json{{"stages", stages}}.dump();
    return path.string();
  }
  struct Run {
    int exit_code;
    std::string out, err;
  };
  // `tessera <args> --identity node0 --trust ...` as node 0 (in its namespace).
  Run run_as_coordinator(std::vector<std::string> args) {
    args.insert(args.begin(), TESSERA_BINARY);
    for (const std::string& a : {std::string("--identity"), cluster_.identity(0).string(), std::string("--trust"),
                                 cluster_.trust_file().string()})
      args.push_back(a);
    const auto log = cluster_.dir() / ("node0_" + std::to_string(runs_++));
    const int code = cluster_.wait(cluster_.spawn(0, args, log), std::chrono::seconds(60));
    return {code, slurp(log), slurp(log)};
  }
  // The log the next coordinate() writes (stdout and stderr).
  std::filesystem::path next_coordinator_log() const {
    return cluster_.dir() / ("coordinator" + std::to_string(runs_));
  }
  // `tessera generate <args> --pipeline plan` as node 0.
  Run coordinate(const std::vector<std::string>& args, const std::string& plan_path, int timeout_s = 120) {
    std::vector<std::string> argv = {TESSERA_BINARY, "generate"};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const std::string& a : {std::string("--pipeline"), plan_path, std::string("--identity"),
                                 cluster_.identity(0).string(), std::string("--trust"), cluster_.trust_file().string()})
      argv.push_back(a);
    const auto log = cluster_.dir() / ("coordinator" + std::to_string(runs_++));
    // stdout and stderr share the log; the id line is the last line of stdout.
    const int index = cluster_.spawn(0, argv, log);
    const int code = cluster_.wait(index, std::chrono::seconds(timeout_s));
    return {code, slurp(log), slurp(log)};
  }
  Cluster& cluster() { return cluster_; }

 private:
  Cluster cluster_;
  std::vector<std::string> stage_args_;
  std::function<std::vector<std::string>(int)> node_args_;
  int stage_process_[kStages + 1] = {};
  int plans_ = 0;
  int runs_ = 0;
};

}  // namespace tessera::test
