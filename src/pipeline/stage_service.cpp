#include "pipeline/stage_service.h"

#include <openssl/crypto.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>

#include "engine/local_engine.h"
#include "model/model.h"
#include "pipeline/frame_channel.h"
#include "pipeline/weight_shipping.h"
#include "sampling/sampler.h"
#include "seal/hello.h"
#include "wire/control_frame.h"
#include "wire/limits.h"
#include "wire/start_message.h"
#include "wire/tensor_codec.h"

namespace tessera::pipeline {
namespace {

using json = nlohmann::json;

// One unit of the inference thread's work, in arrival order.
struct Work {
  enum class Kind { kSetup, kStart, kTokens, kHidden, kCancel, kEndSession, kStop };
  explicit Work(Kind k = Kind::kStop, uint64_t s = 0, uint64_t r = 0) : kind(k), session(s), request(r) {}
  Kind kind;
  uint64_t session;
  uint64_t request;
  std::vector<int32_t> ids;
  std::vector<float> hidden;
  json message;                               // kSetup: the setup; kStart: the start message
  std::shared_ptr<FrameChannel> coordinator;  // kSetup
  std::promise<Status>* done = nullptr;       // kSetup
};

wire::FrameLimits control_limits() { return {0, wire::kMaxControlBytes}; }

// MemAvailable of /proc/meminfo in bytes (0 if unreadable).
uint64_t available_memory_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

Result<std::vector<int32_t>> token_ids(const wire::DecodedTensor& tensor) {
  std::vector<int32_t> ids(tensor.header.numel);
  if (tensor.header.encoding.dtype == DType::kI32) {
    std::memcpy(ids.data(), tensor.bytes.data(), ids.size() * 4);
  } else {  // i64, refused unless it fits i32 (the vocabulary check is Forward's)
    for (size_t i = 0; i < ids.size(); ++i) {
      int64_t id;
      std::memcpy(&id, tensor.bytes.data() + 8 * i, 8);
      if (id < 0 || id > INT32_MAX)
        return Status::invalid_input("token_ids[" + std::to_string(i) + "]: " + std::to_string(id) + " out of range");
      ids[i] = static_cast<int32_t>(id);
    }
  }
  return ids;
}

}  // namespace

struct StageService::State {
  explicit State(StageOptions o) : options(std::move(o)) {}

  void push(Work work) {
    {
      std::lock_guard lock(mutex);
      queue.push_back(std::move(work));
    }
    cv.notify_one();
  }
  std::shared_ptr<FrameChannel> coordinator_channel() {
    std::lock_guard lock(mutex);
    return coordinator;
  }
  // An `error` control message on `channel` (best effort: the peer may be gone).
  void send_error(FrameChannel& channel, uint64_t request, const std::string& message) {
    (void)channel.write_frame(
        wire::encode_control(request, {{"type", "error"}, {"stage", options.identity.name}, {"message", message}}),
        net::deadline_after(options.timeout));
  }
  // Reports a failure of `request` (0: of the session) to the coordinator.
  void report(uint64_t request, const Status& status) {
    std::fprintf(stderr, "[stage %s] request %llu: %s\n", options.identity.name.c_str(),
                 static_cast<unsigned long long>(request), status.to_string().c_str());
    if (auto channel = coordinator_channel()) send_error(*channel, request, status.to_string());
  }

  void serve_connection(net::Socket socket);
  // --plain: the peer announced a data connection on `channel`; wait for it.
  Status expect_plain(FrameChannel& channel);
  Result<std::filesystem::path> receive_shipment(FrameChannel& channel, const json& manifest, uint64_t session_id);
  void serve_plain_data(net::Socket socket);
  void serve_coordinator(std::shared_ptr<FrameChannel> channel, const json& setup);
  void serve_upstream(FrameChannel& channel, const json& hello);
  void inference_loop();
  Status setup(const json& message, std::shared_ptr<FrameChannel> coordinator_channel);
  // Hands one queued work to the scheduler (or acts on it); false on kStop.
  bool handle(Work& work);
  // Feeds a request's input to the scheduler, opening its sequence on first use.
  Status feed(Work& work);
  // Sends a request's output on: a sampled token or logits to the coordinator
  // (last stage), else hidden states to the next stage.
  void deliver(StepOutput& out);
  void fail_request(uint64_t request, const Status& status);
  const StageOptions options;
  net::Listener listener;
  net::WakeFd stopping;

  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Work> queue;                     // guarded by mutex
  std::shared_ptr<FrameChannel> coordinator;  // guarded by mutex
  uint64_t session = 0;                       // guarded by mutex: the current session
  bool plain = false;                         // guarded by mutex: the session's links are --plain
  struct Binding {
    std::array<uint8_t, 32> secret;
    std::promise<net::Socket> socket;
    ~Binding() { OPENSSL_cleanse(secret.data(), secret.size()); }
  };
  std::map<uint64_t, Binding> bindings;  // guarded by mutex: plain data connections awaited
  std::condition_variable bindings_cv;   // a binding was registered
  struct Connection {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  std::vector<Connection> connections;  // accept thread only; finished ones are joined

  // Inference thread only.
  std::string model_dir;
  LayerRange range;
  std::unique_ptr<Model> model;
  LocalEngine engine;  // its scheduler holds every request's sequence, sampler and queued input
  wire::StageLimits limits;
  std::shared_ptr<FrameChannel> next;
  bool last = false;
  int64_t context = 0;
  // What the scheduler holds, for probes from other threads (updated after each change).
  std::atomic<uint64_t> live_requests{0};
  std::atomic<uint64_t> kv_bytes{0};
  std::atomic<uint64_t> largest_step{0};  // most requests stepped at once this session
  void count() {
    live_requests = engine.scheduler ? engine.scheduler->open_sequences() : 0;
    kv_bytes = engine.scheduler ? engine.scheduler->kv_bytes() : 0;
  }
  Status start(Work& work);
  std::thread inference;
};

StageService::StageService(StageOptions options) : state_(std::make_unique<State>(std::move(options))) {}

StageService::~StageService() {
  stop();
  if (state_->inference.joinable()) state_->inference.join();
  for (auto& connection : state_->connections) connection.thread.join();
}

Status StageService::bind() {
  TS_ASSIGN_OR_RETURN(state_->listener, net::Listener::bind(state_->options.listen));
  return {};
}

uint16_t StageService::port() const { return state_->listener.port(); }

void StageService::stop() {
  state_->stopping.signal();
  state_->push(Work(Work::Kind::kStop));
}

Status StageService::run() {
  State& s = *state_;
  s.inference = std::thread([&s] { s.inference_loop(); });
  for (;;) {
    Result<net::Socket> socket = s.listener.accept(net::Clock::now() + std::chrono::hours(24 * 365), s.stopping.fd());
    if (!socket.ok()) {
      if (net::is_interrupted(socket.status())) return {};
      std::fprintf(stderr, "[stage %s] accept: %s\n", s.options.identity.name.c_str(),
                   socket.status().to_string().c_str());
      continue;
    }
    std::erase_if(s.connections, [](State::Connection& c) {
      if (!c.done->load()) return false;
      c.thread.join();
      return true;
    });
    if (s.connections.size() >= s.options.max_connections) {
      std::fprintf(stderr, "[stage %s] refused %s: %zu connections open (max_connections)\n",
                   s.options.identity.name.c_str(), socket->peer_address().c_str(), s.connections.size());
      continue;  // closes it
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    s.connections.push_back({std::thread([&s, done, socket = std::move(*socket)]() mutable {
                               s.serve_connection(std::move(socket));
                               done->store(true);
                             }),
                             done});
  }
}

// A connection opens with mutual TLS, then one control message says what it is.
void StageService::State::serve_connection(net::Socket socket) {
  const std::string address = socket.peer_address();
  Result<uint8_t> first = socket.peek_byte(net::deadline_after(options.timeout), stopping.fd());
  if (!first.ok()) return;
  if (*first == seal::kHelloMagic[0]) return serve_plain_data(std::move(socket));
  const net::Deadline deadline = net::deadline_after(options.timeout);
  Result<net::TlsChannel> tls =
      net::TlsChannel::server(std::move(socket), options.identity, options.trust, deadline, stopping.fd());
  const Status accepted = tls.ok() ? tls->confirm(deadline) : tls.status();
  if (!accepted.ok()) {
    std::fprintf(stderr, "[stage %s] refused %s: %s\n", options.identity.name.c_str(), address.c_str(),
                 accepted.to_string().c_str());
    return;
  }
  auto channel = std::make_shared<FrameChannel>(std::move(*tls), options.timeout);
  Result<wire::Frame> frame =
      channel->read_frame(control_limits(), net::deadline_after(options.timeout), stopping.fd());
  Result<json> message = frame.ok() ? wire::decode_control(*frame) : Result<json>(frame.status());
  if (!message.ok()) {
    std::fprintf(stderr, "[stage %s] %s: %s\n", options.identity.name.c_str(), channel->peer_name().c_str(),
                 message.status().to_string().c_str());
    return;
  }
  const std::string type = (*message)["type"];
  if (type == "setup") return serve_coordinator(channel, *message);
  if (type == "probe") {  // free memory (to split layers) and live requests (to check cancels)
    (void)channel->write_frame(wire::encode_control(0, {{"type", "status"},
                                                        {"stage", options.identity.name},
                                                        {"free_bytes", available_memory_bytes()},
                                                        {"requests", live_requests.load()},
                                                        {"kv_bytes", kv_bytes.load()},
                                                        {"largest_step", largest_step.load()}}),
                               net::deadline_after(options.timeout));
    return;
  }
  if (type == "upstream") return serve_upstream(*channel, *message);
  std::fprintf(stderr, "[stage %s] %s opened with '%s', not setup or upstream\n", options.identity.name.c_str(),
               channel->peer_name().c_str(), type.c_str());
}

// Receives shipped weights into work_dir/tessera-<stage>-<session>, replacing
// the previous shipment, with a progress line on stderr.
Result<std::filesystem::path> StageService::State::receive_shipment(FrameChannel& channel, const json& manifest,
                                                                    uint64_t session_id) {
  const uint64_t bound = options.max_weight_bytes ? options.max_weight_bytes : available_memory_bytes() / 10 * 9;
  const std::filesystem::path dir =
      options.work_dir / ("tessera-" + options.identity.name + "-" + std::to_string(session_id));
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator(options.work_dir, ignored)) {
    if (entry.path().filename().string().starts_with("tessera-" + options.identity.name + "-")) {
      std::filesystem::remove_all(entry.path(), ignored);
    }
  }
  int last_percent = -1;
  Status status = receive_weights(channel, manifest, bound, dir, options.timeout, [&](uint64_t done, uint64_t total) {
    const int percent = total ? static_cast<int>(100 * done / total) : 100;
    if (percent / 10 == last_percent / 10) return;
    last_percent = percent;
    std::fprintf(stderr, "[stage %s] receiving weights: %3d %% of %.1f MiB\n", options.identity.name.c_str(), percent,
                 static_cast<double>(total) / (1 << 20));
  });
  if (!status.ok()) return status.with_context("--ship-weights");
  return dir;
}

Status StageService::State::expect_plain(FrameChannel& channel) {
  TS_ASSIGN_OR_RETURN(wire::Frame frame,
                      channel.read_frame(control_limits(), net::deadline_after(options.timeout), stopping.fd()));
  TS_ASSIGN_OR_RETURN(const json message, wire::decode_control(frame));
  if (message["type"] != kPlainMessage) return Status::invalid_input("--plain: expected the plain binding message");
  TS_ASSIGN_OR_RETURN(const uint64_t binding, wire::field<uint64_t>(message, "binding"));
  TS_ASSIGN_OR_RETURN(auto secret, channel.binding_secret());
  std::future<net::Socket> socket;
  {
    std::lock_guard lock(mutex);
    Binding& b = bindings[binding];
    b.secret = secret;
    socket = b.socket.get_future();
  }
  OPENSSL_cleanse(secret.data(), secret.size());
  bindings_cv.notify_all();
  const bool arrived = socket.wait_for(options.timeout) == std::future_status::ready;
  {
    std::lock_guard lock(mutex);
    bindings.erase(binding);
  }
  if (!arrived) return Status::disconnected("--plain: the data connection of " + channel.peer_name() + " did not come");
  channel.use_plain(socket.get());
  return {};
}

// A plain data connection: its sealed hello must open with the secret of the
// TLS session that announced it.
void StageService::State::serve_plain_data(net::Socket socket) {
  std::array<uint8_t, seal::kHelloBytes> hello;
  if (!socket.read_exact(hello, net::deadline_after(options.timeout), stopping.fd()).ok()) return;
  Result<seal::Hello> peeked = seal::peek_hello(hello);
  if (!peeked.ok()) return;
  // The hello may overtake the TLS message that announces it.
  std::unique_lock lock(mutex);
  bindings_cv.wait_for(lock, options.timeout, [&] { return bindings.count(peeked->generation) > 0; });
  auto it = bindings.find(peeked->generation);
  Status opened = it == bindings.end() ? Status::invalid_input("no such binding")
                                       : seal::open_hello(it->second.secret, {0, 1, peeked->generation, true}, hello);
  if (!opened.ok()) {
    std::fprintf(stderr, "[stage %s] refused a data connection from %s: %s\n", options.identity.name.c_str(),
                 socket.peer_address().c_str(), opened.to_string().c_str());
    return;
  }
  it->second.socket.set_value(std::move(socket));
  bindings.erase(it);
}

void StageService::State::serve_coordinator(std::shared_ptr<FrameChannel> channel, const json& setup_message) {
  std::promise<Status> done;
  std::future<Status> ready = done.get_future();
  Result<uint64_t> session_id = wire::field<uint64_t>(setup_message, "session");
  if (!session_id.ok()) {
    send_error(*channel, 0, session_id.status().to_string());
    return;
  }
  Work work{Work::Kind::kSetup};
  work.session = *session_id;
  work.message = setup_message;
  if (setup_message.contains("ship")) {  // --ship-weights: the layers come on this connection
    Result<std::filesystem::path> shipped = receive_shipment(*channel, setup_message["ship"], *session_id);
    if (!shipped.ok()) {
      send_error(*channel, 0, shipped.status().to_string());
      return;
    }
    work.message["model"] = shipped->string();
  }
  work.coordinator = channel;
  work.done = &done;
  push(std::move(work));
  Status status = ready.get();
  if (!status.ok()) {
    send_error(*channel, 0, status.to_string());
    return;
  }
  // Frames from the coordinator: token ids (stage 0) and cancels, until it leaves.
  wire::StageLimits session_limits;
  bool session_plain = false;
  {
    std::lock_guard lock(mutex);
    session_limits = limits;
    session_plain = plain;
  }
  if (session_plain) {
    if (Status bound = expect_plain(*channel); !bound.ok()) {
      report(0, bound);
      push(Work(Work::Kind::kEndSession, *session_id));
      return;
    }
  }
  wire::FrameLimits frame_limits = session_limits.frame;
  frame_limits.max_payload_bytes = std::max(frame_limits.max_payload_bytes, wire::kMaxControlBytes);
  for (;;) {
    Result<wire::Frame> frame =
        channel->read_frame(frame_limits, net::Clock::now() + std::chrono::hours(24 * 365), stopping.fd());
    if (!frame.ok()) break;  // the coordinator left (or stop)
    const uint64_t request = frame->prefix.request_id;
    if (frame->prefix.kind == wire::MessageKind::kControl) {
      Result<json> message = wire::decode_control(*frame);
      if (!message.ok()) {
        report(request, message.status());
      } else if ((*message)["type"] == "cancel") {
        push(Work(Work::Kind::kCancel, *session_id, request));
      } else if ((*message)["type"] == "start") {
        Work work(Work::Kind::kStart, *session_id, request);
        work.message = std::move(*message);
        push(std::move(work));
      }
      continue;
    }
    std::vector<uint8_t> scratch;
    Result<wire::DecodedTensor> tensor = wire::decode_tensor(*frame, session_limits.token_ids, scratch);
    Result<std::vector<int32_t>> ids = tensor.ok() ? token_ids(*tensor) : Result<std::vector<int32_t>>(tensor.status());
    if (!ids.ok()) {
      report(request, ids.status());
      continue;
    }
    Work work{Work::Kind::kTokens, *session_id, request};
    work.ids = std::move(*ids);
    push(std::move(work));
  }
  push(Work(Work::Kind::kEndSession, *session_id));
}

// Hidden states from the previous stage. A frame that breaks the limits fails
// its request; one whose prefix cannot be trusted ends this connection.
void StageService::State::serve_upstream(FrameChannel& channel, const json& hello) {
  Result<uint64_t> session_id = wire::field<uint64_t>(hello, "session");
  wire::StageLimits session_limits;
  bool session_plain = false;
  {
    std::lock_guard lock(mutex);
    session_limits = limits;
    session_plain = plain;
    if (!session_id.ok() || *session_id != session) {
      std::fprintf(stderr, "[stage %s] upstream %s: not of the current session\n", options.identity.name.c_str(),
                   channel.peer_name().c_str());
      return;
    }
  }
  if (session_plain) {
    if (Status bound = expect_plain(channel); !bound.ok()) return report(0, bound.with_context("previous stage"));
  }
  for (;;) {
    wire::FrameLimits frame_limits = session_limits.frame;
    frame_limits.max_payload_bytes = std::max(frame_limits.max_payload_bytes, wire::kMaxControlBytes);
    Result<wire::Frame> frame =
        channel.read_frame(frame_limits, net::Clock::now() + std::chrono::hours(24 * 365), stopping.fd());
    if (!frame.ok()) {
      // A clean close is the end of the session; anything else is reported.
      if (!net::is_interrupted(frame.status()) && !net::is_closed_cleanly(frame.status())) {
        report(0, frame.status().with_context("previous stage " + channel.peer_name()));
      }
      return;
    }
    if (frame->prefix.kind == wire::MessageKind::kControl) {  // a request's start, passed along in order
      Result<json> message = wire::decode_control(*frame);
      if (message.ok() && (*message)["type"] == "start") {
        Work work(Work::Kind::kStart, *session_id, frame->prefix.request_id);
        work.message = std::move(*message);
        push(std::move(work));
      } else {
        report(frame->prefix.request_id,
               (message.ok() ? Status::invalid_input("unexpected control message") : message.status())
                   .with_context("from previous stage " + channel.peer_name()));
      }
      continue;
    }
    std::vector<uint8_t> scratch;
    Result<wire::DecodedTensor> tensor = wire::decode_tensor(*frame, session_limits.hidden_states, scratch);
    if (!tensor.ok()) {
      report(frame->prefix.request_id, tensor.status().with_context("from previous stage " + channel.peer_name()));
      continue;
    }
    Work work{Work::Kind::kHidden, *session_id, frame->prefix.request_id};
    work.hidden.resize(tensor->header.numel);
    std::memcpy(work.hidden.data(), tensor->bytes.data(), tensor->bytes.size());
    push(std::move(work));
  }
}

Status StageService::State::setup(const json& message, std::shared_ptr<FrameChannel> coordinator_channel) {
  TS_ASSIGN_OR_RETURN(const std::string dir, wire::field<std::string>(message, "model"));
  TS_ASSIGN_OR_RETURN(const int64_t begin, wire::field<int64_t>(message, "begin"));
  TS_ASSIGN_OR_RETURN(const int64_t end, wire::field<int64_t>(message, "end"));
  TS_ASSIGN_OR_RETURN(const std::string next_name, wire::field<std::string>(message, "next"));
  TS_ASSIGN_OR_RETURN(const uint64_t session_id, wire::field<uint64_t>(message, "session"));
  TS_ASSIGN_OR_RETURN(context, wire::field<int64_t>(message, "context"));
  bool session_plain = false;
  if (message.contains("plain")) {
    TS_ASSIGN_OR_RETURN(session_plain, wire::field<bool>(message, "plain"));
  }
  if (!model || !engine.scheduler || dir != model_dir || begin != range.begin || end != range.end) {
    engine.reset();
    model.reset();
    std::fprintf(stderr, "[stage %s] loading layers [%lld, %lld) of %s\n", options.identity.name.c_str(),
                 static_cast<long long>(begin), static_cast<long long>(end), dir.c_str());
    TS_ASSIGN_OR_RETURN(Model loaded, Model::load(dir, LayerRange{begin, end}));
    model = std::make_unique<Model>(std::move(loaded));
    model_dir = dir;
    range = {begin, end};
    TS_ASSIGN_OR_RETURN(engine, LocalEngine::create(*model, options.engine));
  }
  if (context < 1 || context > model->config().max_position_embeddings) {
    return Status::invalid_input("setup: context " + std::to_string(context) + " not in [1, " +
                                 std::to_string(model->config().max_position_embeddings) + "]");
  }
  wire::StageLimitsOptions limit_options;
  limit_options.activation_dtype = DType::kF32;  // bitwise the hidden states of one process
  limit_options.max_tokens_per_frame = static_cast<uint64_t>(context);
  TS_ASSIGN_OR_RETURN(wire::StageLimits stage_limits,
                      wire::make_stage_limits(model->config().hidden_size, model->config().vocab_size, limit_options));
  engine.scheduler->cancel_all();
  next.reset();
  last = next_name.empty();
  if (last != model->has_exit()) {
    return Status::invalid_input(
        "setup: layers [" + std::to_string(begin) + ", " + std::to_string(end) + ") " +
        (last ? "do not end the model but no next stage is named" : "end the model but a next stage is named"));
  }
  if (!last) {
    const net::Deadline deadline = net::deadline_after(options.timeout);
    Result<ConnectedChannel> connected =
        connect_frame_channel(options.identity, options.trust, next_name, deadline, options.timeout);
    if (!connected.ok()) return connected.status().with_context("next stage " + next_name);
    const net::Endpoint endpoint = connected->endpoint;
    next = std::move(connected->channel);
    TS_RETURN_IF_ERROR(
        next->write_frame(wire::encode_control(0, {{"type", "upstream"}, {"session", session_id}}), deadline));
    if (session_plain)
      TS_RETURN_IF_ERROR(bind_plain(*next, endpoint, deadline).with_context("--plain link to " + next_name));
  }
  std::shared_ptr<FrameChannel> previous;
  {
    std::lock_guard lock(mutex);
    limits = std::move(stage_limits);
    session = session_id;
    plain = session_plain;
    previous = std::exchange(coordinator, coordinator_channel);
  }
  if (previous && previous != coordinator_channel) {  // its requests would never be answered: say so now
    send_error(*previous, 0, "session taken over by " + coordinator_channel->peer_name());
  }
  return coordinator_channel->write_frame(
      wire::encode_control(0, {{"type", "ready"}, {"stage", options.identity.name}, {"begin", begin}, {"end", end}}),
      net::deadline_after(options.timeout));
}

Status StageService::State::feed(Work& work) {
  Scheduler& scheduler = *engine.scheduler;
  if (!scheduler.is_open(work.request)) TS_RETURN_IF_ERROR(scheduler.open(work.request, context));
  return work.kind == Work::Kind::kTokens ? scheduler.feed_ids(work.request, std::move(work.ids))
                                          : scheduler.feed_hidden(work.request, std::move(work.hidden));
}

void StageService::State::deliver(StepOutput& out) {
  if (!out.status.ok()) return report(out.id, out.status);  // the scheduler has closed the sequence
  Status status;
  if (last && out.token >= 0) {  // sampled here: one token id goes back, not [vocab] logits
    const uint64_t shape[] = {1};
    status = coordinator_channel()->write_frame(
        wire::encode_tensor_frame(out.id, wire::Encoding{DType::kI32}, shape,
                                  {reinterpret_cast<const uint8_t*>(&out.token), sizeof out.token}),
        net::deadline_after(options.timeout));
  } else {
    const auto* bytes = reinterpret_cast<const uint8_t*>(out.values.data());
    const std::span<const uint8_t> data(bytes, out.values.size() * sizeof(float));
    const uint64_t width = last ? out.values.size() : static_cast<uint64_t>(model->config().hidden_size);
    const uint64_t shape[] = {out.values.size() / width, width};
    FrameChannel& to = last ? *coordinator_channel() : *next;
    status = to.write_frame(wire::encode_tensor_frame(out.id, wire::Encoding{DType::kF32}, shape, data),
                            net::deadline_after(options.timeout));
    if (!status.ok() && !last) status = status.with_context("sending to the next stage " + next->peer_name());
  }
  if (!status.ok()) fail_request(out.id, status);
}

void StageService::State::fail_request(uint64_t request, const Status& status) {
  engine.scheduler->cancel(request);
  report(request, status);
}

Status StageService::State::start(Work& work) {
  if (!last)
    return next->write_frame(wire::encode_control(work.request, work.message), net::deadline_after(options.timeout));
  TS_ASSIGN_OR_RETURN(SamplingParams params, wire::sampling_from_json(work.message));
  TS_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, wire::prompt_from_json(work.message, model->config().vocab_size));
  Scheduler& scheduler = *engine.scheduler;
  if (!scheduler.is_open(work.request)) TS_RETURN_IF_ERROR(scheduler.open(work.request, context));
  return scheduler.start(work.request, params, std::move(prompt)).with_context("start");
}

bool StageService::State::handle(Work& work) {
  switch (work.kind) {
    case Work::Kind::kStop: {  // a setup still queued must not leave its connection waiting
      std::lock_guard lock(mutex);
      for (Work& queued : queue) {
        if (queued.kind == Work::Kind::kSetup) queued.done->set_value(Status::disconnected("the stage is stopping"));
      }
      queue.clear();
      return false;
    }
    case Work::Kind::kSetup: work.done->set_value(setup(work.message, work.coordinator)); break;
    case Work::Kind::kStart:
      if (Status status = start(work); !status.ok()) fail_request(work.request, status);
      break;
    case Work::Kind::kCancel: engine.scheduler->cancel(work.request); break;
    case Work::Kind::kEndSession: {
      if (engine.scheduler) engine.scheduler->cancel_all();
      largest_step = 0;
      next.reset();
      std::lock_guard lock(mutex);
      coordinator.reset();
      session = 0;
      break;
    }
    case Work::Kind::kTokens:
    case Work::Kind::kHidden:
      if (Status status = feed(work); !status.ok()) fail_request(work.request, status);
      break;
  }
  return true;
}

// What is queued goes to the scheduler before the next step, so requests that
// arrive together run in one forward pass (up to its step limits); at most
// kWorkBetweenSteps items, so a flood of input cannot hold up the steps.
void StageService::State::inference_loop() {
  constexpr size_t kWorkBetweenSteps = 256;
  size_t handled = 0;
  for (;;) {
    std::optional<Work> work;
    {
      std::unique_lock lock(mutex);
      const auto stepping = [this] { return engine.scheduler && engine.scheduler->has_work(); };
      cv.wait(lock, [&] { return !queue.empty() || stepping(); });
      if (!queue.empty() && !(stepping() && handled >= kWorkBetweenSteps)) {
        work = std::move(queue.front());
        queue.pop_front();
        if (work->kind != Work::Kind::kSetup && work->kind != Work::Kind::kStop && work->session != session) continue;
      }
    }
    if (work) {
      if (!handle(*work)) return;
      ++handled;
    } else {
      handled = 0;
      for (StepOutput& out : engine.scheduler->step()) deliver(out);
      largest_step = std::max<uint64_t>(largest_step, engine.scheduler->last_step_size());
    }
    count();
  }
}
}  // namespace tessera::pipeline
