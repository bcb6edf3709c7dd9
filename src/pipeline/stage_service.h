// StageService: one pipeline stage (`tessera stage`). It listens for mutual-TLS
// connections from nodes of its trust file; a coordinator's connection opens with
// a `setup` (wire/control_frame.h) naming the checkpoint and this stage's layer range
// [begin, end), and the stage loads only those layers (memory-mapped: tensors of
// other layers are never read), connects to the next stage, and answers `ready`.
//
// Requests flow as tensor frames, each decoded against limits precomputed from
// the model config (wire/limits.h) before any allocation:
//   stage 0:       token ids i32 [tokens]           from the coordinator
//   other stages:  hidden states f32 [tokens, hidden] from the previous stage
//   not last:      hidden states f32 to the next stage
//   last:          logits f32 [1, vocab] to the coordinator
// One inference thread runs the frames of every request in arrival order, each
// with its own KV cache, so while the next stage works on request A this one
// works on request B; the frames of different requests that wait together run
// in one forward pass (Forward::step_*), which reads the weights once for all. Any failure of a request (a refused
// frame, an execution error, a send to the next stage that fails) goes to the coordinator at once as an `error` with
// the request id, and the stage serves the next request. When the coordinator's connection ends, the session's state
// (caches, next connection) is dropped and the stage waits for a new setup; the loaded layers are kept for a setup that
// asks for the same ones.
//
// Thread safety: run() blocks the calling thread; stop() may be called from any.
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collective/group.h"
#include "core/status.h"
#include "engine/local_engine.h"
#include "net/identity.h"
#include "net/socket.h"
#include "net/trust.h"
#include "pipeline/weight_shipping.h"

namespace tessera::pipeline {

struct StageOptions {
  net::Endpoint listen;
  net::Identity identity;
  net::TrustFile trust;
  // The device, its threads, the KV pool's budget and the step scheduler's limits.
  EngineOptions engine;
  std::chrono::milliseconds timeout{30000};  // a silent peer mid-frame
  // Weights a coordinator may ship here (--ship-weights), in bytes; 0: 90 % of
  // the memory available when they are announced.
  uint64_t max_weight_bytes = 0;
  std::filesystem::path work_dir = std::filesystem::temp_directory_path();  // shipped checkpoints go here
  // Admission (net/admission.h). A connection is a stranger until its mutual-TLS
  // handshake (or a plain data connection's sealed hello) completes, which it
  // must do within handshake_timeout of being accepted. Strangers are limited
  // per peer host and in total; a connection beyond either is closed at once,
  // without a thread. Authenticated connections have their own limit,
  // max_connections, which strangers never count against, so a flood of idle
  // connections cannot take a coordinator's place.
  size_t max_connections = 256;  // authenticated connections served at once (each has a thread)
  std::chrono::milliseconds handshake_timeout{5000};
  size_t max_unauthenticated_per_host = 8;
  size_t max_unauthenticated = 128;
  // Input waiting for the inference thread (queued requests' work and the inputs
  // fed to its scheduler, not yet run), over all connections: a connection's
  // reader waits while either bound is reached, so TCP pushes back on the peer
  // (stage_state.h, State::push). Items stay below the scheduler's
  // max_queued_feeds. A frame larger than the bytes bound (a full context of a
  // wide model) is still taken when nothing else waits, so the bound holds
  // whatever the model at the cost of one frame more.
  size_t max_queued_work = 1024;
  uint64_t max_queued_bytes = uint64_t{64} << 20;
  // (Last, so that aggregate initializations of the fields above stay valid.)
  // PP x TP (tessera stage --tp): the stage leads a tensor-parallel group as
  // its rank 0 of tp_ranks. A setup loads its shard of the layers and forms
  // the group with tp_group() (the other ranks run tessera rank --layers over
  // the same range, which the group checks as it forms); the group is kept for
  // the next setup of the same layers unless it failed, then formed anew.
  // Unset: the stage runs its layers whole.
  std::function<Result<Group>()> tp_group{};
  int tp_ranks = 1;
  // The group's members (for errors naming a rank), and --tp-ship-weights: a
  // rank started without a checkpoint is shipped its shard of the stage's
  // layers when the group forms (pipeline/shard_shipping.h).
  std::vector<std::string> tp_members{};
  std::optional<ShipEncoding> tp_ship{};
};

class StageService {
 public:
  explicit StageService(StageOptions options);
  ~StageService();
  // Binds the listener (port 0 picks one; see port()).
  Status bind();
  uint16_t port() const;
  // Serves until stop().
  Status run();
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tessera::pipeline
