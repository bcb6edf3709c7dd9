#include "support/cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "net/local_cluster.h"

namespace tessera::test {
namespace {

bool sh(const std::string& command) { return std::system((command + " >/dev/null 2>&1").c_str()) == 0; }

}  // namespace

Cluster::Cluster(int nodes, int extra_unknown) : nodes_(nodes) {
  static int counter = 0;
  prefix_ = "ts" + std::to_string(getpid()) + "c" + std::to_string(counter++);
  dir_ = std::filesystem::temp_directory_path() / ("tessera-" + prefix_);
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  namespaces_ = geteuid() == 0 && std::getenv("TESSERA_NO_NETNS") == nullptr && make_namespaces();
  std::vector<net::LocalNode> local;
  for (int node = 0; node < nodes + extra_unknown; ++node) {
    std::string address;  // empty: unknown to the cluster
    if (node < nodes) {
      Result<uint16_t> port = net::free_loopback_port();
      if (!port.ok()) throw std::runtime_error(port.status().to_string());
      address = namespaces_ ? "10.231.0." + std::to_string(node + 1) + ":7000" : "127.0.0.1:" + std::to_string(*port);
    }
    local.push_back({name(node), address});
    if (node < nodes) addresses_.push_back(address);
  }
  Status written = net::write_local_cluster(dir_, local);
  if (!written.ok()) throw std::runtime_error(written.to_string());
}

Cluster::~Cluster() {
  for (pid_t pid : pids_) {
    if (pid > 0) ::kill(pid, SIGKILL);
  }
  wait_all(std::chrono::seconds(0));
  if (namespaces_) delete_namespaces();
  std::filesystem::remove_all(dir_);
}

std::string Cluster::members() const {
  std::string out;
  for (int node = 0; node < nodes_; ++node) out += (node ? "," : "") + name(node);
  return out;
}

bool Cluster::make_namespaces() {
  const std::string hub = prefix_ + "h";
  if (!sh("ip netns add " + hub)) return false;
  bool ok = sh("ip -n " + hub + " link add br0 type bridge") && sh("ip -n " + hub + " link set br0 up");
  for (int node = 0; ok && node < nodes_; ++node) {
    const std::string port = "p" + std::to_string(node);
    ok = sh("ip netns add " + ns(node)) && sh("ip -n " + ns(node) + " link set lo up") &&
         sh("ip link add eth0 netns " + ns(node) + " type veth peer name " + port + " netns " + hub) &&
         sh("ip -n " + ns(node) + " addr add 10.231.0." + std::to_string(node + 1) + "/24 dev eth0") &&
         sh("ip -n " + ns(node) + " link set eth0 up") && sh("ip -n " + hub + " link set " + port + " master br0 up");
  }
  if (!ok) delete_namespaces();
  return ok;
}

void Cluster::delete_namespaces() {
  for (int node = 0; node < nodes_; ++node) sh("ip netns del " + ns(node));
  sh("ip netns del " + prefix_ + "h");
}

int Cluster::spawn(int node, const std::vector<std::string>& argv, const std::filesystem::path& log) {
  std::vector<std::string> full;
  if (namespaces_) full = {"/usr/sbin/ip", "netns", "exec", ns(node)};
  full.insert(full.end(), argv.begin(), argv.end());
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<char*> args;
    for (std::string& arg : full) args.push_back(arg.data());
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  pids_.push_back(pid);
  return static_cast<int>(pids_.size()) - 1;
}

int Cluster::wait(int index, std::chrono::seconds timeout) {
  const pid_t pid = pids_.at(index);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) != pid) {
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pids_[index] = -1;
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  pids_[index] = -1;  // reaped
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void Cluster::kill(int index, int signal) { ::kill(pids_.at(index), signal); }

std::vector<int> Cluster::wait_all(std::chrono::seconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> codes(pids_.size(), -1);
  std::vector<bool> done(pids_.size(), false);
  for (;;) {
    bool all = true;
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (done[i] || pids_[i] <= 0) continue;
      int status = 0;
      if (waitpid(pids_[i], &status, WNOHANG) == pids_[i]) {
        done[i] = true;
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
      } else {
        all = false;
      }
    }
    if (all) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      for (size_t i = 0; i < pids_.size(); ++i) {
        if (!done[i] && pids_[i] > 0) {
          ::kill(pids_[i], SIGKILL);
          waitpid(pids_[i], nullptr, 0);
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  pids_.clear();
  return codes;
}

}  // namespace tessera::test
