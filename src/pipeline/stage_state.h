// StageService::State, shared by the stage's two halves (private to them):
// stage_service.cpp serves connections (the protocol: TLS, setup, coordinator and
// upstream frames, --plain bindings, shipped weights) and queues Work;
// stage_inference.cpp is the inference thread, which sets up the layers, hands
// the queued work to the engine's Scheduler, steps it and delivers the outputs.
//
// Thread safety: members under "guarded by mutex" are shared; those under
// "Inference thread only" belong to the inference thread.
#pragma once

#include <openssl/crypto.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/log_limiter.h"
#include "engine/local_engine.h"
#include "model/model.h"
#include "net/admission.h"
#include "pipeline/frame_channel.h"
#include "pipeline/stage_service.h"
#include "wire/control_frame.h"
#include "wire/limits.h"

namespace tessera::pipeline {

using json = nlohmann::json;

// One unit of the inference thread's work, in arrival order.
struct Work {
  enum class Kind { kSetup, kStart, kPrefix, kBlocks, kTokens, kHidden, kCancel, kEndSession, kStop };
  explicit Work(Kind k = Kind::kStop, uint64_t s = 0, uint64_t r = 0) : kind(k), session(s), request(r) {}
  Kind kind;
  uint64_t session;
  uint64_t request;
  std::vector<int32_t> ids;
  std::vector<float> hidden;
  json message;                               // kSetup: the setup; kStart, kPrefix, kBlocks: the message
  std::shared_ptr<FrameChannel> coordinator;  // kSetup
  std::promise<Status>* done = nullptr;       // kSetup
  uint64_t bytes = 0;                         // what it holds, counted against max_queued_bytes (set by push)

  // A request's work, which a peer can send without end, is bounded; setup,
  // session end and stop come at most once per connection (or service) and never wait.
  bool bounded() const { return kind != Kind::kSetup && kind != Kind::kEndSession && kind != Kind::kStop; }
  uint64_t footprint() const;
};

// Roughly what a parsed control message holds in memory: a node per value, plus
// its strings and keys. Iterative: a message may nest deeply.
inline uint64_t json_bytes(const json& message) {
  uint64_t bytes = 0;
  std::vector<const json*> pending = {&message};
  while (!pending.empty()) {
    const json* value = pending.back();
    pending.pop_back();
    bytes += sizeof(json);
    if (value->is_string()) {
      bytes += value->get_ref<const std::string&>().capacity();
    } else if (value->is_array()) {
      for (const json& element : *value) pending.push_back(&element);
    } else if (value->is_object()) {
      for (auto it = value->begin(); it != value->end(); ++it) {
        bytes += it.key().capacity() + 4 * sizeof(void*);  // the map node
        pending.push_back(&it.value());
      }
    }
  }
  return bytes;
}

inline uint64_t Work::footprint() const {
  return sizeof(Work) + ids.capacity() * sizeof(int32_t) + hidden.capacity() * sizeof(float) +
         (message.is_null() ? 0 : json_bytes(message));
}

struct StageService::State {
  explicit State(StageOptions o) : options(std::move(o)) {}

  // Queues work for the inference thread. A request's work waits, on the
  // connection's reader thread, while the input already waiting at this stage
  // (in the queue or fed to the scheduler, not yet run) is at
  // options.max_queued_work items or options.max_queued_bytes bytes; an item
  // arriving when nothing waits is taken whatever its size.
  //
  // Why back-pressure, not an `overloaded` refusal: the reader that waits stops
  // reading its socket, so TCP slows exactly the peer that sends faster than
  // this stage computes, and no request is lost. A refusal would fail requests
  // whose hidden states the previous stage has already computed and cannot send
  // again, and a legitimate coordinator that pipelines hard would see errors
  // instead of a slower stream. Nothing can deadlock on the wait: the inference
  // thread never waits for a reader (it takes from the queue and writes with
  // deadlines); setup, session end and stop are never bounded, so another
  // session's setup queues at once behind at most the bound; a waiting push
  // gives up (dropping its work, which the inference thread would drop anyway)
  // when its session is no longer current or the stage stops.
  void push(Work work) {
    const bool stop = work.kind == Work::Kind::kStop;
    {
      std::unique_lock lock(mutex);
      if (work.bounded()) {
        work.bytes = work.footprint();
        const auto dropped = [&] { return stopped || work.session != session; };
        room.wait(lock, [&] {
          return dropped() || pending_work == 0 ||
                 (pending_work < options.max_queued_work && pending_bytes + work.bytes <= options.max_queued_bytes);
        });
        if (dropped()) return;
        ++pending_work;
        pending_bytes += work.bytes;
      } else if (stopped && work.kind == Work::Kind::kSetup) {
        work.done->set_value(Status::disconnected("the stage is stopping"));
        return;
      }
      stopped = stopped || stop;
      if (stop) {
        queue.push_front(std::move(work));  // ends the loop after at most one more step
      } else {
        queue.push_back(std::move(work));
      }
    }
    cv.notify_one();
    if (stop) room.notify_all();
  }
  std::shared_ptr<FrameChannel> coordinator_channel() {
    std::lock_guard lock(mutex);
    return coordinator;
  }
  // An `error` control message on `channel`, its kind typed (best effort: the peer may be gone).
  void send_error(FrameChannel& channel, uint64_t request, const Status& status) {
    (void)channel.write_frame(wire::encode_control(request, wire::error_message(options.identity.name, status)),
                              net::deadline_after(options.timeout));
  }
  // Reports a failure of `request` (0: of the session) to the coordinator.
  void report(uint64_t request, const Status& status) {
    std::fprintf(stderr, "[stage %s] request %llu: %s\n", options.identity.name.c_str(),
                 static_cast<unsigned long long>(request), status.to_string().c_str());
    if (auto channel = coordinator_channel()) send_error(*channel, request, status);
  }

  // `slot`: the connection's place among strangers (authenticated by the handshake).
  void serve_connection(net::Socket socket, net::Admission::Slot slot);
  // --plain: the peer announced a data connection on `channel`; wait for it.
  Status expect_plain(FrameChannel& channel);
  Result<std::filesystem::path> receive_shipment(FrameChannel& channel, const json& manifest, uint64_t session_id);
  void serve_plain_data(net::Socket socket, net::Deadline handshake);
  void serve_coordinator(std::shared_ptr<FrameChannel> channel, const json& setup);
  void serve_upstream(FrameChannel& channel, const json& hello);
  void inference_loop();
  Status setup(const json& message, std::shared_ptr<FrameChannel> coordinator_channel);
  // Hands one queued work to the scheduler (or acts on it); false on kStop.
  bool handle(Work& work);
  // Opens a request's sequence on its first work: kOverloaded, naming the cap,
  // past the scheduler's max_sequences.
  Status open(uint64_t request);
  // Feeds a request's input to the scheduler, opening its sequence on first use.
  Status feed(Work& work);
  // Sends a request's output on: a sampled token or logits to the coordinator
  // (last stage), else hidden states to the next stage.
  void deliver(StepOutput& out);
  // The prefix cache (wire/prefix_message.h): a `prefix` query, answered with
  // the blocks taken; a `blocks` message, passed on to the next stage.
  Status take_prefix(Work& work);
  Status name_blocks(Work& work);
  int64_t max_blocks() const { return context / engine.forward->kv_pool().block_size(); }
  void fail_request(uint64_t request, const Status& status);
  // A request this stage closed itself (failed or preempted): what still comes
  // for it from upstream is dropped, not run as a new request, until the
  // coordinator's cancel comes down the chain behind it (bounded: the oldest
  // ids go first).
  void closed_here(uint64_t request);
  bool dropped(const Work& work) const;
  const StageOptions options;
  net::Listener listener;
  net::WakeFd stopping;
  net::Admission admission{
      {options.max_unauthenticated_per_host, options.max_unauthenticated, options.max_connections}};
  LogLimiter log_limiter;  // refusals and failed handshakes: a stranger cannot flood the log

  std::mutex mutex;
  std::condition_variable cv;
  std::deque<Work> queue;        // guarded by mutex
  std::condition_variable room;  // pending_work or pending_bytes fell, the session changed, or stop
  // Guarded by mutex: the bounded work in the queue or in the inference thread's
  // hands, plus the inputs its scheduler holds (push's bound).
  size_t pending_work = 0;
  uint64_t pending_bytes = 0;
  bool stopped = false;                       // guarded by mutex: a kStop is queued; push drops what comes after
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
  std::unique_ptr<Model> model;   // the layers whole (the coordinator's digest is of these)
  std::unique_ptr<Model> shard;   // with StageOptions::tp_group: rank 0's shard of them, which the engine runs
  std::optional<Group> tp_group;  // with StageOptions::tp_group: the group the engine's Forward leads
  std::string model_digest;       // weights_digest(*model), for setups that carry the coordinator's
  LocalEngine engine;             // its scheduler holds every request's sequence, sampler and queued input
  wire::StageLimits limits;
  std::shared_ptr<FrameChannel> next;
  bool last = false;
  int64_t context = 0;
  bool reports_preemption = false;  // the session's setup said "preemption": true (wire revision 3)
  std::set<uint64_t> closed;        // closed_here(), until their cancel

  // What the scheduler holds, for probes from other threads (updated after each change).
  std::atomic<uint64_t> live_requests{0};
  std::atomic<uint64_t> kv_bytes{0};
  std::atomic<uint64_t> largest_step{0};  // most requests stepped at once this session
  // The KV pool for heartbeats: its blocks, and those requests hold (cached blocks nobody holds are free).
  std::atomic<uint64_t> kv_blocks{0}, kv_used{0};
  size_t counted_feeds = 0;  // the scheduler's queued inputs, as last counted in pending_*
  uint64_t counted_bytes = 0;
  // After each change: the probe's figures, and push's bound, less `done` (the
  // bounded work just handled, now in the scheduler or gone).
  void count(const Work* done = nullptr) {
    const size_t feeds = engine.scheduler ? engine.scheduler->queued_feeds() : 0;
    const uint64_t bytes = engine.scheduler ? engine.scheduler->queued_bytes() : 0;
    live_requests = engine.scheduler ? engine.scheduler->open_sequences() : 0;
    kv_bytes = engine.scheduler ? engine.scheduler->kv_bytes() : 0;
    if (engine.scheduler) {
      const KvPool& pool = engine.forward->kv_pool();
      kv_blocks = static_cast<uint64_t>(pool.total_blocks());
      kv_used =
          static_cast<uint64_t>(pool.total_blocks() - pool.free_blocks() - engine.scheduler->prefix_evictable_blocks());
    }
    {
      std::lock_guard lock(mutex);
      if (done && done->bounded()) {
        --pending_work;
        pending_bytes -= done->bytes;
      }
      pending_work = pending_work - counted_feeds + feeds;
      pending_bytes = pending_bytes - counted_bytes + bytes;
    }
    counted_feeds = feeds;
    counted_bytes = bytes;
    room.notify_all();
  }
  Status start(Work& work);
  std::thread inference;
};

}  // namespace tessera::pipeline
