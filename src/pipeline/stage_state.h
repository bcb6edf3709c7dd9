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
#include <string>
#include <thread>
#include <vector>

#include "engine/local_engine.h"
#include "model/model.h"
#include "pipeline/frame_channel.h"
#include "pipeline/stage_service.h"
#include "wire/control_frame.h"
#include "wire/limits.h"

namespace tessera::pipeline {

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
  std::string model_digest;  // weights_digest(*model), for setups that carry the coordinator's
  LocalEngine engine;        // its scheduler holds every request's sequence, sampler and queued input
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

}  // namespace tessera::pipeline
