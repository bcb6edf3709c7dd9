// ServeProcess: `tessera serve` as a real process on node 0 of a test Cluster
// (tests/support/cluster.h: network namespaces as root, loopback otherwise), and
// curl run beside it (in its namespace) as the client, one process a request, so
// that requests run at once. What the multinode serve tests share.
//
// Used from one test thread.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/cluster.h"
#include "support/run_tessera.h"

namespace tessera::testing {

inline constexpr const char* kCurl = "/usr/bin/curl";

class ServeProcess {
 public:
  // Starts `tessera serve <args>` on node 0, listening on `address` (default:
  // node 0's address in the trust file, for a node that listens on nothing else).
  ServeProcess(tessera::test::Cluster& cluster, const std::vector<std::string>& args, std::string address = "")
      : cluster_(cluster) {
    if (address.empty()) address = cluster.address(0);
    url_ = "http://" + address;
    const std::string host = address.substr(0, address.rfind(':')), port = address.substr(address.rfind(':') + 1);
    log_ = cluster.dir() / "serve.log";
    std::vector<std::string> argv = {TESSERA_BINARY, "serve"};
    argv.insert(argv.end(), args.begin(), args.end());
    for (const std::string& a : {std::string("--host"), host, std::string("--port"), port}) argv.push_back(a);
    process_ = cluster.spawn(0, argv, log_);
  }
  std::string log() const { return slurp(log_); }
  int process() const { return process_; }

  struct Reply {
    int status = 0;  // -1: curl failed
    std::string body;
  };
  // Starts curl with `body` for `target` (POST when a body is given); returns its request number.
  int start(const std::string& target, const std::string& body = "") {
    const int n = requests_++;
    const auto request = cluster_.dir() / ("request" + std::to_string(n) + ".json");
    out_.push_back(cluster_.dir() / ("reply" + std::to_string(n) + ".txt"));
    code_.push_back(cluster_.dir() / ("code" + std::to_string(n) + ".txt"));
    std::vector<std::string> argv = {kCurl, "-sS", "-N", "-o", out_.back().string(), "-w", "%{http_code}"};
    if (!body.empty()) {
      std::ofstream(request) << body;
      for (const std::string a : {"-H", "Content-Type: application/json", "--data-binary"}) argv.push_back(a);
      argv.push_back("@" + request.string());
    }
    argv.push_back(url_ + target);
    index_.push_back(cluster_.spawn(0, argv, code_.back()));
    return n;
  }
  Reply finish(int n, std::chrono::seconds limit = std::chrono::seconds(120)) {
    const int code = cluster_.wait(index_[static_cast<size_t>(n)], limit);
    Reply reply;
    const std::string status = slurp(code_[static_cast<size_t>(n)]);
    reply.status =
        code == 0 && !status.empty() && std::isdigit(static_cast<unsigned char>(status[0])) ? std::stoi(status) : -1;
    reply.body = slurp(out_[static_cast<size_t>(n)]);
    return reply;
  }
  Reply request(const std::string& target, const std::string& body = "") { return finish(start(target, body)); }
  // The client of request n leaves (curl killed): the server sees its connection close.
  void cut(int n) {
    cluster_.kill(index_[static_cast<size_t>(n)], SIGKILL);
    cluster_.wait(index_[static_cast<size_t>(n)], std::chrono::seconds(10));
  }
  // Whether request n's reply so far holds `text`.
  bool received(int n, const std::string& text) const {
    return slurp(out_[static_cast<size_t>(n)]).find(text) != std::string::npos;
  }
  // Starts two completions that run until cut short (1,500 tokens, token 1
  // barred), one streamed and one whole, and returns their request numbers
  // (stream, whole) once the stream has sent an event and the whole answer has
  // had 200 ms: what the failure tests then cut short.
  std::pair<int, int> start_endless_answers() {
    const std::string body = R"("prompt": "Once upon a time", "max_tokens": 1500, "logit_bias": {"1": -100})";
    const int stream = start("/v1/completions", "{" + body + R"(, "stream": true})");
    const int whole = start("/v1/completions", "{" + body + "}");
    const auto by = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!received(stream, "data: ")) {
      if (std::chrono::steady_clock::now() > by) {
        ADD_FAILURE() << "no streamed event in 60 s: " << log();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the whole answer is under way too
    return {stream, whole};
  }
  // Waits (bounded) until /health answers 200; false if it did not in `limit`
  // or the server ended.
  bool wait_ready(std::chrono::seconds limit = std::chrono::seconds(60)) {
    const auto by = std::chrono::steady_clock::now() + limit;
    while (request("/health").status != 200) {
      if (std::chrono::steady_clock::now() > by) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    return true;
  }

 private:
  tessera::test::Cluster& cluster_;
  std::string url_;
  std::filesystem::path log_;
  int process_ = -1;
  int requests_ = 0;
  std::vector<std::filesystem::path> out_, code_;
  std::vector<int> index_;
};

}  // namespace tessera::testing
