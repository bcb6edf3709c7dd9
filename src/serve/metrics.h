// /metrics: the Prometheus text format (version 0.0.4), written here (one small
// writer; no client library is packaged). Names follow vLLM's with the prefix
// "tessera:", so that dashboards made for vLLM fit:
//
//   tessera:num_requests_running       gauge    requests in the scheduler
//   tessera:num_requests_waiting       gauge    requests queued for admission
//   tessera:kv_cache_usage_perc        gauge    KV blocks in use, 0..1
//   tessera:prefix_cache_queries_total counter  prompt tokens looked up in the prefix cache
//   tessera:prefix_cache_hits_total    counter  of them, found (their KV blocks reused)
// (vLLM's counters are prometheus_client's, which adds _total: vllm:prefix_cache_hits_total.)
//   tessera:prompt_tokens_total        counter
//   tessera:generation_tokens_total    counter
//   tessera:request_success_total{finished_reason="stop"|"length"}
//   tessera:request_failure_total      counter  failed in the engine (400/503 after admission)
//   tessera:request_cancelled_total    counter  the client went away
//   tessera:request_rejected_total     counter  refused at the door: queue full (429)
//   tessera:http_requests_total{code}  counter  every HTTP response by status code
//   tessera:request_queue_time_seconds, time_to_first_token_seconds, inter_token_latency_seconds,
//   e2e_request_latency_seconds        histograms (histogram.h)
//
// Every sample carries the label model_name (the served model's name), as
// vLLM's do, so that a dashboard's queries (sum by model_name, or
// {model_name="..."}) fit; labels are written in name order, as
// prometheus_client writes vLLM's: tessera:request_success_total{finished_reason="stop",model_name="m"},
// tessera:time_to_first_token_seconds_bucket{le="0.5",model_name="m"}.
//
// Counters are atomics; any thread may bump or read them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "serve/inference_loop.h"

namespace tessera::serve {

struct HttpCounters {
  std::atomic<uint64_t> rejected{0};
  // By status class and the codes the server sends: 200, 400, 401, 404, 405, 413, 429, 500, 503.
  static constexpr std::array<int, 9> kCodes{200, 400, 401, 404, 405, 413, 429, 500, 503};
  std::array<std::atomic<uint64_t>, kCodes.size()> responses{};
  void count(int code);
};

// `model_name` as it is (escaped here as the format asks: backslash, double quote, newline).
std::string write_metrics(const LoopStats& loop, const HttpCounters& http, const std::string& model_name);

// The label model_name="..." of `name`, its value escaped for the text format.
std::string model_label(const std::string& name);

}  // namespace tessera::serve
