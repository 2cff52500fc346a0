#include "orchestrator/cli/status_report.hpp"

#include <gtest/gtest.h>

namespace fg::cli {
namespace {

nlohmann::json model(const char* name, int healthy, int desired) {
  return {{"model", name},
          {"desired", desired},
          {"registered", desired},
          {"healthy", healthy},
          {"busy_slots", 1},
          {"free_slots", 3},
          {"queue_depth", 0},
          {"degraded", healthy < desired},
          {"requests_per_second", 2.5},
          {"tokens_per_second", 812.4}};
}

nlohmann::json replica(const char* id, const char* state, nlohmann::json reason) {
  return {{"id", id},       {"model", "fraud"}, {"url", "https://a1.acu.run"},
          {"state", state}, {"in_flight", 1},   {"slots", 4},
          {"requests", 12}, {"failures", 0},    {"state_reason", std::move(reason)}};
}

nlohmann::json status(nlohmann::json models, nlohmann::json replicas) {
  return {{"version", "0.1.0"},
          {"time", "2026-12-03T12:00:00Z"},
          {"models", std::move(models)},
          {"replicas", std::move(replicas)}};
}

TEST(StatusReport, ExitCodeIsOkOnlyWhenEveryModelHasItsHealthyReplicas) {
  EXPECT_EQ(status_exit_code(status({model("a", 2, 2), model("b", 3, 1)}, nlohmann::json::array())),
            kStatusOk);
  EXPECT_EQ(status_exit_code(status({model("a", 2, 2), model("b", 0, 1)}, nlohmann::json::array())),
            kStatusDegraded);
  EXPECT_EQ(status_exit_code(status(nlohmann::json::array(), nlohmann::json::array())), kStatusOk);
  EXPECT_NE(kStatusCannotConnect, kStatusUnauthorized);
  EXPECT_NE(kStatusCannotConnect, kStatusDegraded);
}

TEST(StatusReport, TablesPerModelAndPerPhone) {
  const std::string text = render_status(
      status({model("fraud", 1, 2)}, {replica("r1", "healthy", "probe passed 2 times"),
                                      replica("r2", "unhealthy", "probe failed\n3 times")}));
  EXPECT_EQ(
      text,
      "fleetgate 0.1.0 at 2026-12-03T12:00:00Z: DEGRADED\n"
      "\n"
      "MODEL  STATE     HEALTHY  REGISTERED  SLOTS  QUEUE  REQ/S  TOK/S\n"
      "fraud  DEGRADED      1/2           2    1/4      0    2.5    812\n"
      "\n"
      "PHONE  MODEL  STATE      SLOTS  REQUESTS  FAILURES  URL                 WHY\n"
      "r1     fraud  healthy      1/4        12         0  https://a1.acu.run  probe passed 2 "
      "times\n"
      "r2     fraud  unhealthy    1/4        12         0  https://a1.acu.run  probe failed 3 "
      "times\n");
}

TEST(StatusReport, AModelWithoutHealthyReplicasIsDownAndANullReasonADash) {
  const std::string text =
      render_status(status({model("fraud", 0, 1)}, {replica("r1", "joining", nullptr)}));
  EXPECT_NE(text.find("fraud  DOWN"), std::string::npos) << text;
  EXPECT_NE(text.find("joining    1/4"), std::string::npos) << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_NE(text.find("https://a1.acu.run  -\n"), std::string::npos) << text;
}

TEST(StatusReport, AnAnswerOfAnotherShapeThrows) {
  EXPECT_THROW(render_status(nlohmann::json{{"models", 3}}), nlohmann::json::exception);
  EXPECT_THROW(status_exit_code(nlohmann::json::object()), nlohmann::json::exception);
}

TEST(StatusReport, Arguments) {
  std::string error;
  auto a = parse_status_args({}, nullptr, &error);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->admin_url, kDefaultAdminUrl);
  EXPECT_EQ(a->token, "");
  EXPECT_FALSE(a->watch);
  a = parse_status_args({"--admin", "https://gw:9090", "--watch"}, "from-env", &error);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->admin_url, "https://gw:9090");
  EXPECT_EQ(a->token, "from-env");
  EXPECT_TRUE(a->watch);
  a = parse_status_args({"--token", "flag"}, "from-env", &error);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->token, "flag");  // the flag wins
  EXPECT_FALSE(parse_status_args({"--token"}, nullptr, &error));
  EXPECT_EQ(error, "unknown or incomplete argument '--token'");
  EXPECT_FALSE(parse_status_args({"--whatever"}, nullptr, &error));
}

}  // namespace
}  // namespace fg::cli
