#include "orchestrator/fleet/deployment.hpp"

#include <gtest/gtest.h>

#include "orchestrator/fleet/registrations.hpp"

namespace fg::fleet {
namespace {

using namespace std::chrono_literals;

SystemTime at(long long unix_seconds) {
  return SystemTime(std::chrono::seconds(unix_seconds));
}

TEST(Rfc3339, ParsesUtcOffsetsAndFractions) {
  // date -u -d 2026-12-04T18:00:00Z +%s
  EXPECT_EQ(parse_rfc3339("2026-12-04T18:00:00Z"), at(1796407200));
  EXPECT_EQ(parse_rfc3339("2026-12-04t18:00:00z"), at(1796407200));
  EXPECT_EQ(parse_rfc3339("2026-12-04 18:00:00Z"), at(1796407200));
  EXPECT_EQ(parse_rfc3339("2026-12-04T19:30:00+01:30"), at(1796407200));
  EXPECT_EQ(parse_rfc3339("2026-12-04T16:00:00-02:00"), at(1796407200));
  EXPECT_EQ(parse_rfc3339("1970-01-01T00:00:00Z"), at(0));
  EXPECT_EQ(parse_rfc3339("2024-02-29T00:00:00Z"), at(1709164800));
  EXPECT_EQ(parse_rfc3339("2026-12-04T18:00:00.250Z"), at(1796407200) + 250ms);
  EXPECT_EQ(parse_rfc3339("2026-12-04T18:00:00.123456789Z"), at(1796407200) + 123ms);
}

TEST(Rfc3339, RefusesEverythingElse) {
  for (const char* bad :
       {"", "2026-12-04", "2026-12-04T18:00:00", "2026-12-04T18:00Z", "2026-13-04T18:00:00Z",
        "2026-02-29T00:00:00Z", "2026-12-32T00:00:00Z", "2026-12-04T24:00:00Z",
        "2026-12-04T18:60:00Z", "2026-12-04T18:00:60Z", "2026-12-04T18:00:00.Z",
        "2026-12-04T18:00:00+0100", "2026-12-04T18:00:00Z ", "1796407200", "26-12-04T18:00:00Z",
        "2026-12-04T18:00:00.1234567891Z", "2026-12-04X18:00:00Z"}) {
    EXPECT_FALSE(parse_rfc3339(bad)) << bad;
  }
}

TEST(Rfc3339, FormatsUtcWholeSeconds) {
  EXPECT_EQ(format_rfc3339(at(1796407200)), "2026-12-04T18:00:00Z");
  EXPECT_EQ(format_rfc3339(at(1796407200) + 999ms), "2026-12-04T18:00:00Z");
  EXPECT_EQ(parse_rfc3339(format_rfc3339(at(1709164800))), at(1709164800));
}

TEST(EndingCount, CountsHealthyReplicasEndingWithinTheHorizon) {
  const SystemTime now = at(1'000'000);
  const std::vector<EndingFacts> replicas = {
      {true, now + 30min},   // ends soon
      {true, now - 1min},    // already past its end, still answering
      {true, now + 59min},   // just inside
      {true, now + 1h},      // exactly at the horizon: not within it
      {true, now + 5h},      // later
      {true, std::nullopt},  // no end known (a static endpoint, an agent without one)
      {false, now + 5min},   // not healthy: not counted, it gives no capacity now
  };
  EXPECT_EQ(count_ending(replicas, now), 3u);
  EXPECT_EQ(count_ending(replicas, now, 6h), 5u);
  EXPECT_EQ(count_ending({}, now), 0u);
}

TEST(EndingCount, ShortAfterEndings) {
  EXPECT_FALSE(short_after_endings(10, 0, 10));
  EXPECT_TRUE(short_after_endings(10, 1, 10));
  EXPECT_FALSE(short_after_endings(12, 2, 10));
  EXPECT_TRUE(short_after_endings(2, 5, 1));  // more ending than healthy cannot underflow
  EXPECT_FALSE(short_after_endings(0, 0, 0));
}

TEST(RegistrationDeployment, DeploymentIdAndEndTimeAreParsed) {
  auto p = parse_registration(
      R"({"url":"https://a1b2c3d4.acu.run","model":"m","deployment_id":"0x4f2a-17",)"
      R"("ends_at":"2026-12-04T18:00:00Z"})");
  ASSERT_TRUE(p.request) << p.message;
  EXPECT_EQ(p.request->deployment_id, "0x4f2a-17");
  EXPECT_EQ(p.request->ends_at, at(1796407200));
  auto none = parse_registration(R"({"url":"https://a.acu.run","model":"m","ends_at":null})");
  ASSERT_TRUE(none.request);
  EXPECT_EQ(none.request->deployment_id, "");
  EXPECT_FALSE(none.request->ends_at);
}

TEST(RegistrationDeployment, BadValuesAreRefusedWithTheKey) {
  const std::string base = R"({"url":"https://a.acu.run","model":"m",)";
  for (const std::string& extra :
       {std::string(R"("ends_at":"tomorrow"})"), std::string(R"("ends_at":1796407200})"),
        std::string(R"("ends_at":"2026-12-04T18:00:00"})"), std::string(R"("deployment_id":17})"),
        std::string(R"("deployment_id":""})"),
        R"("deployment_id":")" + std::string(kMaxDeploymentId + 1, 'x') + "\"}"}) {
    auto p = parse_registration(base + extra);
    EXPECT_FALSE(p.request) << extra;
    EXPECT_EQ(p.error, RequestError::bad_deployment) << extra;
    EXPECT_TRUE(p.message.find("ends_at") != std::string::npos ||
                p.message.find("deployment_id") != std::string::npos)
        << p.message;
  }
}

}  // namespace
}  // namespace fg::fleet
