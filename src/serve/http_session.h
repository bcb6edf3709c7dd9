// HttpSession: one client connection (Boost.Beast, async, on its own strand).
// It reads a request (the body bounded by body_limit before a byte of it is
// read: 413 past it), answers it through Routes, and for a completion hands a
// Submission to the InferenceLoop and relays what comes back: it turns each
// choice's tokens into text here (answer_text, with the request's stop strings:
// off the inference thread), and writes one JSON response, or Server-Sent
// Events (chunked) as text becomes safe to show. While a request generates,
// the session watches the socket: a client that closes it (or whose writes
// fail) sets the request's cancel flag, and the inference loop drops the
// sequence and its KV blocks on its next iteration.
//
// Thread safety: everything runs on the session's strand; the inference loop's
// sink only posts to it.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <memory>
#include <optional>

#include "serve/logprobs.h"
#include "serve/routes.h"

namespace tessera::serve {

struct SessionContext {
  const Routes& routes;
  InferenceLoop& loop;
  HttpCounters& counters;
  uint64_t body_limit;
  const std::atomic<bool>& draining;  // shutting down: answer, then close
  std::atomic<int64_t>& busy;         // sessions between reading a request and writing its answer's end
};

class HttpSession : public std::enable_shared_from_this<HttpSession> {
 public:
  HttpSession(boost::asio::ip::tcp::socket&& socket, SessionContext context);
  ~HttpSession();
  void start();

 private:
  struct Stream;  // a generation in flight
  void read();
  void on_header(boost::beast::error_code ec);
  void on_read(boost::beast::error_code ec);
  void respond(HttpResponse response);
  void after_write(boost::beast::error_code ec, bool close);
  void generate(Generation generation, unsigned version, bool keep_alive);
  void on_event(size_t choice, GenerationEvent event);
  void watch_disconnect();
  void pump();
  void linger();
  void close();

  boost::beast::tcp_stream stream_;
  boost::beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  SessionContext context_;
  std::unique_ptr<Stream> gen_;
  // Held from a request's arrival to the end of its answer (or the session's end):
  // what a graceful shutdown waits for.
  struct Busy {
    std::atomic<int64_t>& count;
    explicit Busy(std::atomic<int64_t>& c) : count(c) { ++count; }
    ~Busy() { --count; }
  };
  std::optional<Busy> busy_;
};

}  // namespace tessera::serve
