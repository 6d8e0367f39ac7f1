// Unit tests of /metrics' text: Prometheus' exposition format, cumulative buckets, bounded labels.
#include <gtest/gtest.h>

#include "mlxrt/server/metrics.h"

namespace mlxrt::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Histogram, BucketsAreCumulativeAndEndWithInf) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.1);  // a value on a bound counts in that bucket (le: less or equal)
  h.observe(0.5);
  h.observe(3.0);
  std::string text = h.render("x");
  EXPECT_TRUE(has_line(text, "x_bucket{le=\"0.10000000000000001\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "x_bucket{le=\"1\"} 3")) << text;
  EXPECT_TRUE(has_line(text, "x_bucket{le=\"+Inf\"} 4")) << text;
  EXPECT_TRUE(has_line(text, "x_sum 3.6499999999999999")) << text;
  EXPECT_TRUE(has_line(text, "x_count 4")) << text;
}

TEST(ServerMetrics, CountsRequestsJobsAndTokens) {
  ServerMetrics m;
  m.request_answered("POST", "/v1/chat/completions", 200);
  m.request_answered("POST", "/v1/chat/completions", 200);
  m.request_answered("GET", "/v1/models/some-model", 200);
  m.job_started(10, 4, 0.002);
  m.first_token(0.2);
  m.next_token(0.01);
  m.job_finished(2);
  m.prompt_cache_state(4096, 1);
  std::string text = m.render({3, 1});
  EXPECT_TRUE(has_line(text, "mlxrt_http_requests_total{method=\"POST\",endpoint=\"/v1/chat/completions\",status=\"200\"} 2"))
      << text;
  EXPECT_TRUE(has_line(text, "mlxrt_http_requests_total{method=\"GET\",endpoint=\"/v1/models\",status=\"200\"} 1"));
  EXPECT_TRUE(has_line(text, "mlxrt_prompt_tokens_total 10"));
  EXPECT_TRUE(has_line(text, "mlxrt_prompt_cached_tokens_total 4"));
  EXPECT_TRUE(has_line(text, "mlxrt_prompt_cache_hits_total 1"));
  EXPECT_TRUE(has_line(text, "mlxrt_generation_tokens_total 2"));
  EXPECT_TRUE(has_line(text, "mlxrt_time_to_first_token_seconds_count 1"));
  EXPECT_TRUE(has_line(text, "mlxrt_inter_token_latency_seconds_count 1"));
  EXPECT_TRUE(has_line(text, "mlxrt_queue_depth 3"));
  EXPECT_TRUE(has_line(text, "mlxrt_batch_size 1"));
  EXPECT_TRUE(has_line(text, "mlxrt_kv_cache_bytes 4096"));
  EXPECT_TRUE(has_line(text, "mlxrt_prompt_cache_entries 1"));
  EXPECT_TRUE(has_line(text, "# TYPE mlxrt_time_to_first_token_seconds histogram"));
}

TEST(ServerMetrics, ModelLoadsCountAndResidentFollowsTheLast) {
  ServerMetrics m;
  EXPECT_TRUE(has_line(m.render({}), "mlxrt_model_loads_total 0"));
  m.model_loaded(1);
  m.model_loaded(2);
  m.model_loaded(2);
  std::string text = m.render({});
  EXPECT_TRUE(has_line(text, "mlxrt_model_loads_total 3")) << text;
  EXPECT_TRUE(has_line(text, "mlxrt_models_resident 2")) << text;
  EXPECT_TRUE(has_line(text, "# TYPE mlxrt_models_resident gauge")) << text;
}

TEST(ServerMetrics, ClientChosenPathsAndMethodsShareOneLabel) {
  ServerMetrics m;
  m.request_answered("POST", "/no/such/path/1", 404);
  m.request_answered("POST", "/no/such/path/2", 404);
  m.request_answered("BREW", "/v1/completions", 501);
  std::string text = m.render({});
  EXPECT_TRUE(has_line(text, "mlxrt_http_requests_total{method=\"POST\",endpoint=\"other\",status=\"404\"} 2")) << text;
  EXPECT_TRUE(has_line(text, "mlxrt_http_requests_total{method=\"other\",endpoint=\"/v1/completions\",status=\"501\"} 1"));
  EXPECT_EQ(text.find("/no/such"), std::string::npos);
  EXPECT_EQ(text.find("BREW"), std::string::npos);
}

}  // namespace
}  // namespace mlxrt::server
