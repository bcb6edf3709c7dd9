#include "pipeline/coordinator.h"

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>

#include "core/text_file.h"
#include "model/digest.h"
#include "pipeline/frame_channel.h"
#include "wire/control_frame.h"
#include "wire/encoding.h"
#include "wire/limits.h"
#include "wire/start_message.h"
#include "wire/tensor_codec.h"

namespace tessera::pipeline {

using json = nlohmann::json;

Result<std::vector<StagePlan>> read_pipeline_plan(const std::filesystem::path& path, int64_t num_layers) {
  TS_ASSIGN_OR_RETURN(json plan, read_json_file(path.string()));
  const std::string where = path.string() + ": ";
  if (!plan.is_object() || !plan.contains("stages") || !plan["stages"].is_array()) {
    return Status::invalid_input(where + "expected {\"stages\": [...]}");
  }
  std::vector<StagePlan> stages;
  int64_t next_layer = 0;
  for (const json& stage : plan["stages"]) {
    const std::string at = where + "stages[" + std::to_string(stages.size()) + "]: ";
    if (!stage.is_object() || !stage.value("name", json()).is_string() || !stage.value("model", json()).is_string()) {
      return Status::invalid_input(at + "expected {\"name\": str, \"model\": str, \"layers\": [begin, end]}");
    }
    StagePlan s{stage["name"], stage["model"], 0, 0};
    const bool has_layers = stage.contains("layers");
    if (has_layers != plan["stages"][0].contains("layers")) {
      return Status::invalid_input(at + "give \"layers\" on every stage or on none (split by free memory)");
    }
    if (has_layers) {
      const json& layers = stage["layers"];
      if (!layers.is_array() || layers.size() != 2 || !layers[0].is_number_integer() ||
          !layers[1].is_number_integer()) {
        return Status::invalid_input(at + "\"layers\" must be [begin, end]");
      }
      s.begin = layers[0];
      s.end = layers[1];
      if (s.begin != next_layer || s.end <= s.begin || s.end > num_layers) {
        return Status::invalid_input(at + "layers [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                                     ") must start at " + std::to_string(next_layer) + " and end after it, by " +
                                     std::to_string(num_layers));
      }
      next_layer = s.end;
    }
    stages.push_back(std::move(s));
  }
  if (stages.empty()) return Status::invalid_input(where + "no stages");
  if (stages.size() > static_cast<size_t>(num_layers)) {
    return Status::invalid_input(where + std::to_string(stages.size()) + " stages for " + std::to_string(num_layers) +
                                 " layers");
  }
  if (next_layer != 0 && next_layer != num_layers) {
    return Status::invalid_input(where + "the stages cover layers [0, " + std::to_string(next_layer) + ") of " +
                                 std::to_string(num_layers));
  }
  return stages;
}

std::vector<int64_t> split_layers(int64_t layers, const std::vector<uint64_t>& free_bytes) {
  const size_t n = free_bytes.size();
  long double total = 0;
  for (uint64_t f : free_bytes) total += static_cast<long double>(f);
  // In proportion, rounded by largest remainder ...
  std::vector<int64_t> share(n);
  std::vector<std::pair<long double, size_t>> remainders;
  int64_t given = 0;
  for (size_t i = 0; i < n; ++i) {
    const long double exact =
        total > 0 ? layers * static_cast<long double>(free_bytes[i]) / total : static_cast<long double>(layers) / n;
    share[i] = static_cast<int64_t>(exact);
    given += share[i];
    remainders.push_back({exact - share[i], i});
  }
  std::stable_sort(remainders.begin(), remainders.end(), [](auto a, auto b) { return a.first > b.first; });
  for (int64_t k = 0; k < layers - given; ++k) ++share[remainders[static_cast<size_t>(k)].second];
  // ... then every stage gets at least one layer, taken from the largest share.
  for (int64_t& s : share) {
    if (s > 0) continue;
    --*std::max_element(share.begin(), share.end());
    s = 1;
  }
  return share;
}

Result<StageStatus> probe_stage(const net::Identity& identity, const net::TrustFile& trust, const std::string& stage,
                                std::chrono::milliseconds timeout) {
  const std::string what = "stage " + stage + " (probe)";
  const net::Deadline deadline = net::deadline_after(timeout);
  Result<ConnectedChannel> connected = connect_frame_channel(identity, trust, stage, deadline);
  if (!connected.ok()) return connected.status().with_context(what);
  FrameChannel& channel = *connected->channel;
  TS_RETURN_IF_ERROR(channel.write_frame(wire::encode_control(0, {{"type", "probe"}}), deadline).with_context(what));
  Result<wire::Frame> frame = channel.read_frame(wire::kControlOnly, deadline);
  if (!frame.ok()) return frame.status().with_context(what);
  TS_ASSIGN_OR_RETURN(const json reply, wire::decode_control(*frame));
  StageStatus status;
  TS_ASSIGN_OR_RETURN(status.free_bytes, wire::field<uint64_t>(reply, "free_bytes"));
  TS_ASSIGN_OR_RETURN(status.requests, wire::field<uint64_t>(reply, "requests"));
  TS_ASSIGN_OR_RETURN(status.kv_bytes, wire::field<uint64_t>(reply, "kv_bytes"));
  TS_ASSIGN_OR_RETURN(status.largest_step, wire::field<uint64_t>(reply, "largest_step"));
  return status;
}

Status stage_failure(const std::string& who, const nlohmann::json& error) {
  Result<wire::ErrorReport> report = wire::error_from_message(error);
  if (!report.ok())
    return Status::internal(who + " sent an error the coordinator cannot read: " + report.status().message());
  const Status& reported = report->status;
  const std::string text = who + ": " + reported.message();
  switch (reported.kind()) {
    case ErrorKind::kOverloaded: return Status::overloaded(text);
    case ErrorKind::kDisconnected: return Status::disconnected(text, reported.cause());
    default:
      return Status::internal(who + ": " + std::string(error_kind_name(reported.kind())) + ": " + reported.message());
  }
}

namespace {

// Asks every stage of the plan for its free memory and gives each a share of
// the layers in proportion.
Status split_by_free_memory(std::vector<StagePlan>& plan, const net::Identity& identity, const net::TrustFile& trust,
                            int64_t layers, std::chrono::milliseconds timeout) {
  std::vector<uint64_t> free_bytes;
  for (const StagePlan& stage : plan) {
    TS_ASSIGN_OR_RETURN(const StageStatus status, probe_stage(identity, trust, stage.name, timeout));
    const uint64_t bytes = status.free_bytes;
    free_bytes.push_back(bytes);
  }
  const std::vector<int64_t> share = split_layers(layers, free_bytes);
  int64_t next = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    plan[i].begin = next;
    next += share[i];
    plan[i].end = next;
  }
  return {};
}

// Connects to a stage and completes the mutual-TLS handshake, retrying with
// backoff (100 ms, doubling to 2 s) until `deadline` while the failure may be
// transient: nothing listens yet, or the connection was refused, closed, reset
// or timed out during the handshake (a stage whose places are all taken drops
// new connections until one frees, which its --handshake-timeout bounds). A
// failure the stage or this node states (an unknown certificate, a name not in
// the trust file) is not retried.
Result<ConnectedChannel> connect_with_backoff(const net::Identity& identity, const net::TrustFile& trust,
                                              const std::string& stage, net::Deadline deadline) {
  constexpr std::chrono::milliseconds kFirstBackoff{100}, kMaxBackoff{2000};
  constexpr std::chrono::seconds kAttempt{5};  // one handshake; a stage's default --handshake-timeout
  std::chrono::milliseconds backoff = kFirstBackoff;
  for (int attempt = 1;; ++attempt) {
    Result<ConnectedChannel> connected =
        connect_frame_channel(identity, trust, stage, std::min(deadline, net::deadline_after(kAttempt)));
    if (connected.ok() || connected.status().kind() != ErrorKind::kDisconnected) return connected;
    if (net::Clock::now() + backoff >= deadline) {
      return connected.status().with_context(std::to_string(attempt) + " attempts");
    }
    if (attempt == 1) {
      std::fprintf(stderr, "[pipeline] stage %s: %s; retrying until the deadline\n", stage.c_str(),
                   connected.status().to_string().c_str());
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, kMaxBackoff);
  }
}

}  // namespace

struct Pipeline::State {
  State(const net::Identity& i, const net::TrustFile& t, const ModelConfig& c, std::vector<StagePlan> p,
        PipelineOptions o)
      : identity(i), trust(t), config(c), plan(std::move(p)), options(o) {}
  ~State() { teardown(); }

  Status setup();
  Result<json> read_control(FrameChannel& channel, const std::string& what);
  Status silent_or(const Status& status) const;
  void teardown();
  Result<std::shared_ptr<FrameChannel>> first_channel();
  void read_loop(size_t stage, std::shared_ptr<FrameChannel> channel, uint64_t session_id);
  void deliver(uint64_t request, Result<Pipeline::StepResult> result);
  void fail_all(const Status& status, uint64_t session_id);

  const net::Identity identity;
  const net::TrustFile trust;
  const ModelConfig config;
  const std::vector<StagePlan> plan;
  const PipelineOptions options;
  wire::StageLimits limits;

  std::mutex setup_mutex;  // one setup at a time
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::shared_ptr<FrameChannel>> channels;                      // guarded by mutex
  uint64_t session = 0;                                                     // guarded by mutex; 0: not set up
  std::map<uint64_t, std::optional<Result<Pipeline::StepResult>>> pending;  // guarded by mutex
  std::set<uint64_t> sent;                                                  // guarded by mutex: send()'s requests
  std::vector<Pipeline::Completion> completed;                              // guarded by mutex: their results
  Status failure;                                                           // guarded by mutex: why session is 0
  // guarded by mutex: the session each request of start() and step() began in. A
  // request whose session failed fails too; only a new request sets up anew.
  std::map<uint64_t, uint64_t> session_of;
  std::vector<std::thread> readers;  // setup_mutex
  std::atomic<uint64_t> next_request{1};
  // guarded by mutex: find_prefix()'s questions, until every stage answered.
  struct Query {
    int64_t asked = 0;
    size_t waiting = 0;  // stages yet to answer
    int64_t fewest = 0;
  };
  std::map<uint64_t, Query> queries;
  // guarded by mutex: requests find_prefix() opened on every stage that have
  // sent nothing down the chain yet (a cancel goes to every stage then).
  std::set<uint64_t> direct;
  int64_t block_size = 0;                            // guarded by mutex: the stages' common one, 0: none
  int64_t revision = 1;                              // guarded by mutex: the stages' lowest (kStageRevision)
  std::vector<std::optional<wire::KvUsage>> kv_use;  // guarded by mutex: per stage, from heartbeats
  void answer(const std::string& who, uint64_t request, const json& reply);
};

namespace {

// A stage beats every third of the timeout, so two beats may be late before it
// counts as frozen.
std::chrono::milliseconds heartbeat_interval(const PipelineOptions& options) {
  return std::clamp(options.heartbeat_timeout / 3, std::chrono::milliseconds(wire::kMinHeartbeatMs),
                    std::chrono::milliseconds(wire::kMaxHeartbeatMs));
}

}  // namespace

// The next control message from a stage that is not a heartbeat. A stage that
// stays silent for heartbeat_timeout is frozen or cut off; one that keeps
// beating may take as long as it needs (loading a large checkpoint, say).
Result<json> Pipeline::State::read_control(FrameChannel& channel, const std::string& what) {
  for (;;) {
    Result<wire::Frame> frame = channel.read_frame(wire::kControlOnly, net::deadline_after(options.heartbeat_timeout));
    if (!frame.ok()) return silent_or(frame.status()).with_context(what);
    TS_ASSIGN_OR_RETURN(json message, wire::decode_control(*frame));
    if (message["type"] != "heartbeat") return message;
  }
}

Status Pipeline::State::silent_or(const Status& status) const {
  if (!net::is_timed_out(status)) return status;
  return Status::disconnected("silent for " + std::to_string(options.heartbeat_timeout.count()) +
                                  " ms (--heartbeat-timeout): frozen, or its host or the network is down",
                              Cause::kTimedOut);
}

Status Pipeline::State::setup() {
  teardown();
  std::random_device random;
  const uint64_t session_id = (uint64_t{random()} << 32 | random()) | 1;  // nonzero
  std::vector<std::shared_ptr<FrameChannel>> opened(plan.size());
  std::optional<int64_t> common_block_size;  // from every stage's ready
  int64_t lowest_revision = wire::kStageRevision;
  // Last stage first: each stage connects to its next one during its setup.
  for (size_t i = plan.size(); i-- > 0;) {
    const StagePlan& stage = plan[i];
    const std::string what = "stage " + stage.name;
    const net::Deadline deadline = net::deadline_after(options.timeout);
    Result<ConnectedChannel> connected = connect_with_backoff(identity, trust, stage.name, deadline);
    if (!connected.ok()) return connected.status().with_context(what);
    std::shared_ptr<FrameChannel> channel = std::move(connected->channel);
    const net::Endpoint endpoint = connected->endpoint;
    json setup = {{"type", "setup"},
                  {"model", stage.model},
                  {"begin", stage.begin},
                  {"end", stage.end},
                  {"next", i + 1 < plan.size() ? plan[i + 1].name : ""},
                  {"session", session_id},
                  {"context", options.context},
                  {"plain", options.plain},
                  {"heartbeat_ms", heartbeat_interval(options).count()}};
    if (options.preemption) setup["preemption"] = true;
    if (!options.ship && !options.model_dir.empty()) {  // the stage proves it holds the same layers
      Result<Model> model = Model::load(options.model_dir, LayerRange{stage.begin, stage.end});
      if (!model.ok()) return model.status().with_context("--model");
      setup["digest"] = weights_digest(*model);
    }
    if (options.ship) {  // the stage's layers travel on this connection, right after the setup
      Result<Model> model = Model::load(options.model_dir, LayerRange{stage.begin, stage.end});
      if (!model.ok()) return model.status().with_context("--ship-weights");
      TS_ASSIGN_OR_RETURN(setup["ship"], ship_manifest(*model, options.model_dir, *options.ship));
      setup["model"] = "";
      TS_RETURN_IF_ERROR(channel->write_frame(wire::encode_control(0, setup), deadline).with_context(what));
      std::fprintf(stderr, "[pipeline] shipping layers [%lld, %lld) to %s\n", static_cast<long long>(stage.begin),
                   static_cast<long long>(stage.end), stage.name.c_str());
      Status shipped = send_weights(*channel, *model, *options.ship, net::Clock::now() + options.timeout * 20);
      if (!shipped.ok()) {  // the stage may have refused the shipment: its reason is the better error
        Result<json> message = read_control(*channel, what);
        if (message.ok() && (*message)["type"] == "error")
          return stage_failure(what + " refused the weights", *message);
        return shipped.with_context(what + " (--ship-weights)");
      }
    } else {
      TS_RETURN_IF_ERROR(channel->write_frame(wire::encode_control(0, setup), deadline).with_context(what));
    }
    TS_ASSIGN_OR_RETURN(const json reply, read_control(*channel, what + " during setup"));
    if (reply["type"] == "error") return stage_failure(what + " refused the setup", reply);
    if (reply["type"] != "ready") return Status::internal(what + ": expected ready, got " + reply["type"].dump());
    const Result<int64_t> stage_block_size = wire::field<int64_t>(reply, "block_size");  // absent before minor 2
    const int64_t size = stage_block_size.ok() && *stage_block_size > 0 ? *stage_block_size : 0;
    common_block_size = !common_block_size || *common_block_size == size ? size : 0;
    const Result<int64_t> stage_revision = wire::field<int64_t>(reply, "revision");  // absent: 1
    lowest_revision = std::min(lowest_revision, stage_revision.ok() ? std::max<int64_t>(*stage_revision, 1) : 1);
    if (options.plain) TS_RETURN_IF_ERROR(bind_plain(*channel, endpoint, deadline).with_context(what + " (--plain)"));
    opened[i] = channel;
  }
  std::lock_guard lock(mutex);
  channels = opened;
  session = session_id;
  block_size = common_block_size.value_or(0);
  revision = lowest_revision;
  kv_use.assign(plan.size(), std::nullopt);
  for (size_t i = 0; i < channels.size(); ++i) {
    readers.emplace_back([this, i, channel = channels[i], session_id] { read_loop(i, channel, session_id); });
  }
  return {};
}

void Pipeline::State::teardown() {
  std::vector<std::shared_ptr<FrameChannel>> closing;
  {
    std::lock_guard lock(mutex);
    closing.swap(channels);
    session = 0;
    for (auto& [request, result] : pending) {
      if (!result) result = Status::disconnected("the pipeline was torn down");
    }
    for (const uint64_t request : std::exchange(sent, {}))
      completed.push_back({request, Status::disconnected("the pipeline was torn down")});
    queries.clear();
    direct.clear();
    cv.notify_all();
  }
  for (auto& channel : closing) channel->shutdown();
  for (std::thread& reader : readers) reader.join();
  readers.clear();
}

void Pipeline::State::deliver(uint64_t request, Result<Pipeline::StepResult> result) {
  std::lock_guard lock(mutex);
  queries.erase(request);
  if (sent.erase(request) > 0) {
    completed.push_back({request, std::move(result)});
    cv.notify_all();
    return;
  }
  auto it = pending.find(request);
  if (it != pending.end() && !it->second) it->second = std::move(result);
  cv.notify_all();
}

// Every request in flight fails with `status`, and the next step sets up again.
void Pipeline::State::fail_all(const Status& status, uint64_t session_id) {
  std::lock_guard lock(mutex);
  if (session != session_id) return;
  session = 0;
  failure = status;
  for (auto& [request, result] : pending) {
    if (!result) result = status;
  }
  for (const uint64_t request : std::exchange(sent, {})) completed.push_back({request, status});
  queries.clear();
  cv.notify_all();
}

// A stage's answer to find_prefix(): once every stage answered, the request's
// result is the fewest blocks any took. An answer out of bounds breaks the protocol.
void Pipeline::State::answer(const std::string& who, uint64_t request, const json& reply) {
  std::optional<Result<Pipeline::StepResult>> result;
  {
    std::lock_guard lock(mutex);
    const auto query = queries.find(request);
    if (query == queries.end()) return;  // cancelled, or failed already
    const Result<int64_t> taken = wire::prefix_blocks_from_json(reply, query->second.asked);
    if (!taken.ok()) {
      result = Status::internal(who + " broke the protocol: " + taken.status().message());
    } else {
      query->second.fewest = std::min(query->second.fewest, *taken);
      if (--query->second.waiting == 0)
        result = Pipeline::StepResult{.logits = {}, .token = -1, .cached_blocks = query->second.fewest};
    }
  }
  if (result) deliver(request, std::move(*result));
}

void Pipeline::State::read_loop(size_t stage, std::shared_ptr<FrameChannel> channel, uint64_t session_id) {
  const StagePlan& plan_stage = plan[stage];
  const std::string who = "stage " + plan_stage.name + " (layers [" + std::to_string(plan_stage.begin) + ", " +
                          std::to_string(plan_stage.end) + "))";
  for (;;) {
    // Heartbeats keep a session alive while nothing else comes (heartbeat.h).
    Result<wire::Frame> frame = channel->read_frame(limits.frame, net::deadline_after(options.heartbeat_timeout));
    if (!frame.ok()) {
      const Status read = silent_or(frame.status());  // its cause says which: gone, or silent (kTimedOut)
      fail_all(Status::disconnected(who + " is gone: " + read.message(), read.cause()), session_id);
      return;
    }
    const uint64_t request = frame->prefix.request_id;
    if (frame->prefix.kind == wire::MessageKind::kControl) {
      Result<json> message = wire::decode_control(*frame);
      if (message.ok() && (*message)["type"] == "heartbeat") {
        // Its KV figures, when it sends them and they make sense (else none: /metrics shows what it knows).
        Result<std::optional<wire::KvUsage>> use = wire::kv_usage_from_heartbeat(*message);
        std::lock_guard lock(mutex);
        if (session == session_id) kv_use[stage] = use.ok() ? *use : std::nullopt;
        continue;
      }
      if (message.ok() && (*message)["type"] == "prefix" && request != 0) {
        answer(who, request, *message);
        continue;
      }
      if (message.ok() && (*message)["type"] == "preempted" && request != 0 && options.preemption) {
        // Not through deliver(): the request may be idle on the stages (nothing sent, waiting for its next ids).
        std::lock_guard lock(mutex);
        if (session == session_id) {
          completed.push_back(
              {request, Pipeline::StepResult{.logits = {}, .token = -1, .cached_blocks = -1, .preempted = true}});
          cv.notify_all();
        }
        continue;
      }
      // Anything else a stage says is an error; an unknown message is one too, never dropped.
      const bool reported = message.ok() && (*message)["type"] == "error";
      const Status error =
          reported ? stage_failure(who, *message)
                   : Status::internal(who + " broke the protocol: " +
                                      (message.ok() ? "unexpected control message " + (*message)["type"].dump()
                                                    : message.status().to_string()));
      if (!reported) std::fprintf(stderr, "[pipeline] %s\n", error.message().c_str());
      if (request == 0) {
        fail_all(error, session_id);
      } else {
        deliver(request, error);
      }
      continue;
    }
    // A sampled token (i32 [1]) or logits (f32 [1, vocab]), by the header's dtype.
    std::vector<uint8_t> scratch;
    const bool token = !frame->header.empty() && frame->header[0] == wire::dtype_code(DType::kI32);
    Result<wire::DecodedTensor> tensor = wire::decode_tensor(*frame, token ? limits.token_ids : limits.logits, scratch);
    if (tensor.ok() && token && tensor->header.numel != 1) {
      tensor = Status::invalid_input("token_ids: " + std::to_string(tensor->header.numel) + " ids, expected 1");
    }
    if (!tensor.ok()) {  // the stage broke the protocol (or our limits): the server's fault, not the client's
      deliver(request, Status::internal("refused a frame from " + who + ": " + tensor.status().message()));
      continue;
    }
    Pipeline::StepResult result;
    if (token) {
      std::memcpy(&result.token, tensor->bytes.data(), sizeof result.token);
    } else {
      result.logits.resize(tensor->header.numel);
      std::memcpy(result.logits.data(), tensor->bytes.data(), tensor->bytes.size());
    }
    deliver(request, std::move(result));
  }
}

Pipeline::Pipeline(std::unique_ptr<State> state) : state_(std::move(state)) {}
Pipeline::~Pipeline() = default;

Result<std::unique_ptr<Pipeline>> Pipeline::connect(const net::Identity& identity, const net::TrustFile& trust,
                                                    const ModelConfig& config, std::vector<StagePlan> plan,
                                                    PipelineOptions options) {
  if (!plan.empty() && plan.front().end == 0) {
    TS_RETURN_IF_ERROR(split_by_free_memory(plan, identity, trust, config.num_hidden_layers, options.timeout));
  }
  auto state = std::make_unique<State>(identity, trust, config, std::move(plan), options);
  wire::StageLimitsOptions limit_options;
  limit_options.activation_dtype = DType::kF32;
  limit_options.max_tokens_per_frame = static_cast<uint64_t>(std::max<int64_t>(options.context, 1));
  TS_ASSIGN_OR_RETURN(state->limits, wire::make_stage_limits(config.hidden_size, config.vocab_size, limit_options));
  {
    std::lock_guard lock(state->setup_mutex);
    TS_RETURN_IF_ERROR(state->setup());
  }
  return std::unique_ptr<Pipeline>(new Pipeline(std::move(state)));
}

// Stage 0's channel, setting the pipeline up first if a failure tore it down
// (a restarted stage rejoins here). One thread sets up; the others wait for it.
Result<std::shared_ptr<FrameChannel>> Pipeline::State::first_channel() {
  {
    std::lock_guard lock(mutex);
    if (session != 0) return channels.front();
  }
  std::lock_guard setup_lock(setup_mutex);
  {
    std::lock_guard lock(mutex);
    if (session != 0) return channels.front();  // set up by another thread meanwhile
  }
  TS_RETURN_IF_ERROR(setup());
  std::lock_guard lock(mutex);
  return channels.front();
}

Status Pipeline::start(uint64_t request, const SamplingParams& params, std::span<const int32_t> prompt) {
  TS_ASSIGN_OR_RETURN(const std::shared_ptr<FrameChannel> first, state_->first_channel());
  {
    std::lock_guard lock(state_->mutex);
    state_->session_of[request] = state_->session;
  }
  return first->write_frame(wire::encode_control(request, wire::start_message(params, prompt)),
                            net::deadline_after(state_->options.timeout));
}

Result<Pipeline::StepResult> Pipeline::step(uint64_t request, std::span<const int32_t> ids) {
  State& s = *state_;
  {
    // A request whose session failed between its steps fails now, with the
    // session's failure (its stages' KV caches are gone): setting up anew here
    // would retry a dead stage until --timeout.
    std::lock_guard lock(s.mutex);
    const auto began = s.session_of.find(request);
    if (began != s.session_of.end() && began->second != s.session)
      return s.failure.ok() ? Status::disconnected("the pipeline failed during request " + std::to_string(request))
                            : s.failure;
  }
  TS_ASSIGN_OR_RETURN(const std::shared_ptr<FrameChannel> first, s.first_channel());
  {
    std::lock_guard lock(s.mutex);
    // A session that failed since cannot answer (fail_all has run): say so now.
    if (s.session == 0 || s.channels.front() != first)
      return Status::disconnected("the pipeline failed while sending request " + std::to_string(request));
    s.session_of.emplace(request, s.session);
    s.pending[request].reset();
  }
  const uint64_t shape[] = {ids.size()};
  Status sent = first->write_frame(
      wire::encode_tensor_frame(request, wire::Encoding{DType::kI32}, shape,
                                {reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * sizeof(int32_t)}),
      net::deadline_after(s.options.timeout));
  std::unique_lock lock(s.mutex);
  if (!sent.ok() && !s.pending[request]) s.pending[request] = sent.with_context("sending to stage " + s.plan[0].name);
  // No time limit: a stage that stays alive (heartbeats) may compute as long as
  // it must; one that dies or freezes fails the session, and with it this wait.
  s.cv.wait(lock, [&] { return s.pending[request].has_value(); });
  Result<StepResult> result = std::move(*s.pending[request]);
  s.pending.erase(request);
  return result;
}

bool Pipeline::is_up() const {
  std::lock_guard lock(state_->mutex);
  return state_->session != 0;
}

Status Pipeline::reconnect() { return state_->first_channel().status(); }

Status Pipeline::send(uint64_t request, std::span<const int32_t> ids, const SamplingParams* start,
                      std::span<const int32_t> prompt, const json* blocks, std::span<const int32_t> output) {
  State& s = *state_;
  std::shared_ptr<FrameChannel> first;
  {
    std::lock_guard lock(s.mutex);
    if (s.session == 0) return s.failure.ok() ? Status::disconnected("the pipeline is not set up") : s.failure;
    first = s.channels.front();
    s.sent.insert(request);
    s.direct.erase(request);  // its ids go down the chain now
  }
  const uint64_t shape[] = {ids.size()};
  Status status;
  if (start)
    status = first->write_frame(wire::encode_control(request, wire::start_message(*start, prompt, output)),
                                net::deadline_after(s.options.timeout));
  if (status.ok() && blocks)
    status = first->write_frame(wire::encode_control(request, *blocks), net::deadline_after(s.options.timeout));
  if (status.ok())
    status = first->write_frame(
        wire::encode_tensor_frame(request, wire::Encoding{DType::kI32}, shape,
                                  {reinterpret_cast<const uint8_t*>(ids.data()), ids.size() * sizeof(int32_t)}),
        net::deadline_after(s.options.timeout));
  if (status.ok()) return {};
  std::lock_guard lock(s.mutex);
  // Unless a reader has already given it a result (a stage's error, say), the failed send is the result.
  if (s.sent.erase(request) == 0) return {};
  return status.with_context("sending to stage " + s.plan[0].name);
}

Status Pipeline::find_prefix(uint64_t request, std::span<const wire::BlockDigest> chain) {
  State& s = *state_;
  std::vector<std::shared_ptr<FrameChannel>> channels;
  {
    std::lock_guard lock(s.mutex);
    if (s.session == 0) return s.failure.ok() ? Status::disconnected("the pipeline is not set up") : s.failure;
    channels = s.channels;
    s.sent.insert(request);
    s.direct.insert(request);
    const auto asked = static_cast<int64_t>(chain.size());
    s.queries[request] = {.asked = asked, .waiting = channels.size(), .fewest = asked};
  }
  const std::vector<uint8_t> frame = wire::encode_control(request, wire::prefix_query(chain));
  Status status;
  for (size_t i = 0; i < channels.size() && status.ok(); ++i) {
    status = channels[i]->write_frame(frame, net::deadline_after(s.options.timeout));
    if (!status.ok()) status = status.with_context("sending to stage " + s.plan[i].name);
  }
  if (status.ok()) return {};
  std::lock_guard lock(s.mutex);
  s.queries.erase(request);
  if (s.sent.erase(request) == 0) return {};  // a reader has given it a result already
  return status;
}

int64_t Pipeline::revision() const {
  std::lock_guard lock(state_->mutex);
  return state_->revision;
}

int64_t Pipeline::block_size() const {
  std::lock_guard lock(state_->mutex);
  return state_->session != 0 ? state_->block_size : 0;
}

std::vector<std::optional<wire::KvUsage>> Pipeline::kv_usage() const {
  std::lock_guard lock(state_->mutex);
  return state_->kv_use;
}

std::vector<Pipeline::Completion> Pipeline::take_results(std::chrono::milliseconds wait) {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  s.cv.wait_for(lock, wait, [&] { return !s.completed.empty(); });
  return std::exchange(s.completed, {});
}

// Through stage 0, which passes it on after the request's hidden states (the
// stages after it would otherwise get the cancel before hidden states stage 0
// is still computing, which would open the request there again, held until the
// session ends); to every stage itself while a prefix query has opened the
// request on each and nothing of it is down the chain, or with stages that do
// not pass it on (revision 1).
void Pipeline::cancel(uint64_t request) {
  std::vector<std::shared_ptr<FrameChannel>> channels;
  {
    std::lock_guard lock(state_->mutex);
    state_->sent.erase(request);  // a result still on its way is dropped
    state_->queries.erase(request);
    state_->session_of.erase(request);
    channels = state_->channels;
    if (state_->direct.erase(request) == 0 && state_->revision >= 2 && !channels.empty()) channels.resize(1);
  }
  for (auto& channel : channels) {
    (void)channel->write_frame(wire::encode_control(request, {{"type", "cancel"}}),
                               net::deadline_after(state_->options.timeout));
  }
}

uint64_t Pipeline::new_request_id() { return state_->next_request++; }

std::string Pipeline::layout() const {
  std::string out;
  for (const StagePlan& stage : state_->plan) {
    const net::TrustedNode* node = state_->trust.find_name(stage.name);
    out += "  " + stage.name + " at " + (node ? node->address : "?") + ": layers [" + std::to_string(stage.begin) +
           ", " + std::to_string(stage.end) + ")\n";
  }
  return out;
}

PipelineRunner::PipelineRunner(Pipeline& pipeline, int64_t capacity, std::optional<SamplingParams> sampling)
    : pipeline_(pipeline), sampling_(std::move(sampling)), request_(pipeline.new_request_id()), capacity_(capacity) {}

PipelineRunner::~PipelineRunner() { pipeline_.cancel(request_); }

Result<std::vector<float>> PipelineRunner::run(std::span<const int32_t> ids) {
  if (sampling_) return Status::internal("this pipeline request samples on the last stage: use run_to_token");
  TS_ASSIGN_OR_RETURN(Pipeline::StepResult result, step(ids));
  if (result.logits.empty()) return Status::internal("the last stage sent a token, not logits");
  return std::move(result.logits);
}

Result<int32_t> PipelineRunner::run_to_token(std::span<const int32_t> ids, std::span<const int32_t> prompt) {
  if (!sampling_) return SequenceRunner::run_to_token(ids, prompt);
  if (!started_) {
    TS_RETURN_IF_ERROR(pipeline_.start(request_, *sampling_, prompt));
    started_ = true;
  }
  TS_ASSIGN_OR_RETURN(Pipeline::StepResult result, step(ids));
  if (result.token < 0) return Status::internal("the last stage sent logits, not a token");
  return result.token;
}

Result<Pipeline::StepResult> PipelineRunner::step(std::span<const int32_t> ids) {
  Result<Pipeline::StepResult> result = pipeline_.step(request_, ids);
  if (result.ok()) {
    held_.insert(held_.end(), ids.begin(), ids.end());
  } else {  // what the stages hold is unknown: the next run starts a new request
    (void)truncate(0);
  }
  return result;
}

Status PipelineRunner::truncate(int64_t n) {
  if (n == length()) return {};
  if (n != 0) return Status::unsupported("a pipeline sequence cannot drop part of its KV cache");
  pipeline_.cancel(request_);
  request_ = pipeline_.new_request_id();
  started_ = false;
  held_.clear();
  return {};
}

}  // namespace tessera::pipeline
