#include "serve/metrics.h"

#include <cstdio>

namespace tessera::serve {

void HttpCounters::count(int code) {
  for (size_t i = 0; i < kCodes.size(); ++i)
    if (kCodes[i] == code) ++responses[i];
}

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += std::string("# HELP tessera:") + name + " " + help + "\n# TYPE tessera:" + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name_and_labels, double value) {
  char number[64];
  std::snprintf(number, sizeof number, "%.17g", value);
  out += "tessera:" + name_and_labels + " " + number + "\n";
}

}  // namespace

std::string write_metrics(const LoopStats& loop, const HttpCounters& http) {
  std::string out;
  metric(out, "num_requests_running", "gauge", "Requests running: in the scheduler, not held for KV blocks.");
  sample(out, "num_requests_running", static_cast<double>(loop.running.load()));
  metric(out, "num_requests_waiting", "gauge",
         "Requests waiting: queued for admission, or preempted and held for KV blocks.");
  sample(out, "num_requests_waiting", static_cast<double>(loop.waiting.load()));
  metric(out, "kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0 to 1).");
  const double total = static_cast<double>(loop.kv_blocks_total.load());
  sample(out, "kv_cache_usage_perc", total > 0 ? 1.0 - static_cast<double>(loop.kv_blocks_free.load()) / total : 0.0);
  metric(out, "prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.");
  sample(out, "prefix_cache_queries_total", static_cast<double>(loop.prefix_cache_queries.load()));
  metric(out, "prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.");
  sample(out, "prefix_cache_hits_total", static_cast<double>(loop.prefix_cache_hits.load()));
  metric(out, "num_preemptions_total", "counter", "Requests preempted (KV blocks freed, recomputed later).");
  sample(out, "num_preemptions_total", static_cast<double>(loop.preemptions.load()));
  metric(out, "prompt_tokens_total", "counter", "Prompt tokens admitted.");
  sample(out, "prompt_tokens_total", static_cast<double>(loop.prompt_tokens.load()));
  metric(out, "generation_tokens_total", "counter", "Tokens generated.");
  sample(out, "generation_tokens_total", static_cast<double>(loop.generation_tokens.load()));
  metric(out, "request_success_total", "counter", "Requests finished, by finish reason.");
  sample(out, "request_success_total{finished_reason=\"stop\"}", static_cast<double>(loop.finished_stop.load()));
  sample(out, "request_success_total{finished_reason=\"length\"}", static_cast<double>(loop.finished_length.load()));
  metric(out, "request_failure_total", "counter", "Requests that failed in the engine.");
  sample(out, "request_failure_total", static_cast<double>(loop.failed.load()));
  metric(out, "request_cancelled_total", "counter", "Requests cancelled because the client went away.");
  sample(out, "request_cancelled_total", static_cast<double>(loop.cancelled.load()));
  metric(out, "request_rejected_total", "counter", "Requests refused because the queue was full.");
  sample(out, "request_rejected_total", static_cast<double>(http.rejected.load()));
  metric(out, "http_requests_total", "counter", "HTTP responses by status code.");
  for (size_t i = 0; i < HttpCounters::kCodes.size(); ++i)
    sample(out, "http_requests_total{code=\"" + std::to_string(HttpCounters::kCodes[i]) + "\"}",
           static_cast<double>(http.responses[i].load()));
  metric(out, "engine_steps_total", "counter",
         "Steps of the inference thread (forward passes of every running request).");
  sample(out, "engine_steps_total", static_cast<double>(loop.steps.load()));
  metric(out, "engine_step_sequences_total", "counter",
         "Sequences run in this process's forward passes, summed over steps (over engine_steps_total: the batch).");
  sample(out, "engine_step_sequences_total", static_cast<double>(loop.step_sequences.load()));
  metric(out, "engine_step_tokens_total", "counter",
         "Tokens run in this process's forward passes (decode tokens and prompt chunks), summed over steps.");
  sample(out, "engine_step_tokens_total", static_cast<double>(loop.step_tokens.load()));
  metric(out, "engine_largest_step", "gauge", "Most sequences one forward pass has run.");
  sample(out, "engine_largest_step", static_cast<double>(loop.largest_step.load()));
  metric(out, "engine_step_seconds_total", "counter",
         "Seconds the inference thread spent in steps (forward pass and sampling).");
  sample(out, "engine_step_seconds_total", static_cast<double>(loop.step_ns.load()) * 1e-9);
  metric(out, "engine_iteration_seconds_total", "counter",
         "Seconds the inference thread was busy: steps and the serving work around them (admission, stop rules, "
         "detokenizing, events).");
  sample(out, "engine_iteration_seconds_total", static_cast<double>(loop.iteration_ns.load()) * 1e-9);
  loop.queue_time.write(out, "request_queue_time_seconds", "Seconds from arrival to admission into the scheduler.");
  loop.time_to_first_token.write(out, "time_to_first_token_seconds", "Seconds from arrival to the first token.");
  loop.inter_token_latency.write(out, "inter_token_latency_seconds", "Seconds between two tokens of a request.");
  loop.e2e_latency.write(out, "e2e_request_latency_seconds", "Seconds from arrival to finish, of finished requests.");
  return out;
}

}  // namespace tessera::serve
