#include "serve/http_session.h"

#include <sys/socket.h>

#include <array>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/post.hpp>
#include <cerrno>
#include <chrono>
#include <iterator>
#include <utility>

namespace tessera::serve {

namespace beast = boost::beast;
namespace net = boost::asio;
using tcp = net::ip::tcp;

namespace {
constexpr auto kIdleTimeout = std::chrono::seconds(300);  // a keep-alive connection with no request
constexpr auto kWriteTimeout = std::chrono::seconds(60);  // a client that stops reading
constexpr auto kLingerTimeout = std::chrono::seconds(5);  // reading what a refused client still sends
}  // namespace

struct HttpSession::Stream {
  Generation g;
  std::shared_ptr<std::atomic<bool>> cancelled;  // shared by the request's choices
  unsigned version = 11;
  bool keep_alive = true;
  std::vector<Choice> choices;
  std::vector<TextStream> texts;                       // per choice: its tokens as text (answer_text)
  std::vector<LogprobsWriter> logprobs;                // per choice, when asked
  std::vector<std::vector<SampledLogprobs>> gathered;  // per choice: for a whole answer, or those of held-back text
  size_t pending = 0;                                  // choices whose last event has not come
  int64_t prompt_tokens = 0, completion_tokens = 0;
  Status error{};            // the first failure of a choice; the others are cancelled
  bool client_left = false;  // the socket closed or a write failed: nothing more is written
  bool started = false;      // streaming: the SSE response has begun
  bool head_pending = false;
  bool writing = false;
  bool finished = false;  // the last event is queued in `out`
  bool last_sent = false;
  std::optional<http::response<http::empty_body>> head;
  std::optional<http::response_serializer<http::empty_body>> serializer;
  std::deque<std::string> out;  // SSE events not yet written
  std::optional<http::chunk_body<net::const_buffer>> chunk;
  std::optional<http::chunk_last<http::chunk_crlf>> last;
};

HttpSession::HttpSession(tcp::socket&& socket, SessionContext context)
    : stream_(std::move(socket)), context_(context) {}

HttpSession::~HttpSession() = default;

void HttpSession::start() {
  net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->read(); });
}

void HttpSession::read() {
  busy_.reset();
  parser_.emplace();
  parser_->body_limit(context_.body_limit);
  stream_.expires_after(kIdleTimeout);
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

// The header is in (and a Content-Length over the body limit already refused). A client
// that sent "Expect: 100-continue" (curl does for bodies over 1 KiB) waits for a 100
// before sending the body.
void HttpSession::on_header(beast::error_code ec) {
  if (ec) return on_read(ec);
  auto read_body = [self = shared_from_this()] {
    http::async_read(self->stream_, self->buffer_, *self->parser_,
                     [self](beast::error_code ec, size_t) { self->on_read(ec); });
  };
  if (!beast::iequals(parser_->get()[http::field::expect], "100-continue")) return read_body();
  auto interim = std::make_shared<http::response<http::empty_body>>(http::status::continue_, parser_->get().version());
  http::async_write(stream_, *interim, [self = shared_from_this(), interim, read_body](beast::error_code ec, size_t) {
    if (ec) return self->close();
    read_body();
  });
}

void HttpSession::close() {
  busy_.reset();
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
  stream_.socket().close(ignored);
}

void HttpSession::on_read(beast::error_code ec) {
  const Routes& routes = context_.routes;
  if (ec == http::error::body_limit) {
    respond(
        routes.error({413, "the request body is over the limit of " + std::to_string(context_.body_limit) + " bytes",
                      "invalid_request_error", "", "body_too_large"},
                     parser_->get().version(), /*keep_alive=*/false));
    return;
  }
  if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::eof) return close();
  if (ec.category() == http::make_error_code(http::error::bad_target).category()) {  // not HTTP: say so, then close
    respond(routes.error(ApiError::invalid("malformed HTTP request: " + ec.message()), 11, false));
    return;
  }
  if (ec) return close();
  busy_.emplace(context_.busy);
  HttpRequest request = parser_->release();
  const bool keep_alive = request.keep_alive() && !context_.draining.load();
  auto reply = routes.handle(request);
  if (auto* response = std::get_if<HttpResponse>(&reply)) {
    response->keep_alive(keep_alive);
    return respond(std::move(*response));
  }
  generate(std::move(std::get<Generation>(reply)), request.version(), keep_alive);
}

void HttpSession::respond(HttpResponse response) {
  stream_.expires_after(kWriteTimeout);
  auto shared = std::make_shared<HttpResponse>(std::move(response));
  http::async_write(stream_, *shared, [self = shared_from_this(), shared](beast::error_code ec, size_t) {
    self->after_write(ec, shared->need_eof());
  });
}

void HttpSession::after_write(beast::error_code ec, bool close_after) {
  if (ec) return close();
  if (close_after) return linger();
  read();
}

// After the last response: no more sending, and what the client still sends (the rest of
// a body over the limit) is read and dropped for a while, so that closing does not reset
// the connection before the client has read the response.
void HttpSession::linger() {
  busy_.reset();  // the answer is written
  beast::error_code ignored;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
  stream_.expires_after(kLingerTimeout);
  auto discard = std::make_shared<std::array<char, 16384>>();
  stream_.async_read_some(net::buffer(*discard), [self = shared_from_this(), discard](beast::error_code ec, size_t) {
    if (ec) return self->close();
    self->linger();
  });
}

void HttpSession::generate(Generation generation, unsigned version, bool keep_alive) {
  if (context_.draining.load())
    return respond(context_.routes.error(
        {503, "the server is shutting down", "service_unavailable_error", "", "shutting_down"}, version, false));
  gen_ = std::make_unique<Stream>();
  Stream& s = *gen_;
  s.g = std::move(generation);
  s.version = version;
  s.keep_alive = keep_alive;
  s.cancelled = s.g.submissions.front().cancelled;
  s.choices.resize(s.g.submissions.size());
  for (const Submission& submission : s.g.submissions)
    s.texts.push_back(answer_text(context_.loop.model(), submission.stop));
  if (s.g.request.logprobs >= 0)
    s.logprobs.assign(s.choices.size(), LogprobsWriter(s.g.request.endpoint, context_.loop.model().tokenizer));
  s.gathered.resize(s.choices.size());
  s.pending = s.choices.size();
  std::vector<Submission> submissions = s.g.submissions;
  for (size_t i = 0; i < submissions.size(); ++i)
    submissions[i].sink = [self = shared_from_this(), i](GenerationEvent event) {
      net::post(self->stream_.get_executor(),
                [self, i, event = std::move(event)]() mutable { self->on_event(i, std::move(event)); });
    };
  if (Status queued = context_.loop.submit(std::move(submissions)); !queued.ok()) {
    gen_.reset();
    // The waiting queue is full (or the server is loading or stopping): come back later.
    const bool full = context_.loop.ready();
    if (full) ++context_.counters.rejected;
    return respond(context_.routes.error(
        {full ? 429 : 503, queued.message(), full ? "rate_limit_error" : "service_unavailable_error", "", "overloaded"},
        version, keep_alive));
  }
  stream_.expires_never();  // a generation may take long; the watch below sees a client leave
  watch_disconnect();
}

void HttpSession::watch_disconnect() {
  stream_.socket().async_wait(
      tcp::socket::wait_read, [self = shared_from_this(), cancelled = gen_->cancelled](beast::error_code ec) {
        if (ec) return;  // our own close
        // Readable: closed or reset (the client left), or bytes (a next request, which a read
        // for it may already have taken: so the peek must not wait, or it would block this
        // strand until the client sends more; Asio's own receive waits even with MSG_DONTWAIT).
        char byte;
        const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) cancelled->store(true);
      });
}

void HttpSession::on_event(size_t index, GenerationEvent event) {
  Stream& s = *gen_;
  const Routes& routes = context_.routes;
  const ResponseHeader& h = s.g.header;
  Choice& choice = s.choices[index];
  if (event.done) {
    --s.pending;
    if (event.error.ok()) {
      choice.finish_reason = event.finish_reason;
      s.prompt_tokens = event.prompt_tokens;
      s.completion_tokens += event.completion_tokens;
    } else if (event.cancelled && s.error.ok()) {
      s.client_left = true;  // cancelled, and not by a sibling's failure: the client is gone
    } else if (s.error.ok()) {
      s.error = event.error;
      s.cancelled->store(true);  // the other choices stop too
    }
  }
  if (s.client_left) {  // nobody to tell; end once every choice has ended and no write is under way
    if (s.pending == 0 && !s.writing) gen_.reset();
    return close();
  }
  if (!s.g.request.stream || !s.started) {
    if (!s.error.ok()) {  // nothing sent yet: a plain error response, once every choice has ended
      if (s.pending > 0) return;
      HttpResponse response = routes.error(ApiError::from_status(s.error), s.version, s.keep_alive);
      gen_.reset();
      return respond(std::move(response));
    }
  }
  const bool logprobs = !s.logprobs.empty();
  // The event's token as text here, off the inference thread; a stop string ends
  // this stream at the token where the loop's own stream of it stopped.
  const std::string text = event.token ? s.texts[index].push(*event.token) : std::string();
  const std::string last = event.done && event.error.ok() ? s.texts[index].finish() : std::string();
  std::vector<SampledLogprobs>& gathered = s.gathered[index];
  gathered.insert(gathered.end(), std::make_move_iterator(event.logprobs.begin()),
                  std::make_move_iterator(event.logprobs.end()));
  if (!s.g.request.stream) {
    choice.text += text + last;
    if (s.pending > 0) return;
    for (size_t i = 0; logprobs && i < s.choices.size(); ++i)
      s.choices[i].logprobs = s.logprobs[i].write(s.gathered[i]);
    HttpResponse response = routes.json(200, dump(full_response(h, s.choices, s.prompt_tokens, s.completion_tokens)),
                                        s.version, s.keep_alive);
    gen_.reset();
    return respond(std::move(response));
  }
  if (!event.done && text.empty()) return;  // all held back (a partial character, a stop string's start)
  if (!s.started) {
    s.started = true;
    s.head.emplace(http::status::ok, s.version);
    s.head->set(http::field::content_type, "text/event-stream");
    s.head->set(http::field::cache_control, "no-cache");
    s.head->keep_alive(s.keep_alive);
    s.head->chunked(true);
    s.serializer.emplace(*s.head);
    s.head_pending = true;
    context_.counters.count(200);
    if (h.endpoint == Endpoint::kChat)
      for (size_t i = 0; i < s.choices.size(); ++i)
        s.out.push_back(sse_event(stream_chunk(h, i, "", std::nullopt, /*role=*/true)));
  }
  // A chunk's logprobs: those of its tokens, and of tokens whose text was held back before.
  auto chunk_logprobs = [&] {
    return logprobs ? s.logprobs[index].write(std::exchange(gathered, {})) : nlohmann::json(nullptr);
  };
  if (!text.empty()) s.out.push_back(sse_event(stream_chunk(h, index, text, std::nullopt, false, chunk_logprobs())));
  if (event.done && event.error.ok())
    s.out.push_back(sse_event(stream_chunk(h, index, last, event.finish_reason, false, chunk_logprobs())));
  if (event.done && s.pending == 0) {
    if (!s.error.ok()) {
      s.out.push_back(sse_event(ApiError::from_status(s.error).to_json()));
    } else if (s.g.request.include_usage) {
      s.out.push_back(sse_event(usage_chunk(h, s.prompt_tokens, s.completion_tokens)));
    }
    s.out.push_back("data: [DONE]\n\n");
    s.finished = true;
  }
  pump();
}

// Writes the SSE response in order: the head, each event as a chunk, the last chunk.
void HttpSession::pump() {
  Stream& s = *gen_;
  if (s.writing || s.client_left) return;
  auto done = [self = shared_from_this()](beast::error_code ec, size_t) {
    if (!self->gen_) return;
    Stream& s = *self->gen_;
    s.writing = false;
    if (ec) {  // the client is gone or stopped reading: cancel, and wait for the loop's last events
      s.cancelled->store(true);
      s.client_left = true;
      if (s.pending == 0) self->gen_.reset();
      return self->close();
    }
    if (s.last_sent) {
      const bool keep_alive = s.keep_alive;
      self->gen_.reset();
      return keep_alive ? self->read() : self->close();
    }
    self->pump();
  };
  stream_.expires_after(kWriteTimeout);
  if (s.head_pending) {
    s.head_pending = false;
    s.writing = true;
    return http::async_write_header(stream_, *s.serializer, std::move(done));
  }
  if (!s.out.empty()) {
    s.writing = true;
    std::string event = std::move(s.out.front());
    s.out.pop_front();
    auto text = std::make_shared<std::string>(std::move(event));
    s.chunk.emplace(net::buffer(*text));
    return net::async_write(stream_, *s.chunk, [done, text](beast::error_code ec, size_t n) { done(ec, n); });
  }
  if (s.finished && !s.last_sent) {
    s.last_sent = true;
    s.writing = true;
    s.last.emplace(http::make_chunk_last());
    return net::async_write(stream_, *s.last, std::move(done));
  }
  stream_.expires_never();
}

}  // namespace tessera::serve
