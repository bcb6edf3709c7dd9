#include "serve/pipeline_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "engine/prefix_cache.h"
#include "net/identity.h"
#include "net/trust.h"
#include "serve/inference_loop.h"
#include "wire/prefix_message.h"

namespace tessera::serve {

namespace {
// How long a step waits for the stages when nothing has come back: short, so
// that new requests and cancellations are seen soon.
constexpr std::chrono::milliseconds kResultWait{5};
}  // namespace

Status pipeline_failure(Status status) {
  switch (status.kind()) {
    case ErrorKind::kOverloaded:
    case ErrorKind::kDisconnected:
    case ErrorKind::kInternal: return status;
    default: return Status::internal(status.to_string());
  }
}

Result<std::unique_ptr<PipelineBackend>> PipelineBackend::connect(const PipelineServing& serving,
                                                                  const ModelConfig& config,
                                                                  const std::string& model_dir, int64_t context) {
  if (serving.identity.empty() || serving.trust.empty())
    return Status::invalid_input("--pipeline needs --identity and --trust");
  TS_ASSIGN_OR_RETURN(const net::Identity identity, net::load_identity(serving.identity));
  TS_ASSIGN_OR_RETURN(const net::TrustFile trust, net::read_trust_file(serving.trust));
  TS_ASSIGN_OR_RETURN(std::vector<pipeline::StagePlan> plan,
                      pipeline::read_pipeline_plan(serving.plan, config.num_hidden_layers));
  pipeline::PipelineOptions options = serving.options;
  options.context = context;
  options.model_dir = model_dir;
  options.preemption = true;
  TS_ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Pipeline> pipeline,
                      pipeline::Pipeline::connect(identity, trust, config, std::move(plan), options));
  const int64_t block_size = pipeline->block_size();
  std::fprintf(stderr, "[serve] pipeline of %s:\n%s[serve] over a pipeline: prefix cache %s; preemption %s\n",
               serving.plan.c_str(), pipeline->layout().c_str(),
               !serving.prefix_caching ? "off (--no-prefix-caching)"
               : block_size > 0        ? ("on, in blocks of " + std::to_string(block_size)).c_str()
                                       : "off (a stage keeps none: its ready has no block_size, an older tessera)",
               pipeline->revision() >= 3 ? "on" : "off (a stage predates it: a full KV pool fails the request, 503)");
  return std::unique_ptr<PipelineBackend>(
      new PipelineBackend(std::move(pipeline), context, config.vocab_size, serving.prefix_caching));
}

Status PipelineBackend::open(uint64_t id, int64_t /*capacity*/, const Submission& request) {
  // The stages hold `context` positions per request; the loop ends the request at its capacity.
  Request& r = requests_[id] = {.prompt = request.prompt, .salt = request.cache_salt};
  if (request.logprobs >= 0) {  // no start message: the last stage returns logits
    sampled_here_.emplace(
        id,
        SampledHere{.sampler = Sampler(request.sampling, vocab_), .top = request.logprobs, .prompt = request.prompt});
  } else {
    r.sampling = request.sampling;
  }
  if (!held_.empty()) {  // preempted requests run first: it waits behind them
    r.held = true;
    held_.push_back(id);
    return {};
  }
  launch(id);
  return {};
}

void PipelineBackend::launch(uint64_t id) {
  Request& r = requests_.at(id);
  r.held = false;
  r.wire = pipeline_->new_request_id();
  loop_id_[r.wire] = id;
  std::vector<int32_t> ids = r.prompt;
  ids.insert(ids.end(), r.output.begin(), r.output.end());
  Outgoing o{.id = id, .first = true, .ids = ids};
  if (r.sampling) {
    o.start = r.sampling;
    o.prompt = r.prompt;
    o.output = r.output;
  }
  const int64_t bs = prefix_caching_ ? pipeline_->block_size() : 0;
  if (bs > 0) {
    const auto n = static_cast<int64_t>(ids.size());
    Chain& chain = chains_[id] = {
        .block_size = bs, .salt = r.salt, .tokens = ids, .blocks = PrefixCache::chain(ids, r.salt, bs, n / bs)};
    prefix_queries_ += static_cast<uint64_t>(n);
    // The stages may hold the blocks before the last token, which always runs (its logits are the answer).
    o.query.assign(chain.blocks.begin(), chain.blocks.begin() + (n - 1) / bs);
    if (o.query.empty()) o.names = chain.blocks;
  }
  outgoing_.push_back(std::move(o));
}

Status PipelineBackend::feed(uint64_t id, int32_t token) {
  if (const auto r = requests_.find(id); r != requests_.end()) {
    r->second.output.push_back(token);
    if (r->second.held) return {};  // it runs with the rest of its output once launched again
  }
  outgoing_.push_back(with_names(id, {token}));
  return {};
}

void PipelineBackend::preempt(uint64_t id, std::vector<StepOutput>& outputs) {
  if (pipeline_->revision() < 3) {  // a stage could not resume its sampler: fail it, as before preemption
    outputs.push_back({.id = id,
                       .status = Status::overloaded("a stage's KV pool is full (--kv-memory), and a stage predates "
                                                    "preemption over a pipeline")});
    return;
  }
  Request& r = requests_.at(id);
  ++preemptions_;
  left_ = 0;  // the pools are full now: wait for the next request to leave
  std::erase_if(outgoing_, [id](const Outgoing& o) { return o.id == id; });
  in_flight_.erase(id);
  chains_.erase(id);
  asking_.erase(id);
  pipeline_->cancel(r.wire);
  loop_id_.erase(r.wire);  // what still comes for its old id is dropped
  r.held = true;
  held_.insert(std::upper_bound(held_.begin(), held_.end(), id), id);  // oldest first
}

void PipelineBackend::release_held() {
  if (held_.empty()) return;
  const bool idle = in_flight_.empty() && outgoing_.empty() && asking_.empty();
  if (left_ > 0) {
    --left_;
  } else if (!idle) {
    return;
  }
  const uint64_t id = held_.front();
  held_.pop_front();
  launch(id);
}

PipelineBackend::Outgoing PipelineBackend::with_names(uint64_t id, std::vector<int32_t> ids) {
  Outgoing o{.id = id, .ids = std::move(ids)};
  const auto chain = chains_.find(id);
  if (chain == chains_.end()) return o;
  Chain& c = chain->second;
  c.tokens.insert(c.tokens.end(), o.ids.begin(), o.ids.end());
  const auto bs = static_cast<size_t>(c.block_size);
  for (size_t i = c.blocks.size(); (i + 1) * bs <= c.tokens.size(); ++i) {
    c.blocks.push_back(PrefixCache::digest(c.blocks.empty() ? nullptr : &c.blocks.back(), c.salt,
                                           std::span(c.tokens).subspan(i * bs, bs)));
    o.names.push_back(c.blocks.back());
  }
  return o;
}

void PipelineBackend::reuse(uint64_t id, int64_t blocks) {
  const auto asking = asking_.find(id);
  const auto chain = chains_.find(id);
  if (asking == asking_.end() || chain == chains_.end()) return;
  Outgoing o = std::move(asking->second);
  asking_.erase(asking);
  const int64_t bs = chain->second.block_size;
  prefix_hits_ += static_cast<uint64_t>(blocks * bs);
  o.ids.erase(o.ids.begin(), o.ids.begin() + blocks * bs);
  o.reuse = blocks;
  o.names.assign(chain->second.blocks.begin() + blocks, chain->second.blocks.end());
  outgoing_.push_back(std::move(o));
}

void PipelineBackend::cancel(uint64_t id) {
  std::erase_if(outgoing_, [id](const Outgoing& o) { return o.id == id; });
  in_flight_.erase(id);
  sampled_here_.erase(id);
  chains_.erase(id);
  asking_.erase(id);
  const auto r = requests_.find(id);
  if (r == requests_.end()) return;
  if (r->second.held) {
    std::erase(held_, id);
  } else {
    pipeline_->cancel(r->second.wire);
    loop_id_.erase(r->second.wire);
    ++left_;  // its blocks are free on every stage
  }
  requests_.erase(r);
}

// Sends one request's next message: its prefix query, or its ids (after its
// start and its blocks' names, when it has them).
void PipelineBackend::send(Outgoing& o, std::vector<StepOutput>& outputs) {
  if (const auto chain = chains_.find(o.id);
      o.first && chain != chains_.end() && chain->second.block_size != pipeline_->block_size()) {
    chains_.erase(chain);  // set up anew with other stages: this request runs without the cache
    o.query.clear();
    o.names.clear();
  }
  const uint64_t wire = requests_.at(o.id).wire;
  Status sent;
  if (!o.query.empty()) {
    sent = pipeline_->find_prefix(wire, o.query);
    if (sent.ok()) {
      o.query.clear();
      o.first = false;  // the stages hold its blocks now: a new session cannot go on with it
      in_flight_.insert(o.id);
      asking_.emplace(o.id, std::move(o));
      return;
    }
  } else {
    std::optional<nlohmann::json> blocks;
    if (o.reuse || !o.names.empty()) blocks = wire::blocks_message(o.reuse, o.names);
    sent = pipeline_->send(wire, o.ids, o.start ? &*o.start : nullptr, o.prompt, blocks ? &*blocks : nullptr, o.output);
    if (sent.ok()) {
      in_flight_.insert(o.id);
      return;
    }
  }
  outputs.push_back({.id = o.id, .status = pipeline_failure(std::move(sent))});
}

std::vector<StepOutput> PipelineBackend::step(const std::function<void()>& meanwhile) {
  std::vector<StepOutput> outputs;
  release_held();
  if (!pipeline_->is_up()) {
    // A stage failed: what ran on the stages is gone with the session, so running
    // requests fail now (send() fails at once, with the failure) ...
    std::vector<Outgoing> fresh;
    for (Outgoing& o : std::exchange(outgoing_, {})) {
      if (o.first) {
        fresh.push_back(std::move(o));
      } else {
        send(o, outputs);
      }
    }
    outgoing_ = std::move(fresh);
    // ... and new ones set it up again (a restarted stage rejoins here), once the
    // requests in flight have their errors: setting up may wait for --timeout.
    if (in_flight_.empty() && outputs.empty() && !outgoing_.empty()) {
      if (Status up = pipeline_->reconnect(); !up.ok()) {
        up = pipeline_failure(std::move(up));
        for (const Outgoing& o : std::exchange(outgoing_, {})) outputs.push_back({.id = o.id, .status = up});
      }
    }
    if (!in_flight_.empty() || !outputs.empty()) {  // the new ones wait for the next step
      meanwhile();
      collect(outputs);
      return outputs;
    }
  }
  // Sends fail at once if the pipeline fails meanwhile (then the requests in
  // flight have their errors waiting below), so nothing here holds those up.
  for (Outgoing& o : std::exchange(outgoing_, {})) send(o, outputs);
  meanwhile();  // while the stages compute
  collect(outputs);
  return outputs;
}

// The results that have come back (waiting briefly when there is nothing else to report).
void PipelineBackend::collect(std::vector<StepOutput>& outputs) {
  const auto wait = outputs.empty() ? kResultWait : std::chrono::milliseconds(0);
  for (pipeline::Pipeline::Completion& done : pipeline_->take_results(wait)) {
    const auto request = loop_id_.find(done.request);
    if (request == loop_id_.end()) continue;  // cancelled or preempted meanwhile
    const uint64_t id = request->second;
    if (done.result.ok() && done.result->preempted) {  // whether in flight or not: it may be idle on the stages
      preempt(id, outputs);
      continue;
    }
    if (in_flight_.erase(id) == 0) continue;
    if (!done.result.ok()) {
      outputs.push_back({.id = id, .status = pipeline_failure(done.result.status())});
    } else if (done.result->cached_blocks >= 0) {
      reuse(id, done.result->cached_blocks);
    } else if (const auto here = sampled_here_.find(id); here != sampled_here_.end()) {
      outputs.push_back(sample_here(id, here->second, std::move(done.result->logits)));
    } else if (done.result->token < 0) {
      outputs.push_back({.id = id, .status = Status::internal("the last stage sent logits, not a token")});
    } else {
      outputs.push_back({.id = id, .token = done.result->token});
    }
  }
}

// As Scheduler::step samples a sequence started with top_logprobs.
StepOutput PipelineBackend::sample_here(uint64_t id, SampledHere& request, std::vector<float> logits) const {
  if (static_cast<int64_t>(logits.size()) != vocab_)
    return {.id = id,
            .status = Status::internal("the last stage sent " + std::to_string(logits.size()) +
                                       " logits for a vocabulary of " + std::to_string(vocab_))};
  const std::vector<float> raw = logits;  // the sampler changes its logits in place
  const int32_t token = request.sampler.sample(logits, request.prompt, request.output);
  request.output.push_back(token);
  return {.id = id, .token = token, .logprobs = log_softmax(raw, token, request.top)};
}

int64_t PipelineBackend::max_positions() const {
  const int64_t bs = pipeline_->block_size();
  int64_t most = context_;
  if (bs <= 0) return most;  // stages that predate block_size send no KV figures either
  for (const std::optional<wire::KvUsage>& stage : pipeline_->kv_usage())
    if (stage && stage->blocks > 0)
      most = std::min(most, static_cast<int64_t>(std::min(stage->blocks, static_cast<uint64_t>(context_))) * bs);
  return most;
}

// KV usage: the fullest stage's (the first to run out), as its last heartbeat said.
void PipelineBackend::update_stats(LoopStats& stats) const {
  wire::KvUsage fullest;
  for (const std::optional<wire::KvUsage>& stage : pipeline_->kv_usage()) {
    if (!stage || stage->blocks == 0) continue;
    if (fullest.blocks == 0 || static_cast<double>(stage->used) / static_cast<double>(stage->blocks) >
                                   static_cast<double>(fullest.used) / static_cast<double>(fullest.blocks))
      fullest = *stage;
  }
  stats.kv_blocks_total = static_cast<int64_t>(fullest.blocks);
  stats.kv_blocks_free = static_cast<int64_t>(fullest.blocks - fullest.used);
  stats.prefix_cache_queries = prefix_queries_;
  stats.prefix_cache_hits = prefix_hits_;
  stats.preemptions = preemptions_;
}

}  // namespace tessera::serve
