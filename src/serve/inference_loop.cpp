#include "serve/inference_loop.h"

#include <algorithm>

namespace tessera::serve {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
uint64_t ns_between(Clock::time_point from, Clock::time_point to) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(to - from).count());
}
uint64_t ns_since(Clock::time_point t) { return ns_between(t, Clock::now()); }
constexpr std::chrono::milliseconds kIdleStats{250};

Status cancelled_status() { return Status::disconnected("the client cancelled the request"); }
}  // namespace

struct InferenceLoop::Live {
  Submission submission;  // its sink moved to `sink`
  std::shared_ptr<const Sink> sink;
  std::optional<TextStream> stop_text;  // with stop strings: the answer's text, to find where it stops
  int64_t capacity = 0;
  std::vector<int32_t> output;
  std::optional<Clock::time_point> last_token;
};

TextStream answer_text(const TextModel& model, std::vector<std::string> stop) {
  return TextStream(
      [&model](std::span<const int32_t> ids) {
        return model.tokenizer.decode(ids, /*skip_special=*/true).value_or("");
      },
      std::move(stop));
}

Status check_kv_room(int64_t prompt_tokens, std::optional<int64_t> max_tokens, int64_t pool_positions) {
  if (prompt_tokens >= pool_positions)
    return Status::invalid_input("the prompt has " + std::to_string(prompt_tokens) + " tokens; the KV pool holds " +
                                 std::to_string(pool_positions) + " positions (--kv-memory)");
  if (max_tokens && prompt_tokens + *max_tokens - 1 > pool_positions)
    return Status::invalid_input("the prompt's " + std::to_string(prompt_tokens) + " tokens and max_tokens " +
                                 std::to_string(*max_tokens) + " need " +
                                 std::to_string(prompt_tokens + *max_tokens - 1) + " positions; the KV pool holds " +
                                 std::to_string(pool_positions) + " (--kv-memory)");
  return {};
}

EngineOptions serving_engine_options(const LoopOptions& options) {
  EngineOptions engine = options.engine;
  engine.scheduler.prefix_caching = options.prefix_caching;
  engine.scheduler.preemption = true;
  return engine;
}

InferenceLoop::InferenceLoop(LoopOptions options) : options_(std::move(options)) {}

InferenceLoop::~InferenceLoop() { stop(); }

void InferenceLoop::start() {
  thread_ = std::thread([this] { run(); });
}

Status InferenceLoop::load_status() const {
  std::lock_guard lock(mutex_);
  return load_status_;
}

int64_t InferenceLoop::context() const { return model_->model.config().max_position_embeddings; }

Status InferenceLoop::submit(std::vector<Submission> submissions) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return Status::overloaded("the server is shutting down");
    if (!ready_) return Status::overloaded("the model is still loading");
    if (waiting_.size() + submissions.size() > options_.max_waiting)
      return Status::overloaded(std::to_string(waiting_.size()) + " requests are waiting, the most this server queues");
    const auto now = Clock::now();
    for (Submission& s : submissions) {
      s.arrived = now;
      waiting_.push_back(std::move(s));
    }
    stats_.waiting = static_cast<int64_t>(waiting_.size()) + held_.load();
  }
  wake_.notify_one();
  return {};
}

void InferenceLoop::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

Status InferenceLoop::load() {
  TS_ASSIGN_OR_RETURN(TextModel model, load_text_model(options_.model_dir));
  model_ = std::make_unique<TextModel>(std::move(model));
  if (options_.backend) {
    TS_ASSIGN_OR_RETURN(backend_, options_.backend(*model_, context()));
  } else {
    TS_ASSIGN_OR_RETURN(LocalEngine local, LocalEngine::create(model_->model, serving_engine_options(options_)));
    backend_ = std::make_unique<LocalBackend>(std::move(local));
  }
  refresh_stats();
  return {};
}

void InferenceLoop::run() {
  if (Status loaded = load(); !loaded.ok()) {
    std::lock_guard lock(mutex_);
    load_status_ = loaded;
    return;
  }
  ready_ = true;
  // When the last step's outputs came back, while steps run back to back (else the epoch).
  Clock::time_point outputs_at{};
  for (;;) {
    if (live_.empty()) {  // the last step's events, before waiting
      settle();
      outputs_at = {};
    }
    {
      std::unique_lock lock(mutex_);
      // Idle, the stats are still read now and then: a pipeline's stages report their KV pools on their own.
      const auto woken = [&] { return stopping_ || !waiting_.empty(); };
      if (live_.empty() && !wake_.wait_for(lock, kIdleStats, woken)) {
        lock.unlock();
        refresh_stats();
        continue;
      }
      if (stopping_) break;
    }
    const auto iteration_start = Clock::now();
    std::vector<Submission> admitted = take_waiting();
    admit(admitted);
    // A client that went away: its sequence leaves the scheduler now, and its blocks with it.
    std::vector<uint64_t> gone;
    for (const auto& [id, live] : live_)
      if (live->submission.cancelled->load()) gone.push_back(id);
    for (const uint64_t id : gone) {
      ++stats_.cancelled;
      fail(id, cancelled_status(), /*cancelled=*/true);
    }
    if (backend_->has_work()) {
      ++stats_.steps;
      const auto step_start = Clock::now();
      if (outputs_at != Clock::time_point{}) stats_.between_steps_ns += ns_between(outputs_at, step_start);
      // The last step's events and counts, while the device computes this step where it can.
      uint64_t settle_ns = 0;
      std::vector<StepOutput> outputs = backend_->step([&] {
        const auto settle_start = Clock::now();
        stats_.launch_ns += ns_between(step_start, settle_start);
        settle();
        settle_ns = ns_since(settle_start);
      });
      stats_.step_ns += ns_since(step_start) - settle_ns;
      const LoopBackend::StepSize size = backend_->last_step();
      stats_.step_sequences += size.sequences;
      stats_.step_tokens += static_cast<uint64_t>(size.tokens);
      outputs_at = Clock::now();
      for (StepOutput& out : outputs) {
        const auto it = live_.find(out.id);
        if (it == live_.end()) continue;
        if (!out.status.ok()) {
          fail(out.id, out.status);
        } else {
          on_token(out.id, *it->second, out, outputs_at);
        }
      }
    } else {
      settle();
      outputs_at = {};
    }
    stats_.iteration_ns += ns_since(iteration_start);
  }
  // Shutting down: whatever is still live or waiting hears so.
  std::deque<Submission> left;
  {
    std::lock_guard lock(mutex_);
    left.swap(waiting_);
  }
  const Status down = Status::overloaded("the server is shutting down");
  while (!live_.empty()) fail(live_.begin()->first, down);
  for (Submission& s : left) emit(std::make_shared<const Sink>(std::move(s.sink)), {.done = true, .error = down});
  flush();
  stats_.waiting = 0;
  stats_.running = 0;
  backend_.reset();
}

std::vector<Submission> InferenceLoop::take_waiting() {
  std::lock_guard lock(mutex_);
  if (waiting_.empty()) return {};  // the common case: no need to count free blocks (a scan of the prefix cache)
  int64_t free_blocks = backend_->free_blocks();
  const size_t max_live = options_.engine.scheduler.max_sequences;
  std::vector<Submission> admitted;
  while (!waiting_.empty() && live_.size() + admitted.size() < max_live) {
    const int64_t blocks = backend_->blocks_for(static_cast<int64_t>(waiting_.front().prompt.size()));
    const bool idle = live_.empty() && admitted.empty();  // a prompt larger than the pool fails alone
    if (blocks > free_blocks && !idle) break;
    free_blocks -= blocks;
    admitted.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
  }
  stats_.waiting = static_cast<int64_t>(waiting_.size()) + held_.load();
  stats_.running = static_cast<int64_t>(live_.size() + admitted.size()) - held_.load();  // in flight throughout
  return admitted;
}

void InferenceLoop::refresh_stats() {
  backend_->update_stats(stats_);
  max_positions_ = backend_->max_positions();  // a pipeline's, once its stages have told their pools
}

void InferenceLoop::count_requests() {
  held_ = static_cast<int64_t>(backend_->held());
  std::lock_guard lock(mutex_);
  stats_.waiting = static_cast<int64_t>(waiting_.size()) + held_.load();
  stats_.running = static_cast<int64_t>(live_.size()) - held_.load();
}

void InferenceLoop::admit(std::vector<Submission>& admitted) {
  for (Submission& s : admitted) {
    auto sink = std::make_shared<const Sink>(std::move(s.sink));
    if (s.cancelled->load()) {
      ++stats_.cancelled;
      emit(sink, {.done = true, .error = cancelled_status(), .cancelled = true});
      continue;
    }
    const auto prompt_size = static_cast<int64_t>(s.prompt.size());
    Status status;
    if (prompt_size == 0) status = Status::invalid_input("the prompt is empty");
    if (status.ok() && prompt_size >= context())
      status = Status::invalid_input("the prompt has " + std::to_string(prompt_size) +
                                     " tokens; the model's context is " + std::to_string(context()));
    // No request grows past what the whole pool holds (vLLM sizes max_model_len so).
    const int64_t pool_positions = backend_->max_positions();
    if (status.ok()) status = check_kv_room(prompt_size, std::nullopt, pool_positions);
    const uint64_t id = next_id_++;
    const int64_t capacity = std::min({context(), prompt_size + s.max_tokens, pool_positions});
    if (status.ok()) status = backend_->open(id, capacity, s);
    if (!status.ok()) {
      ++stats_.failed;
      emit(sink, {.done = true, .error = status});
      continue;
    }
    stats_.prompt_tokens += static_cast<uint64_t>(prompt_size);
    stats_.queue_time.observe(seconds_since(s.arrived));
    std::optional<TextStream> stop_text;
    if (!s.stop.empty()) stop_text.emplace(answer_text(*model_, s.stop));
    live_.emplace(id, std::make_unique<Live>(
                          Live{std::move(s), std::move(sink), std::move(stop_text), capacity, {}, std::nullopt}));
  }
}

void InferenceLoop::on_token(uint64_t id, Live& live, StepOutput& out, Clock::time_point now) {
  const int32_t token = out.token;
  const auto seconds = [&](Clock::time_point t) { return std::chrono::duration<double>(now - t).count(); };
  if (live.last_token) {
    stats_.inter_token_latency.observe(seconds(*live.last_token));
  } else {
    stats_.time_to_first_token.observe(seconds(live.submission.arrived));
  }
  live.last_token = now;
  const std::vector<int32_t>& stop_ids = model_->stop_ids;
  if (!live.submission.ignore_eos && std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end())
    return finish(id, "stop", {});
  live.output.push_back(token);
  ++stats_.generation_tokens;
  GenerationEvent event{.token = token};
  if (out.logprobs) event.logprobs.push_back(std::move(*out.logprobs));
  if (live.stop_text) {
    live.stop_text->push(token);
    if (live.stop_text->stopped()) return finish(id, "stop", std::move(event));
  }
  const auto produced = static_cast<int64_t>(live.output.size());
  if (produced >= live.submission.max_tokens) return finish(id, "length", std::move(event));
  // Positions held: the prompt and every output token but this one, which is not yet run.
  if (static_cast<int64_t>(live.submission.prompt.size()) + produced - 1 >= live.capacity)
    return finish(id, "length", std::move(event));
  emit(live.sink, std::move(event));
  if (Status fed = backend_->feed(id, token); !fed.ok()) fail(id, fed);
}

void InferenceLoop::finish(uint64_t id, const std::string& reason, GenerationEvent last) {
  const auto it = live_.find(id);
  Live& live = *it->second;
  backend_->cancel(id);
  ++(reason == "stop" ? stats_.finished_stop : stats_.finished_length);
  stats_.e2e_latency.observe(seconds_since(live.submission.arrived));
  last.done = true;
  last.finish_reason = reason;
  last.prompt_tokens = static_cast<int64_t>(live.submission.prompt.size());
  last.completion_tokens = static_cast<int64_t>(live.output.size());
  emit(live.sink, std::move(last));
  live_.erase(it);
}

void InferenceLoop::fail(uint64_t id, Status error, bool cancelled) {
  const auto it = live_.find(id);
  if (it == live_.end()) return;
  backend_->cancel(id);
  if (!cancelled) ++stats_.failed;
  emit(it->second->sink, {.done = true, .error = std::move(error), .cancelled = cancelled});
  live_.erase(it);
}

void InferenceLoop::emit(const std::shared_ptr<const Sink>& sink, GenerationEvent event) {
  if (deliver_) {
    events_.emplace_back(sink, std::move(event));
  } else {
    (*sink)(std::move(event));
  }
}

void InferenceLoop::settle() {
  count_requests();
  refresh_stats();
  flush();
}

void InferenceLoop::flush() {
  if (!events_.empty()) deliver_(std::exchange(events_, {}));
}

}  // namespace tessera::serve
