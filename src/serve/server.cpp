#include "serve/server.h"

#include <boost/asio/signal_set.hpp>
#include <boost/asio/strand.hpp>
#include <csignal>
#include <cstdio>
#include <future>

#include "serve/http_session.h"

namespace tessera::serve {

namespace net = boost::asio;
using tcp = net::ip::tcp;

Server::Server(ServerOptions options)
    : options_(std::move(options)),
      loop_(options_.loop),
      routes_(loop_, counters_, options_.routes),
      delivery_(net::make_strand(io_)),
      acceptor_(net::make_strand(io_)) {
  // One hand-over a step from the inference thread; the I/O threads fan the events out.
  loop_.deliver_events_with([this](EventBatch batch) {
    net::post(delivery_, [batch = std::move(batch)]() mutable {
      for (auto& [sink, event] : batch) (*sink)(std::move(event));
    });
  });
}

Server::~Server() { shutdown(); }

Status Server::listen() {
  boost::system::error_code ec;
  const auto address = net::ip::make_address(options_.host, ec);
  if (ec) return Status::invalid_input("--host '" + options_.host + "' is not an IP address: " + ec.message());
  const tcp::endpoint endpoint(address, options_.port);
  const std::string where = options_.host + ":" + std::to_string(options_.port);
  if (acceptor_.open(endpoint.protocol(), ec); ec)
    return Status::invalid_input("opening " + where + ": " + ec.message());
  acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (acceptor_.bind(endpoint, ec); ec) return Status::invalid_input("binding " + where + ": " + ec.message());
  if (acceptor_.listen(net::socket_base::max_listen_connections, ec); ec)
    return Status::invalid_input("listening on " + where + ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();
  return {};
}

void Server::accept() {
  acceptor_.async_accept(net::make_strand(io_), [this](boost::system::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor_.is_open()) return;
    if (!ec)
      std::make_shared<HttpSession>(
          std::move(socket), SessionContext{routes_, loop_, counters_, options_.body_limit, draining_, busy_sessions_})
          ->start();
    accept();
  });
}

void Server::start() {
  loop_.start();
  accept();
  for (size_t i = 0; i < std::max<size_t>(options_.io_threads, 1); ++i) threads_.emplace_back([this] { io_.run(); });
}

Status Server::run_until_signal() {
  net::signal_set signals(io_, SIGINT, SIGTERM);
  std::promise<void> signalled;
  signals.async_wait([&signalled](const boost::system::error_code& ec, int) {
    if (!ec) signalled.set_value();
  });
  std::future<void> wait = signalled.get_future();
  // Wakes every 100 ms to see whether loading failed; a signal ends the wait at once.
  while (wait.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready) {
    if (Status loaded = loop_.load_status(); !loaded.ok()) {
      signals.cancel();
      shutdown();
      return loaded;
    }
  }
  std::fprintf(stderr, "[serve] shutting down: %lld requests in flight\n", static_cast<long long>(loop_.in_flight()));
  shutdown();
  return {};
}

void Server::shutdown() {
  if (stopped_) return;
  stopped_ = true;
  draining_ = true;
  net::post(acceptor_.get_executor(), [this] {
    boost::system::error_code ignored;
    acceptor_.close(ignored);
  });
  // Requests in flight finish and their answers are written, up to the timeout.
  auto settle = [this](std::chrono::steady_clock::time_point deadline) {
    while ((loop_.in_flight() > 0 || busy_sessions_.load() > 0) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  settle(std::chrono::steady_clock::now() + options_.shutdown_timeout);
  loop_.stop();  // what is left fails ("shutting down"); its sessions write that, briefly
  settle(std::chrono::steady_clock::now() + std::chrono::seconds(1));
  io_.stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

}  // namespace tessera::serve
