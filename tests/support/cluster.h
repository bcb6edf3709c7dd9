// A test cluster of separate processes: node identities (tessera keygen's code)
// and a trust file in a fresh directory, and, when this runs as root, one network
// namespace per node, joined by a bridge in a hub namespace (veth pairs,
// addresses 10.231.0.N/24 that exist only inside those namespaces). Without
// root, or where namespaces cannot be made, every node listens on 127.0.0.1 on
// its own port. Nothing outside the namespaces or loopback is touched.
//
// Used from one test thread.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::test {

class Cluster {
 public:
  // `extra_unknown` more identities that the trust file does not list.
  explicit Cluster(int nodes, int extra_unknown = 0);
  ~Cluster();
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  int size() const { return nodes_; }
  bool in_namespaces() const { return namespaces_; }
  std::string name(int node) const { return "node" + std::to_string(node); }
  std::string members() const;  // "node0,node1,..."
  std::filesystem::path identity(int node) const { return dir_ / name(node); }
  std::filesystem::path trust_file() const { return dir_ / "trust.json"; }
  std::filesystem::path dir() const { return dir_; }

  std::string address(int node) const { return addresses_.at(node); }  // "host:port" in the trust file

  // Starts argv as node `node` (in its namespace); stdout and stderr go to `log`.
  // Returns the process's index (spawn order).
  int spawn(int node, const std::vector<std::string>& argv, const std::filesystem::path& log);
  // Waits for one process up to `timeout` (then kills it); its exit code, -1 if killed.
  int wait(int index, std::chrono::seconds timeout);
  // Waits for every spawned process; kills them all after `timeout`. Returns the
  // exit codes in spawn order (-1: killed or crashed).
  std::vector<int> wait_all(std::chrono::seconds timeout);
  void kill(int index, int signal);  // spawn order

 private:
  bool make_namespaces();
  void delete_namespaces();
  std::string ns(int node) const { return prefix_ + "n" + std::to_string(node); }

  int nodes_;
  std::filesystem::path dir_;
  std::string prefix_;
  bool namespaces_ = false;
  std::vector<pid_t> pids_;
  std::vector<std::string> addresses_;
};

}  // namespace tessera::test
