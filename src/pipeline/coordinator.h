// The pipeline coordinator: connects (mutual TLS) to every stage of a plan, sets
// each up with its layer range, last stage first so that every stage finds its
// next one ready, then runs requests through them: token ids to stage 0, logits
// back from the last stage.
//
// Every stage reports failures to the coordinator on its own connection, with the
// request id, so a caller waiting in step() gets the error as soon as any stage
// has it; a stage whose connection drops (a crash, kill -9) fails every request
// in flight at once, naming the stage. The next step() sets the pipeline up
// again, so a restarted stage rejoins without restarting the coordinator.
//
// Thread safety: step() and cancel() may be called from several threads for
// different requests at once (that is how several requests fill the pipeline).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/sequence_runner.h"
#include "io/model_config.h"
#include "net/identity.h"
#include "net/trust.h"
#include "pipeline/weight_shipping.h"
#include "sampling/sampler.h"
#include "wire/prefix_message.h"

namespace tessera::pipeline {

struct StagePlan {
  std::string name;   // trust-file node name
  std::string model;  // checkpoint directory on the stage's host
  int64_t begin = 0;  // layers [begin, end)
  int64_t end = 0;
};

// {"stages": [{"name": "stage0", "model": "/models/m", "layers": [0, 8]}, ...]}:
// the ranges must cover [0, num_layers) in order, each non-empty. Without
// "layers" on any stage, Pipeline::connect splits the layers by each stage's
// free memory (the plan's ranges are then all [0, 0)).
Result<std::vector<StagePlan>> read_pipeline_plan(const std::filesystem::path& path, int64_t num_layers);

// Layers per stage in proportion to `free_bytes` (largest remainder), each at
// least 1; layers >= free_bytes.size() >= 1.
std::vector<int64_t> split_layers(int64_t layers, const std::vector<uint64_t>& free_bytes);

// What a stage reports when probed: memory available on its host, and the
// requests it holds KV caches for (0 after every request ended or was cancelled).
struct StageStatus {
  uint64_t free_bytes = 0;
  uint64_t requests = 0;
  uint64_t kv_bytes = 0;
  uint64_t largest_step = 0;  // most requests the stage stepped in one forward pass this session
};
Result<StageStatus> probe_stage(const net::Identity& identity, const net::TrustFile& trust, const std::string& stage,
                                std::chrono::milliseconds timeout);

// What a stage's `error` message (wire/control_frame.h) means to the
// coordinator's caller, `who` naming the stage: the stage has no room
// (kOverloaded: retry later), or a stage it depends on is gone or silent
// (kDisconnected, its cause kept: kTimedOut for a silent one); any other kind
// (the stage refused what the coordinator sent, holds other weights, failed
// itself) or an error it cannot read is kInternal: the deployment is broken and
// retrying does not help. Never kInvalidInput: the caller's input was checked
// before it was sent, so a stage's refusal is not the caller's fault.
Status stage_failure(const std::string& who, const nlohmann::json& error);

struct PipelineOptions {
  int64_t context = 0;  // positions per request on every stage
  // Connecting to a stage (its TLS handshake) and each write to one.
  std::chrono::milliseconds timeout{30000};
  // A stage that sends nothing for this long (it heartbeats every third of it,
  // heartbeat.h) is frozen or cut off: every request in flight fails. A stage
  // that is alive may compute as long as it needs.
  std::chrono::milliseconds heartbeat_timeout{3000};
  // Trusted links: after the mutual-TLS setup, frames travel on plain TCP
  // connections bound to the TLS sessions (frame_channel.h), unsealed.
  bool plain = false;
  // The coordinator's copy of the checkpoint. With `ship` (--ship-weights) the
  // stages get their layers from it (the plan's "model" paths are then unused),
  // encoded as `ship` says; without, each stage's setup carries the digest of
  // its layers here (model/digest.h) and a stage holding another checkpoint
  // refuses. Empty: no check.
  std::string model_dir;
  std::optional<ShipEncoding> ship;
  // The caller runs preempted requests again (tessera serve): the setup asks the
  // stages to say `preempted` (a StepResult) when a full KV pool makes them
  // close a request, instead of failing it as overloaded.
  bool preemption = false;
};

class Pipeline {
 public:
  static Result<std::unique_ptr<Pipeline>> connect(const net::Identity& identity, const net::TrustFile& trust,
                                                   const ModelConfig& config, std::vector<StagePlan> plan,
                                                   PipelineOptions options);
  ~Pipeline();

  // Makes the last stage sample `request`'s tokens (start_message.h); without
  // it, steps return logits.
  Status start(uint64_t request, const SamplingParams& params, std::span<const int32_t> prompt);
  // Runs ids for `request` at its next positions; returns the sampled token, or
  // logits [vocab] for a request that was not started.
  struct StepResult {
    std::vector<float> logits;
    int32_t token = -1;
    int64_t cached_blocks = -1;  // a find_prefix() answer: the blocks every stage took
    bool preempted = false;      // with PipelineOptions::preemption: a stage closed the request for room
  };
  Result<StepResult> step(uint64_t request, std::span<const int32_t> ids);
  // The same without waiting, for one thread that keeps many requests in flight
  // (tessera serve): send() runs ids for `request` (after its start message,
  // as start() sends it, when `start` is given), and its result, or the error
  // of any stage, comes out of take_results() once. An error from send() itself
  // is the request's result (take_results() will not give one). send() never
  // sets the pipeline up: while it is down (is_up() false; every request in
  // flight has its error waiting in take_results()) it fails at once, and
  // reconnect() sets it up again (blocking, up to the options' timeout).
  // `blocks`, when given, goes ahead of the ids (and after the start); `output`
  // with the start resumes a preempted request's sampler (start_message.h).
  Status send(uint64_t request, std::span<const int32_t> ids, const SamplingParams* start = nullptr,
              std::span<const int32_t> prompt = {}, const nlohmann::json* blocks = nullptr,
              std::span<const int32_t> output = {});
  // The prefix cache over the stages (wire/prefix_message.h), for send()'s
  // caller: asks every stage for the longest run of `chain` it holds, which it
  // takes for the new `request`; the answer comes out of take_results() as a
  // StepResult whose cached_blocks is the fewest any stage took (a stage's error,
  // or the pipeline's, as for send()). The request's first blocks message then
  // keeps that many ("reuse") on every stage and names the rest.
  Status find_prefix(uint64_t request, std::span<const wire::BlockDigest> chain);
  // The KV block size every stage of the session reported in its `ready` (0: a
  // stage did not, being older, or they differ: no prefix cache over them).
  int64_t block_size() const;
  // The lowest wire::kStageRevision of the session's stages (1: none sent one).
  int64_t revision() const;
  // Each stage's KV pool, as its last heartbeat said (none yet, or an older stage: nullopt).
  std::vector<std::optional<wire::KvUsage>> kv_usage() const;
  bool is_up() const;
  Status reconnect();
  struct Completion {
    uint64_t request = 0;
    Result<StepResult> result = Status::internal("no result");
  };
  // The results that have come, waiting up to `wait` for the first one.
  std::vector<Completion> take_results(std::chrono::milliseconds wait);
  // Frees the request's KV cache on every stage.
  void cancel(uint64_t request);
  uint64_t new_request_id();
  // "stage0 10.0.0.1:7100 layers [0, 2)\n..."
  std::string layout() const;

  struct State;

 private:
  explicit Pipeline(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// One request's sequence through a Pipeline (the generation loop's runner).
// With `sampling`, tokens are sampled on the last stage (run_to_token); without,
// run() returns logits and the caller samples.
class PipelineRunner final : public SequenceRunner {
 public:
  PipelineRunner(Pipeline& pipeline, int64_t capacity, std::optional<SamplingParams> sampling = std::nullopt);
  ~PipelineRunner() override;
  Result<std::vector<float>> run(std::span<const int32_t> ids) override;
  bool samples_itself() const override { return sampling_.has_value(); }
  Result<int32_t> run_to_token(std::span<const int32_t> ids, std::span<const int32_t> prompt) override;
  int64_t capacity() const override { return capacity_; }
  Status truncate(int64_t n) override;  // only to 0 (a new request) or length()

 private:
  Pipeline& pipeline_;
  std::optional<SamplingParams> sampling_;
  bool started_ = false;
  Result<Pipeline::StepResult> step(std::span<const int32_t> ids);  // keeps held_ in step

  uint64_t request_;
  int64_t capacity_;
};

}  // namespace tessera::pipeline
