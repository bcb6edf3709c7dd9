#include "serve/pipeline_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <utility>

#include "net/identity.h"
#include "net/trust.h"
#include "serve/inference_loop.h"

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
  TS_ASSIGN_OR_RETURN(std::unique_ptr<pipeline::Pipeline> pipeline,
                      pipeline::Pipeline::connect(identity, trust, config, std::move(plan), options));
  std::fprintf(stderr,
               "[serve] pipeline of %s:\n%s[serve] over a pipeline: no prefix cache and no preemption (each stage's KV "
               "pool is its own; a stage without room answers 503, docs/serving.md)\n",
               serving.plan.c_str(), pipeline->layout().c_str());
  return std::unique_ptr<PipelineBackend>(new PipelineBackend(std::move(pipeline), context, config.vocab_size));
}

Status PipelineBackend::open(uint64_t id, int64_t /*capacity*/, const Submission& request) {
  if (!request.cache_salt.empty())
    return Status::unsupported(
        "cache_salt is not available with --pipeline: the stages keep no prefix cache (docs/serving.md)");
  // The stages hold `context` positions per request; the loop ends the request at its capacity.
  if (request.logprobs >= 0) {  // no start message: the last stage returns logits
    sampled_here_.emplace(
        id,
        SampledHere{.sampler = Sampler(request.sampling, vocab_), .top = request.logprobs, .prompt = request.prompt});
    outgoing_.push_back({.id = id, .ids = request.prompt});
    return {};
  }
  outgoing_.push_back({.id = id, .start = request.sampling, .prompt = request.prompt, .ids = request.prompt});
  return {};
}

Status PipelineBackend::feed(uint64_t id, int32_t token) {
  outgoing_.push_back({.id = id, .ids = {token}});
  return {};
}

void PipelineBackend::cancel(uint64_t id) {
  std::erase_if(outgoing_, [id](const Outgoing& o) { return o.id == id; });
  in_flight_.erase(id);
  sampled_here_.erase(id);
  pipeline_->cancel(id);
}

std::vector<StepOutput> PipelineBackend::step() {
  std::vector<StepOutput> outputs;
  if (!pipeline_->is_up()) {
    // A stage failed: what ran on the stages is gone with the session, so running
    // requests fail now (send() fails at once, with the failure) ...
    std::vector<Outgoing> fresh;
    for (Outgoing& o : std::exchange(outgoing_, {})) {
      if (o.start) {
        fresh.push_back(std::move(o));
      } else if (Status sent = pipeline_->send(o.id, o.ids); !sent.ok()) {
        outputs.push_back({.id = o.id, .status = pipeline_failure(std::move(sent))});
      } else {
        in_flight_.insert(o.id);
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
      collect(outputs);
      return outputs;
    }
  }
  // Sends fail at once if the pipeline fails meanwhile (then the requests in
  // flight have their errors waiting below), so nothing here holds those up.
  for (Outgoing& o : std::exchange(outgoing_, {})) {
    const Status sent = pipeline_->send(o.id, o.ids, o.start ? &*o.start : nullptr, o.prompt);
    if (!sent.ok()) {
      outputs.push_back({.id = o.id, .status = pipeline_failure(sent)});
      continue;
    }
    in_flight_.insert(o.id);
  }
  collect(outputs);
  return outputs;
}

// The results that have come back (waiting briefly when there is nothing else to report).
void PipelineBackend::collect(std::vector<StepOutput>& outputs) {
  const auto wait = outputs.empty() ? kResultWait : std::chrono::milliseconds(0);
  for (pipeline::Pipeline::Completion& done : pipeline_->take_results(wait)) {
    if (in_flight_.erase(done.request) == 0) continue;  // cancelled meanwhile
    if (!done.result.ok()) {
      outputs.push_back({.id = done.request, .status = pipeline_failure(done.result.status())});
    } else if (const auto here = sampled_here_.find(done.request); here != sampled_here_.end()) {
      outputs.push_back(sample_here(done.request, here->second, std::move(done.result->logits)));
    } else if (done.result->token < 0) {
      outputs.push_back({.id = done.request, .status = Status::internal("the last stage sent logits, not a token")});
    } else {
      outputs.push_back({.id = done.request, .token = done.result->token});
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

void PipelineBackend::update_stats(LoopStats& stats) const {
  stats.kv_blocks_total = 0;  // the KV caches are the stages' own (tessera probe)
  stats.kv_blocks_free = 0;
}

}  // namespace tessera::serve
