// The stage's inference thread (stage_state.h): setup of the layers and the
// session, the Work queue handed to the engine's Scheduler, its steps, and the
// delivery of each request's output to the next stage or the coordinator.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <utility>

#include "model/digest.h"
#include "pipeline/shard_shipping.h"
#include "pipeline/stage_state.h"
#include "wire/prefix_message.h"
#include "wire/start_message.h"
#include "wire/tensor_codec.h"

namespace tessera::pipeline {

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
  bool preemption = false;
  if (message.contains("preemption")) {
    TS_ASSIGN_OR_RETURN(preemption, wire::field<bool>(message, "preemption"));
  }
  const bool same_layers = model && dir == model_dir && begin == range.begin && end == range.end;
  const bool group_failed = tp_group && !tp_group->failure().ok();
  if (!same_layers || !engine.scheduler || group_failed) {
    engine.reset();  // a TP group's followers are released (or learn that it failed)
    tp_group.reset();
    if (!same_layers) {
      shard.reset();
      model.reset();
      std::fprintf(stderr, "[stage %s] loading layers [%lld, %lld) of %s\n", options.identity.name.c_str(),
                   static_cast<long long>(begin), static_cast<long long>(end), dir.c_str());
      TS_ASSIGN_OR_RETURN(Model loaded, Model::load(dir, LayerRange{begin, end}));
      model = std::make_unique<Model>(std::move(loaded));
      // What the layers hold as loaded (GGUF blocks as they are): tests read it.
      std::fprintf(stderr, "[stage %s] weights: %llu bytes\n", options.identity.name.c_str(),
                   static_cast<unsigned long long>(model->weight_bytes()));
      model_dir = dir;
      range = {begin, end};
      model_digest = weights_digest(*model);
      if (options.tp_group) {
        TS_ASSIGN_OR_RETURN(Model cut, model->cut(Shard{0, options.tp_ranks}));
        shard = std::make_unique<Model>(std::move(cut));
      }
    }
    EngineOptions engine_options = options.engine;
    // The coordinator names the blocks (wire/prefix_message.h) and holds the
    // tokens, so it runs a preempted request again (docs/serving.md): the stage
    // closes the newest when its pool is full.
    engine_options.scheduler.prefix_caching = true;
    engine_options.scheduler.named_prefixes = true;
    engine_options.scheduler.preemption = false;
    engine_options.scheduler.close_preempted = true;
    if (options.tp_group) {
      std::fprintf(stderr, "[stage %s] forming its tensor-parallel group of %d ranks\n", options.identity.name.c_str(),
                   options.tp_ranks);
      TS_ASSIGN_OR_RETURN(Group group, options.tp_group());
      TS_RETURN_IF_ERROR(offer_shards(group, *model, options.tp_ship, options.tp_members));
      tp_group = group;
      engine_options.forward.group = std::move(group);
    }
    TS_ASSIGN_OR_RETURN(engine, LocalEngine::create(shard ? *shard : *model, engine_options));
    std::fprintf(stderr, "[stage %s] KV cache %s%s\n", options.identity.name.c_str(),
                 engine.forward->kv_pool().describe().c_str(),
                 tp_group ? (", rank 0 of " + std::to_string(options.tp_ranks)).c_str() : "");
  }
  if (message.contains("digest")) {
    TS_ASSIGN_OR_RETURN(const std::string expected, wire::field<std::string>(message, "digest"));
    if (expected != model_digest)
      return Status::invalid_input("setup: layers [" + std::to_string(begin) + ", " + std::to_string(end) + ") of " +
                                   dir + " are not the coordinator's checkpoint (weights digest " +
                                   model_digest.substr(0, 16) + "..., the coordinator's " + expected.substr(0, 16) +
                                   "...)");
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
  closed.clear();
  reports_preemption = preemption;
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
    send_error(*previous, 0, Status::disconnected("session taken over by " + coordinator_channel->peer_name()));
  }
  return coordinator_channel->write_frame(
      wire::encode_control(0, {{"type", "ready"},
                               {"stage", options.identity.name},
                               {"begin", begin},
                               {"end", end},
                               {"block_size", engine.forward->kv_pool().block_size()},
                               {"revision", wire::kStageRevision}}),
      net::deadline_after(options.timeout));
}

// The cap on live requests is the scheduler's max_sequences (--max-requests):
// each open request holds its sequence and KV blocks until it is cancelled or
// its session ends, so past the cap a new request is refused, the open ones go on.
Status StageService::State::open(uint64_t request) {
  Scheduler& scheduler = *engine.scheduler;
  if (scheduler.is_open(request)) return {};
  const size_t cap = options.engine.scheduler.max_sequences;
  if (scheduler.open_sequences() >= cap)
    return Status::overloaded(std::to_string(scheduler.open_sequences()) +
                              " requests open (the stage's limit, --max-requests " + std::to_string(cap) +
                              "): request " + std::to_string(request) + " refused until one is cancelled or ends");
  return scheduler.open(request, context);
}

Status StageService::State::feed(Work& work) {
  const bool ids = work.kind == Work::Kind::kTokens;
  if (ids != model->has_entry()) {  // the scheduler checks this as an invariant: refuse it here
    return Status::invalid_input(std::string(ids ? "token ids" : "hidden states") + " for layers [" +
                                 std::to_string(range.begin) + ", " + std::to_string(range.end) + "), which take " +
                                 (ids ? "hidden states" : "token ids"));
  }
  TS_RETURN_IF_ERROR(open(work.request));
  Scheduler& scheduler = *engine.scheduler;
  return ids ? scheduler.feed_ids(work.request, std::move(work.ids))
             : scheduler.feed_hidden(work.request, std::move(work.hidden));
}

void StageService::State::deliver(StepOutput& out) {
  if (!out.status.ok()) {  // the scheduler has closed the sequence
    closed_here(out.id);
    if (!out.preempted || !reports_preemption) return report(out.id, out.status);
    if (auto channel = coordinator_channel())
      (void)channel->write_frame(
          wire::encode_control(out.id, {{"type", "preempted"}, {"stage", options.identity.name}}),
          net::deadline_after(options.timeout));
    return;
  }
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

Status StageService::State::take_prefix(Work& work) {
  TS_ASSIGN_OR_RETURN(const std::vector<wire::BlockDigest> chain,
                      wire::digests_from_json(work.message, "blocks", static_cast<size_t>(max_blocks())));
  TS_RETURN_IF_ERROR(open(work.request));
  TS_ASSIGN_OR_RETURN(const int64_t taken, engine.scheduler->take_cached(work.request, chain));
  return coordinator_channel()->write_frame(wire::encode_control(work.request, wire::prefix_reply(taken)),
                                            net::deadline_after(options.timeout));
}

Status StageService::State::name_blocks(Work& work) {
  TS_ASSIGN_OR_RETURN(std::vector<wire::BlockDigest> names,
                      wire::digests_from_json(work.message, "names", static_cast<size_t>(max_blocks())));
  std::optional<int64_t> reuse;
  if (work.message.contains("reuse")) {
    TS_ASSIGN_OR_RETURN(reuse, wire::field<int64_t>(work.message, "reuse"));
  }
  TS_RETURN_IF_ERROR(open(work.request));
  TS_RETURN_IF_ERROR(engine.scheduler->name_blocks(work.request, reuse, std::move(names)));
  if (last) return {};
  return next->write_frame(wire::encode_control(work.request, work.message), net::deadline_after(options.timeout));
}

void StageService::State::fail_request(uint64_t request, const Status& status) {
  engine.scheduler->cancel(request);
  closed_here(request);
  report(request, status);
}

void StageService::State::closed_here(uint64_t request) {
  closed.insert(request);
  const size_t bound = 4 * options.engine.scheduler.max_sequences + 64;
  while (closed.size() > bound) closed.erase(closed.begin());
}

bool StageService::State::dropped(const Work& work) const {
  switch (work.kind) {
    case Work::Kind::kStart:
    case Work::Kind::kBlocks:
    case Work::Kind::kTokens:
    case Work::Kind::kHidden: return closed.contains(work.request);
    default: return false;
  }
}

Status StageService::State::start(Work& work) {
  if (!last)
    return next->write_frame(wire::encode_control(work.request, work.message), net::deadline_after(options.timeout));
  TS_ASSIGN_OR_RETURN(SamplingParams params, wire::sampling_from_json(work.message));
  TS_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, wire::prompt_from_json(work.message, model->config().vocab_size));
  TS_ASSIGN_OR_RETURN(std::vector<int32_t> output,
                      wire::output_from_json(work.message, model->config().vocab_size, static_cast<size_t>(context)));
  TS_RETURN_IF_ERROR(open(work.request));
  return engine.scheduler->start(work.request, params, std::move(prompt), -1, std::move(output)).with_context("start");
}

bool StageService::State::handle(Work& work) {
  if (work.bounded() && !engine.scheduler) {  // a later setup of this session failed while loading
    report(work.request, Status::invalid_input("the stage has no layers loaded (its last setup failed)"));
    return true;
  }
  if (dropped(work)) return true;  // closed here: its cancel is on its way
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
    case Work::Kind::kPrefix:
      if (Status status = take_prefix(work); !status.ok()) fail_request(work.request, status);
      break;
    case Work::Kind::kBlocks:
      if (Status status = name_blocks(work); !status.ok()) fail_request(work.request, status);
      break;
    case Work::Kind::kCancel:
      // Passed on after the request's hidden states sent so far, so the next
      // stage cannot open it again with them (wire/control_frame.h). Best
      // effort: a next stage that is gone fails the session anyway.
      engine.scheduler->cancel(work.request);
      closed.erase(work.request);
      if (next)
        (void)next->write_frame(wire::encode_control(work.request, {{"type", "cancel"}}),
                                net::deadline_after(options.timeout));
      break;
    case Work::Kind::kEndSession: {
      if (engine.scheduler) engine.scheduler->cancel_all();
      closed.clear();
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
        if (work->kind != Work::Kind::kSetup && work->kind != Work::Kind::kStop && work->session != session) {
          if (work->bounded()) {  // of a session that ended: dropped, and its room freed
            --pending_work;
            pending_bytes -= work->bytes;
            room.notify_all();
          }
          continue;
        }
      }
    }
    if (work) {
      if (!handle(*work)) return;
      ++handled;
      count(&*work);
    } else {
      handled = 0;
      for (StepOutput& out : engine.scheduler->step()) deliver(out);
      largest_step = std::max<uint64_t>(largest_step, engine.scheduler->last_step_size());
      count();
    }
  }
}
}  // namespace tessera::pipeline
