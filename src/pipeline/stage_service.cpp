// The stage's protocol side (stage_state.h): the listener and its connections,
// mutual TLS, the coordinator's setup and request frames, hidden states from the
// previous stage, --plain bindings and shipped weights, all queued as Work for
// the inference thread (stage_inference.cpp).
#include "pipeline/stage_service.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>
#include <utility>

#include "pipeline/heartbeat.h"
#include "pipeline/stage_state.h"
#include "pipeline/weight_shipping.h"
#include "seal/hello.h"
#include "wire/prefix_message.h"
#include "wire/tensor_codec.h"

namespace tessera::pipeline {
namespace {

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

// A request's control message, as the inference thread's work: `start`,
// `blocks` and `cancel` travel down the chain of stages in order with the
// request's input; `prefix` queries come from the coordinator only.
std::optional<Work::Kind> request_message(const json& message, bool from_coordinator) {
  const auto& type = message["type"];
  if (type == "start") return Work::Kind::kStart;
  if (type == "blocks") return Work::Kind::kBlocks;
  if (type == "cancel") return Work::Kind::kCancel;
  if (from_coordinator && type == "prefix") return Work::Kind::kPrefix;
  return std::nullopt;
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
  const std::string& name = s.options.identity.name;
  s.inference = std::thread([&s] { s.inference_loop(); });
  for (;;) {
    Result<net::Socket> socket = s.listener.accept(net::Clock::now() + std::chrono::hours(24 * 365), s.stopping.fd());
    if (!socket.ok()) {
      if (net::is_interrupted(socket.status())) return {};
      s.log_limiter.log("accept", "[stage " + name + "] accept: " + socket.status().to_string());
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // out of descriptors: let connections end
      continue;
    }
    std::erase_if(s.connections, [](State::Connection& c) {
      if (!c.done->load()) return false;
      c.thread.join();
      return true;
    });
    // Every connection starts as a stranger; beyond the strangers' limits it is
    // closed here, before it costs a thread.
    const std::string address = socket->peer_address();
    net::Admission::Slot slot = s.admission.admit(net::host_of(address));
    if (!slot.admitted()) {
      const size_t limit = slot.refusal() == net::Refusal::kPerHost ? s.options.max_unauthenticated_per_host
                                                                    : s.options.max_unauthenticated;
      s.log_limiter.log(net::refusal_name(slot.refusal()),
                        "[stage " + name + "] refused " + address + ": " + std::to_string(limit) + " " +
                            std::string(net::refusal_name(slot.refusal())) + " open");
      continue;  // closes it
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    s.connections.push_back({std::thread([&s, done, socket = std::move(*socket), slot = std::move(slot)]() mutable {
                               s.serve_connection(std::move(socket), std::move(slot));
                               done->store(true);
                             }),
                             done});
  }
}

// A connection opens with mutual TLS, then one control message says what it is.
// Until its handshake completes the connection is a stranger (`slot` holds its
// place among them), with handshake_timeout from now to finish it.
void StageService::State::serve_connection(net::Socket socket, net::Admission::Slot slot) {
  const std::string address = socket.peer_address();
  const net::Deadline handshake = net::deadline_after(options.handshake_timeout);
  Result<uint8_t> first = socket.peek_byte(handshake, stopping.fd());
  if (!first.ok()) {
    if (!net::is_interrupted(first.status()) && net::Clock::now() >= handshake) {
      log_limiter.log("handshake timeout", "[stage " + options.identity.name + "] dropped " + address +
                                               ": no handshake within --handshake-timeout");
    }
    return;  // a port scan or a stranger that never spoke
  }
  if (*first == seal::kHelloMagic[0]) return serve_plain_data(std::move(socket), handshake);
  Result<net::TlsChannel> tls =
      net::TlsChannel::server(std::move(socket), options.identity, options.trust, handshake, stopping.fd());
  Status accepted = tls.status();
  if (tls.ok()) {  // a node of the trust file: it leaves the strangers' pool for the authenticated one
    accepted = slot.authenticate() == net::Refusal::kNone
                   ? tls->confirm(handshake)
                   : Status::overloaded(std::to_string(options.max_connections) + " " +
                                        std::string(net::refusal_name(net::Refusal::kAuthenticated)) + " open");
  }
  if (!accepted.ok()) {
    if (net::is_interrupted(accepted)) return;
    log_limiter.log(accepted.kind() == ErrorKind::kOverloaded ? "authenticated limit" : "handshake",
                    "[stage " + options.identity.name + "] refused " + address + ": " + accepted.to_string());
    return;
  }
  auto channel = std::make_shared<FrameChannel>(std::move(*tls), options.timeout);
  Result<wire::Frame> frame =
      channel->read_frame(wire::kControlOnly, net::deadline_after(options.timeout), stopping.fd());
  Result<json> message = frame.ok() ? wire::decode_control(*frame) : Result<json>(frame.status());
  if (!message.ok()) {
    std::fprintf(stderr, "[stage %s] %s: %s\n", options.identity.name.c_str(), channel->peer_name().c_str(),
                 message.status().to_string().c_str());
    if (frame.ok()) send_error(*channel, 0, message.status());  // a frame that broke no limit is answered
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
  const std::string refusal = "a connection opens with setup, probe or upstream, not '" + type + "'";
  std::fprintf(stderr, "[stage %s] %s: %s\n", options.identity.name.c_str(), channel->peer_name().c_str(),
               refusal.c_str());
  send_error(*channel, 0, Status::invalid_input(refusal));
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
                      channel.read_frame(wire::kControlOnly, net::deadline_after(options.timeout), stopping.fd()));
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
// Until its hello opens, this is a stranger's connection: it has until
// `handshake`. Once handed over, the socket belongs to the TLS session's
// connection, which holds an authenticated place already.
void StageService::State::serve_plain_data(net::Socket socket, net::Deadline handshake) {
  std::array<uint8_t, seal::kHelloBytes> hello;
  if (!socket.read_exact(hello, handshake, stopping.fd()).ok()) return;
  Result<seal::Hello> peeked = seal::peek_hello(hello);
  if (!peeked.ok()) return;
  // The hello may overtake the TLS message that announces it.
  std::unique_lock lock(mutex);
  bindings_cv.wait_until(lock, handshake, [&] { return bindings.count(peeked->generation) > 0; });
  auto it = bindings.find(peeked->generation);
  Status opened = it == bindings.end() ? Status::invalid_input("no such binding")
                                       : seal::open_hello(it->second.secret, {0, 1, peeked->generation, true}, hello);
  if (!opened.ok()) {
    log_limiter.log("data connection", "[stage " + options.identity.name + "] refused a data connection from " +
                                           socket.peer_address() + ": " + opened.to_string());
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
    send_error(*channel, 0, session_id.status());
    return;
  }
  // Heartbeats from now until the coordinator leaves, through loading and shipping too.
  std::optional<Heartbeat> heartbeat;
  if (setup_message.contains("heartbeat_ms")) {
    Result<int64_t> interval = wire::field<int64_t>(setup_message, "heartbeat_ms");
    if (interval.ok() && (*interval < wire::kMinHeartbeatMs || *interval > wire::kMaxHeartbeatMs)) {
      interval = Status::invalid_input("setup: heartbeat_ms " + std::to_string(*interval) + " not in [" +
                                       std::to_string(wire::kMinHeartbeatMs) + ", " +
                                       std::to_string(wire::kMaxHeartbeatMs) + "]");
    }
    if (!interval.ok()) {
      send_error(*channel, 0, interval.status());
      return;
    }
    heartbeat.emplace(channel, std::chrono::milliseconds(*interval), options.timeout, [this] {
      return wire::heartbeat_message(wire::KvUsage{kv_blocks.load(), kv_used.load()});
    });
  }
  Work work{Work::Kind::kSetup};
  work.session = *session_id;
  work.message = setup_message;
  if (setup_message.contains("ship")) {  // --ship-weights: the layers come on this connection
    Result<std::filesystem::path> shipped = receive_shipment(*channel, setup_message["ship"], *session_id);
    if (!shipped.ok()) {
      send_error(*channel, 0, shipped.status());
      return;
    }
    work.message["model"] = shipped->string();
  }
  work.coordinator = channel;
  work.done = &done;
  push(std::move(work));
  Status status = ready.get();
  if (!status.ok()) {
    send_error(*channel, 0, status);
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
  const wire::FrameLimits frame_limits = session_limits.frame;
  for (;;) {
    Result<wire::Frame> frame =
        channel->read_frame(frame_limits, net::Clock::now() + std::chrono::hours(24 * 365), stopping.fd());
    if (!frame.ok()) {  // the coordinator left (or stop), or broke the framing: the stream cannot be trusted on
      if (!net::is_interrupted(frame.status()) && !net::is_closed_cleanly(frame.status()))
        report(0, frame.status().with_context("from the coordinator; ending its session"));
      break;
    }
    const uint64_t request = frame->prefix.request_id;
    if (frame->prefix.kind == wire::MessageKind::kControl) {
      Result<json> message = wire::decode_control(*frame);
      if (!message.ok()) {
        report(request, message.status());
      } else if (const std::optional<Work::Kind> kind = request_message(*message, true)) {
        Work work(*kind, *session_id, request);
        work.message = std::move(*message);
        push(std::move(work));
      } else {  // never dropped silently: the coordinator hears what was refused
        report(request, Status::invalid_input("unexpected control message '" + (*message)["type"].dump() +
                                              "' from the coordinator (expected start, prefix, blocks or cancel)"));
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
    Result<wire::Frame> frame =
        channel.read_frame(session_limits.frame, net::Clock::now() + std::chrono::hours(24 * 365), stopping.fd());
    if (!frame.ok()) {
      // A clean close is the end of the session; anything else is reported.
      if (!net::is_interrupted(frame.status()) && !net::is_closed_cleanly(frame.status())) {
        report(0, frame.status().with_context("previous stage " + channel.peer_name()));
      }
      return;
    }
    if (frame->prefix.kind == wire::MessageKind::kControl) {  // a request's start, blocks or cancel, in order
      Result<json> message = wire::decode_control(*frame);
      const std::optional<Work::Kind> kind = message.ok() ? request_message(*message, false) : std::nullopt;
      if (kind) {
        Work work(*kind, *session_id, frame->prefix.request_id);
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

}  // namespace tessera::pipeline
