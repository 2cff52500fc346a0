#include "orchestrator/metrics/metrics.hpp"

#include <gtest/gtest.h>

#include <regex>
#include <string>

namespace fg::metrics {
namespace {

// The value of the first sample line that starts with `series` ("name{labels}").
double sample(const std::string& text, const std::string& series) {
  auto at = text.find("\n" + series + " ");
  if (at == std::string::npos) {
    return -1;
  }
  auto start = at + 1 + series.size() + 1;
  return std::stod(text.substr(start, text.find('\n', start) - start));
}

TEST(Metrics, ASuccessCountsTheRequestAndItsTimes) {
  Metrics m;
  m.declare_model("m");
  m.request_done("m", "/v1/chat/completions", "chat", 200, 1.5, 0.25, 0.75);
  m.tokens("m", "chat", "prompt", 7000);
  const auto text = m.scrape();
  EXPECT_EQ(
      sample(
          text,
          R"(fleetgate_requests_total{api="chat",code="200",endpoint="/v1/chat/completions",model="m"})"),
      1);
  EXPECT_EQ(sample(text, R"(fleetgate_request_duration_seconds_count{model="m"})"), 1);
  EXPECT_DOUBLE_EQ(sample(text, R"(fleetgate_request_duration_seconds_sum{model="m"})"), 1.5);
  EXPECT_EQ(sample(text, R"(fleetgate_request_duration_seconds_bucket{model="m",le="1"})"), 0);
  EXPECT_EQ(sample(text, R"(fleetgate_request_duration_seconds_bucket{model="m",le="2.5"})"), 1);
  EXPECT_EQ(sample(text, R"(fleetgate_request_duration_seconds_bucket{model="m",le="1800"})"), 1);
  EXPECT_DOUBLE_EQ(sample(text, R"(fleetgate_queue_wait_seconds_sum{model="m"})"), 0.25);
  EXPECT_EQ(sample(text, R"(fleetgate_time_to_first_byte_seconds_count{model="m"})"), 1);
  EXPECT_EQ(sample(text, R"(fleetgate_tokens_total{api="chat",kind="prompt",model="m"})"), 7000);
  EXPECT_EQ(sample(text, R"(fleetgate_tokens_total{api="chat",kind="completion",model="m"})"), 0);
}

TEST(Metrics, TokensAreCountedPerApiAndDeclaredAtZeroForEach) {
  Metrics m;
  m.declare_model("m");
  for (std::string_view api : Metrics::kTokenApis) {
    const std::string labels = R"({api=")" + std::string(api) + R"(",kind="prompt",model="m"})";
    EXPECT_EQ(sample(m.scrape(), "fleetgate_tokens_total" + labels), 0) << api;
  }
  m.tokens("m", "messages", "prompt", 12);
  m.tokens("m", "messages", "prompt", 30);
  m.tokens("m", "responses", "completion", 5);
  m.request_done("m", "/v1/messages", "messages", 529, 0.1, 0, -1);
  const auto text = m.scrape();
  EXPECT_EQ(sample(text, R"(fleetgate_tokens_total{api="messages",kind="prompt",model="m"})"), 42);
  EXPECT_EQ(sample(text, R"(fleetgate_tokens_total{api="responses",kind="completion",model="m"})"),
            5);
  EXPECT_EQ(sample(text, R"(fleetgate_tokens_total{api="chat",kind="prompt",model="m"})"), 0);
  EXPECT_EQ(
      sample(
          text,
          R"(fleetgate_requests_total{api="messages",code="529",endpoint="/v1/messages",model="m"})"),
      1);
}

TEST(Metrics, TotalsPerModelFeedTheStatusPage) {
  Metrics m;
  m.request_done("m", "/v1/chat/completions", "chat", 200, 1, 0, 0.5);
  m.request_done("m", "/v1/chat/completions", "chat", 503, 1, 0, -1);
  m.request_done("", "/v1/chat/completions", "chat", 404, 0, 0, -1);
  m.tokens("m", "chat", "prompt", 7000);
  m.tokens("m", "chat", "completion", 4);
  m.tokens("m", "chat", "cached", 100);
  ASSERT_EQ(m.totals().size(), 1u);
  EXPECT_EQ(m.totals().at("m").requests, 2u);
  EXPECT_EQ(m.totals().at("m").tokens, 7004u);
}

TEST(Metrics, RejectionRetryAndEjectionMoveTheirCounters) {
  Metrics m;
  m.declare_model("m");
  auto before = m.scrape();
  EXPECT_EQ(sample(before, R"(fleetgate_queue_rejections_total{model="m",reason="full"})"), 0);
  EXPECT_EQ(sample(before, R"(fleetgate_retries_total{model="m"})"), 0);
  m.queue_rejection("m", "full");
  m.retry("m");
  m.upstream_error("m", "connect");
  m.replica_state_change("m", "unhealthy");
  auto after = m.scrape();
  EXPECT_EQ(sample(after, R"(fleetgate_queue_rejections_total{model="m",reason="full"})"), 1);
  EXPECT_EQ(sample(after, R"(fleetgate_queue_rejections_total{model="m",reason="timeout"})"), 0);
  EXPECT_EQ(sample(after, R"(fleetgate_retries_total{model="m"})"), 1);
  EXPECT_EQ(sample(after, R"(fleetgate_upstream_errors_total{kind="connect",model="m"})"), 1);
  EXPECT_EQ(sample(after, R"(fleetgate_replica_state_changes_total{model="m",to="unhealthy"})"), 1);
}

TEST(Metrics, ReplicaAndModelSeriesGoAwayWithThem) {
  Metrics m;
  m.declare_model("m");
  m.set_queue_depth("m", 3);
  m.set_replica("m", "r1", 1, 42);
  m.replica_request("m", "r1", "ok");
  m.health_check_series("r1").Observe(0.02);
  auto text = m.scrape();
  EXPECT_EQ(sample(text, R"(fleetgate_replica_health_check_seconds_count{replica="r1"})"), 1);
  // The same series each time it is asked for.
  EXPECT_EQ(&m.health_check_series("r1"), &m.health_check_series("r1"));
  EXPECT_EQ(sample(text, R"(fleetgate_replica_in_flight{model="m",replica="r1"})"), 1);
  EXPECT_EQ(
      sample(text, R"(fleetgate_replica_requests_total{model="m",outcome="ok",replica="r1"})"), 1);
  m.forget_replica("m", "r1");
  m.forget_model("m");
  text = m.scrape();
  EXPECT_EQ(text.find("replica=\"r1\""), std::string::npos);
  EXPECT_EQ(text.find("fleetgate_queue_depth{model=\"m\"}"), std::string::npos);
}

// The counters are kept per (model, replica, outcome) after their first use: they count on, each
// series apart, and a replica forgotten and seen again starts a fresh series (none of the old
// counter, which the registry freed, is used).
TEST(Metrics, ReplicaRequestCountersAreKeptPerSeriesAndDroppedWithTheReplica) {
  Metrics m;
  for (int i = 0; i < 3; ++i) {
    m.replica_request("m", "r1", "ok");
  }
  m.replica_request("m", "r1", "busy");
  m.replica_request("other", "r1", "ok");
  auto text = m.scrape();
  EXPECT_EQ(
      sample(text, R"(fleetgate_replica_requests_total{model="m",outcome="ok",replica="r1"})"), 3);
  EXPECT_EQ(
      sample(text, R"(fleetgate_replica_requests_total{model="m",outcome="busy",replica="r1"})"),
      1);
  EXPECT_EQ(
      sample(text, R"(fleetgate_replica_requests_total{model="other",outcome="ok",replica="r1"})"),
      1);
  m.forget_replica("m", "r1");
  text = m.scrape();
  EXPECT_EQ(text.find(R"(model="m",outcome="ok",replica="r1")"), std::string::npos);
  EXPECT_EQ(
      sample(text, R"(fleetgate_replica_requests_total{model="other",outcome="ok",replica="r1"})"),
      1);
  m.replica_request("m", "r1", "ok");
  text = m.scrape();
  EXPECT_EQ(
      sample(text, R"(fleetgate_replica_requests_total{model="m",outcome="ok",replica="r1"})"), 1);
}

TEST(Metrics, ProcessFactsAreRead) {
  Metrics m;
  auto text = m.scrape();
  EXPECT_GT(sample(text, "fleetgate_process_resident_memory_bytes"), 1e6);
  EXPECT_GT(sample(text, "fleetgate_process_open_fds"), 2);
  EXPECT_GT(sample(text, "fleetgate_process_start_time_seconds"), 1.6e9);
  EXPECT_EQ(sample(text, R"(fleetgate_build_info{version=")" FLEETGATE_VERSION R"("})"), 1);
}

}  // namespace
}  // namespace fg::metrics
