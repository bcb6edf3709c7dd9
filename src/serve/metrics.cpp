#include "serve/metrics.h"

#include <cstdio>

namespace tessera::serve {

void HttpCounters::count(int code) {
  for (size_t i = 0; i < kCodes.size(); ++i)
    if (kCodes[i] == code) ++responses[i];
}

namespace {

// Writes metrics and their samples, each sample with the model_name label last
// (labels in name order; every other label of ours sorts before it).
struct Writer {
  std::string& out;
  std::string model;  // model_name="..."

  void metric(const char* name, const char* type, const char* help) const {
    out += std::string("# HELP tessera:") + name + " " + help + "\n# TYPE tessera:" + name + " " + type + "\n";
  }
  // A metric with one sample.
  void one(const char* name, const char* type, const char* help, double value) const {
    metric(name, type, help);
    sample(name, value);
  }
  // `labels`: the sample's own, before model_name (`finished_reason="stop"`), or none.
  void sample(const std::string& name, double value, const std::string& labels = "") const {
    char number[64];
    std::snprintf(number, sizeof number, "%.17g", value);
    out += "tessera:" + name + "{" + (labels.empty() ? "" : labels + ",") + model + "} " + number + "\n";
  }
};

}  // namespace

std::string model_label(const std::string& name) {
  std::string label = "model_name=\"";
  for (const char c : name) {
    if (c == '\\') {
      label += "\\\\";
    } else if (c == '"') {
      label += "\\\"";
    } else if (c == '\n') {
      label += "\\n";
    } else {
      label += c;
    }
  }
  return label + "\"";
}

std::string write_metrics(const LoopStats& loop, const HttpCounters& http, const std::string& model_name) {
  std::string out;
  const Writer w{out, model_label(model_name)};
  w.one("num_requests_running", "gauge", "Requests running: in the scheduler, not held for KV blocks.",
        static_cast<double>(loop.running.load()));
  w.one("num_requests_waiting", "gauge", "Requests waiting: queued for admission, or preempted and held for KV blocks.",
        static_cast<double>(loop.waiting.load()));
  w.metric("kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0 to 1).");
  const double total = static_cast<double>(loop.kv_blocks_total.load());
  w.sample("kv_cache_usage_perc", total > 0 ? 1.0 - static_cast<double>(loop.kv_blocks_free.load()) / total : 0.0);
  w.one("prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
        static_cast<double>(loop.prefix_cache_queries.load()));
  w.one("prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.",
        static_cast<double>(loop.prefix_cache_hits.load()));
  w.one("num_preemptions_total", "counter", "Requests preempted (KV blocks freed, recomputed later).",
        static_cast<double>(loop.preemptions.load()));
  w.one("prompt_tokens_total", "counter", "Prompt tokens admitted.", static_cast<double>(loop.prompt_tokens.load()));
  w.one("generation_tokens_total", "counter", "Tokens generated.", static_cast<double>(loop.generation_tokens.load()));
  w.metric("request_success_total", "counter", "Requests finished, by finish reason.");
  w.sample("request_success_total", static_cast<double>(loop.finished_stop.load()), "finished_reason=\"stop\"");
  w.sample("request_success_total", static_cast<double>(loop.finished_length.load()), "finished_reason=\"length\"");
  w.one("request_failure_total", "counter", "Requests that failed in the engine.",
        static_cast<double>(loop.failed.load()));
  w.one("request_cancelled_total", "counter", "Requests cancelled because the client went away.",
        static_cast<double>(loop.cancelled.load()));
  w.one("request_rejected_total", "counter", "Requests refused because the queue was full.",
        static_cast<double>(http.rejected.load()));
  w.metric("http_requests_total", "counter", "HTTP responses by status code.");
  for (size_t i = 0; i < HttpCounters::kCodes.size(); ++i)
    w.sample("http_requests_total", static_cast<double>(http.responses[i].load()),
             "code=\"" + std::to_string(HttpCounters::kCodes[i]) + "\"");
  w.one("engine_steps_total", "counter", "Steps of the inference thread (forward passes of every running request).",
        static_cast<double>(loop.steps.load()));
  w.one("engine_step_sequences_total", "counter",
        "Sequences run in this process's forward passes, summed over steps (over engine_steps_total: the batch).",
        static_cast<double>(loop.step_sequences.load()));
  w.one("engine_step_tokens_total", "counter",
        "Tokens run in this process's forward passes (decode tokens and prompt chunks), summed over steps.",
        static_cast<double>(loop.step_tokens.load()));
  w.one("engine_largest_step", "gauge", "Most sequences one forward pass has run.",
        static_cast<double>(loop.largest_step.load()));
  w.one("engine_step_seconds_total", "counter",
        "Seconds the inference thread spent in steps (forward pass and sampling), less the serving work it did "
        "while the device computed.",
        static_cast<double>(loop.step_ns.load()) * 1e-9);
  w.one("engine_launch_seconds_total", "counter",
        "Of engine_step_seconds_total, the seconds from a step's start until the device computes it on its own "
        "(choosing the step and queueing its forward pass; on the CPU, the choosing alone).",
        static_cast<double>(loop.launch_ns.load()) * 1e-9);
  w.one("engine_between_steps_seconds_total", "counter",
        "Seconds from a step's outputs to the next step's start while steps ran back to back: the serving work "
        "the device waits for (stop rules, feeds, admission).",
        static_cast<double>(loop.between_steps_ns.load()) * 1e-9);
  w.one("engine_iteration_seconds_total", "counter",
        "Seconds the inference thread was busy: steps and the serving work around them (admission, stop rules, "
        "events).",
        static_cast<double>(loop.iteration_ns.load()) * 1e-9);
  loop.queue_time.write(out, "request_queue_time_seconds", "Seconds from arrival to admission into the scheduler.",
                        w.model);
  loop.time_to_first_token.write(out, "time_to_first_token_seconds", "Seconds from arrival to the first token.",
                                 w.model);
  loop.inter_token_latency.write(out, "inter_token_latency_seconds", "Seconds between two tokens of a request.",
                                 w.model);
  loop.e2e_latency.write(out, "e2e_request_latency_seconds", "Seconds from arrival to finish, of finished requests.",
                         w.model);
  return out;
}

}  // namespace tessera::serve
