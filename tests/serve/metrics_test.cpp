// /metrics' text (serve/metrics.h): vLLM's names and types for what issue 17
// point 9 lists, and the model_name label on every sample, as vLLM writes it
// (labels in name order, so model_name last), its value escaped as the text
// format asks. Each test fails without the label (tried: write_metrics without
// model_name) or without the escaping (tried: the name copied as it is).
#include "serve/metrics.h"

#include <gtest/gtest.h>

#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::serve {
namespace {

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string written(const std::string& model_name) {
  LoopStats loop;
  loop.running = 3;
  loop.finished_stop = 2;
  loop.time_to_first_token.observe(0.2);
  HttpCounters http;
  http.count(200);
  return write_metrics(loop, http, model_name);
}

TEST(MetricsTest, EverySampleCarriesTheModelNameLastAsVllmWritesIt) {
  const std::string text = written("org/Model-1");
  const std::regex sample(R"(^tessera:([a-z0-9_]+)\{(.*)\} (\S+)$)");
  size_t samples = 0;
  for (const std::string& line : lines(text)) {
    if (line.starts_with("#")) continue;
    std::smatch m;
    ASSERT_TRUE(std::regex_match(line, m, sample)) << line;
    const std::string labels = m[2];
    EXPECT_TRUE(labels == "model_name=\"org/Model-1\"" || labels.ends_with(",model_name=\"org/Model-1\"")) << line;
    EXPECT_EQ(labels.find("model_name"), labels.rfind("model_name")) << line;
    ++samples;
  }
  EXPECT_GT(samples, 40u);
  EXPECT_NE(text.find("\ntessera:num_requests_running{model_name=\"org/Model-1\"} 3\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\ntessera:request_success_total{finished_reason=\"stop\",model_name=\"org/Model-1\"} 2\n"),
            std::string::npos);
  EXPECT_NE(text.find("\ntessera:http_requests_total{code=\"200\",model_name=\"org/Model-1\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("\ntessera:time_to_first_token_seconds_bucket{le=\"0.25\",model_name=\"org/Model-1\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("\ntessera:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"org/Model-1\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("\ntessera:time_to_first_token_seconds_count{model_name=\"org/Model-1\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("\ntessera:time_to_first_token_seconds_sum{model_name=\"org/Model-1\"} 0.2"), std::string::npos);
}

// Issue 17 point 9's list, with vLLM's names (vllm: -> tessera:) and types.
TEST(MetricsTest, PointNinesMetricsHaveVllmsNamesAndTypes) {
  const std::string text = written("m");
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"num_requests_running", "gauge"},
      {"num_requests_waiting", "gauge"},
      {"kv_cache_usage_perc", "gauge"},
      {"prompt_tokens_total", "counter"},
      {"generation_tokens_total", "counter"},
      {"request_success_total", "counter"},
      {"prefix_cache_queries_total", "counter"},
      {"prefix_cache_hits_total", "counter"},
      {"num_preemptions_total", "counter"},
      {"time_to_first_token_seconds", "histogram"},
      {"inter_token_latency_seconds", "histogram"},
      {"e2e_request_latency_seconds", "histogram"},
      {"request_queue_time_seconds", "histogram"},
  };
  for (const auto& [name, type] : expected) {
    EXPECT_NE(text.find("\n# TYPE tessera:" + name + " " + type + "\n"), std::string::npos) << name;
    EXPECT_NE(text.find("\ntessera:" + name + (type == "histogram" ? "_count{" : "{")), std::string::npos) << name;
  }
  EXPECT_NE(text.find("\ntessera:request_success_total{finished_reason=\"length\",model_name=\"m\"} 0\n"),
            std::string::npos);
}

// --served-model-name is the operator's text: a quote, a backslash or a newline
// in it must not end the label or the line (the scrape would fail whole).
TEST(MetricsTest, TheModelNameIsEscaped) {
  EXPECT_EQ(model_label("a\"b\\c\nd"), "model_name=\"a\\\"b\\\\c\\nd\"");
  EXPECT_EQ(lines(written("a\"b\\c\nd")).size(), lines(written("m")).size());
  EXPECT_NE(written("x\ny").find("\ntessera:num_requests_running{model_name=\"x\\ny\"} 3\n"), std::string::npos);
}

}  // namespace
}  // namespace tessera::serve
