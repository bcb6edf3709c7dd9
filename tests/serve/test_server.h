// What the tessera serve model tests share: an in-process Server on the shipped
// model (models/tessera-tiny) on a free port, a bounded wait, and reading one
// sample of /metrics.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "serve/server.h"

namespace tessera::serve {

inline const std::string kModel = std::string(TESSERA_SOURCE_DIR) + "/models/tessera-tiny";

// Waits, bounded, for something the server does on its own threads.
template <class F>
bool eventually(F condition, std::chrono::seconds limit = std::chrono::seconds(60)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

inline ServerOptions test_options() {
  ServerOptions o;
  o.port = 0;
  o.routes.model_name = "tessera-tiny";
  o.loop.model_dir = kModel;
  o.loop.engine.threads = 2;
  o.loop.engine.forward.kv_memory = uint64_t{16} << 20;
  o.shutdown_timeout = std::chrono::milliseconds(5000);
  return o;
}

inline std::unique_ptr<Server> start_server(const ServerOptions& options) {
  auto server = std::make_unique<Server>(options);
  const Status listening = server->listen();
  EXPECT_TRUE(listening.ok()) << listening.to_string();
  server->start();
  EXPECT_TRUE(eventually([&] { return server->loop().ready() || !server->loop().load_status().ok(); }));
  return server;
}

// A sample's name and labels as /metrics writes them: `name` ("prompt_tokens_total",
// or with its own labels, "request_success_total{finished_reason=\"stop\"}") with
// the served model's name last.
inline std::string sample_key(const std::string& name, const std::string& model = "tessera-tiny") {
  const std::string label = "model_name=\"" + model + "\"}";
  return name.ends_with("}") ? name.substr(0, name.size() - 1) + "," + label : name + "{" + label;
}

// The value of one sample line of /metrics ("tessera:<name>{...} <value>"); -1 when absent.
inline double metric_value(const std::string& metrics, const std::string& name) {
  const std::string key = "\ntessera:" + sample_key(name) + " ";
  const size_t at = metrics.find(key);
  return at == std::string::npos ? -1 : std::stod(metrics.substr(at + key.size()));
}

}  // namespace tessera::serve
