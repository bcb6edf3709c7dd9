// Server: `tessera serve` on one host. It listens at once (so /health can say
// "loading" with a 503), loads the model on the inference thread
// (InferenceLoop), and serves the OpenAI routes (routes.h) from a few Asio I/O
// threads, each connection an HttpSession on its own strand.
//
// Shutdown (SIGTERM or SIGINT, or shutdown()): stop accepting, let the
// requests in flight finish for at most shutdown_timeout, then fail what is
// left ("the server is shutting down"), stop the inference thread and the I/O
// threads.
//
// Thread safety: construct, listen(), start() and run()/shutdown() from one
// thread; port(), loop() and counters() may be read from any.
#pragma once

#include <atomic>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/strand.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "serve/inference_loop.h"
#include "serve/metrics.h"
#include "serve/routes.h"

namespace tessera::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;  // 0: any free port (tests)
  RouteOptions routes;
  LoopOptions loop;
  size_t io_threads = 2;
  uint64_t body_limit = uint64_t{1} << 20;
  std::chrono::milliseconds shutdown_timeout{30000};
};

class Server {
 public:
  explicit Server(ServerOptions options);
  ~Server();  // shutdown()s
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port; kInvalidInput naming the address when it cannot.
  Status listen();
  uint16_t port() const { return port_; }
  // Starts the I/O threads and the inference thread (which loads the model).
  void start();
  // Blocks until SIGTERM or SIGINT (then shuts down gracefully) or until the model fails
  // to load (returns that error).
  Status run_until_signal();
  void shutdown();

  InferenceLoop& loop() { return loop_; }
  const HttpCounters& counters() const { return counters_; }

 private:
  void accept();

  const ServerOptions options_;
  InferenceLoop loop_;
  HttpCounters counters_;
  Routes routes_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> busy_sessions_{0};
  boost::asio::io_context io_;
  // The inference loop's event batches run here, one after another, in order;
  // each sink then posts to its own session's strand.
  boost::asio::strand<boost::asio::io_context::executor_type> delivery_;
  boost::asio::ip::tcp::acceptor acceptor_;
  uint16_t port_ = 0;
  std::vector<std::thread> threads_;
  bool stopped_ = false;
};

}  // namespace tessera::serve
