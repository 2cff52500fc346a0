#include "orchestrator/fleet/registrations.hpp"

#include <gtest/gtest.h>

#include <string>

namespace fg::fleet {
namespace {

using Action = RegistrationPlan::Action;
using Clock = RegistrationBook::Clock;
using std::chrono::seconds;

const Clock::time_point t0{};

std::string nested(int levels) {
  return std::string(static_cast<std::size_t>(levels), '[') +
         std::string(static_cast<std::size_t>(levels), ']');
}

// Models m (slots 2, a static endpoint http://127.0.0.1:7000 with 3 slots) and other;
// registration allows http://127.0.0.1:*; heartbeats every 10 s.
config::Config test_config() {
  config::Config c;
  config::ModelConfig m;
  m.name = "m";
  m.slots = 2;
  config::Endpoint e;
  e.url = *net::parse_url("http://127.0.0.1:7000");
  e.slots = 3;
  m.endpoints.push_back(e);
  c.models.push_back(m);
  config::ModelConfig other;
  other.name = "other";
  c.models.push_back(other);
  c.registration.token_env = "T";
  c.registration.allowed_urls = {"http://127.0.0.1:*"};
  c.registration.heartbeat_interval = std::chrono::milliseconds(10'000);
  return c;
}

RegistrationRequest request(std::string url, std::string model = "m") {
  auto parsed = parse_registration("{\"url\":\"" + url + "\",\"model\":\"" + model + "\"}");
  EXPECT_TRUE(parsed.request) << parsed.message;
  return parsed.request.value_or(RegistrationRequest{});
}

RegistrationBook book() {
  int n = 0;
  return RegistrationBook([n]() mutable { return "secret-" + std::to_string(++n); });
}

// ---- parse_registration ----

TEST(ParseRegistration, ReadsAFullRequest) {
  auto p = parse_registration(
      R"({"url":"HTTP://127.0.0.1:7001/","model":"m","slots":4,"agent_version":"0.1.0",)"
      R"("device":{"ram_bytes":8000000000,"cpu_cores":8}})");
  ASSERT_TRUE(p.request) << p.message;
  EXPECT_EQ(p.request->url.to_string(), "http://127.0.0.1:7001");
  EXPECT_EQ(p.request->model, "m");
  EXPECT_EQ(p.request->slots, 4u);
  EXPECT_EQ(p.request->agent_version, "0.1.0");
  EXPECT_EQ(p.request->device["cpu_cores"], 8);
}

TEST(ParseRegistration, RefusesWhatIsNotARequest) {
  EXPECT_EQ(parse_registration("").error, RequestError::not_json);
  EXPECT_EQ(parse_registration("{\"url\": nope").error, RequestError::not_json);
  EXPECT_EQ(parse_registration("[1]").error, RequestError::not_object);
  EXPECT_EQ(parse_registration(R"({"model":"m"})").error, RequestError::missing_url);
  EXPECT_EQ(parse_registration(R"({"url":7,"model":"m"})").error, RequestError::missing_url);
  EXPECT_EQ(parse_registration(R"({"url":"http://127.0.0.1:1"})").error,
            RequestError::missing_model);
  EXPECT_EQ(parse_registration(R"({"url":"ftp://h","model":"m"})").error, RequestError::bad_url);
  for (const char* slots : {"0", "1025", "-1", "1.5", "\"2\""}) {
    EXPECT_EQ(
        parse_registration(std::string(R"({"url":"http://h:1","model":"m","slots":)") + slots + "}")
            .error,
        RequestError::bad_slots)
        << slots;
  }
}

TEST(ParseRegistration, RefusesUrlsWithUserinfo) {
  auto p = parse_registration(R"({"url":"https://user:pw@x.acu.run","model":"m"})");
  EXPECT_EQ(p.error, RequestError::bad_url);
  EXPECT_NE(p.message.find("userinfo"), std::string::npos) << p.message;
}

TEST(ParseRegistration, RefusesDeepNestingWithoutRecursing) {
  // 100,000 levels: a recursive walk (dump, copy, destroy) of that overflows the stack.
  const std::string body =
      R"({"url":"http://h:1","model":"m","device":{"a":)" + nested(100000) + "}}";
  auto p = parse_registration(body);
  EXPECT_EQ(p.error, RequestError::too_deep);
  EXPECT_FALSE(p.request);
}

TEST(ParseRegistration, DropsOversizedDeviceFactsAndLongVersions) {
  const std::string big(5000, 'x');
  auto p = parse_registration(R"({"url":"http://h:1","model":"m","agent_version":")" +
                              std::string(100, 'v') + R"(","device":{"blob":")" + big + "\"}}");
  ASSERT_TRUE(p.request) << p.message;
  EXPECT_TRUE(p.request->device.empty());
  EXPECT_EQ(p.request->agent_version.size(), 64u);
}

TEST(ParseRegistration, NeverEchoesALongInput) {
  const std::string url = "ftp://" + std::string(100000, 'a');
  auto p = parse_registration(R"({"url":")" + url + R"(","model":"m"})");
  EXPECT_EQ(p.error, RequestError::bad_url);
  EXPECT_LT(p.message.size(), 300u);
}

// ---- the identity rules ----

TEST(RegistrationRules, ModelAndAllowedUrlsComeFirst) {
  auto b = book();
  const auto c = test_config();
  auto unknown = b.plan(request("http://127.0.0.1:7001", "nope"), "", std::nullopt, c, t0);
  EXPECT_EQ(unknown.refusal, Refusal::unknown_model);
  auto elsewhere = b.plan(request("http://127.0.0.2:7001"), "", std::nullopt, c, t0);
  EXPECT_EQ(elsewhere.refusal, Refusal::url_not_allowed);
  auto fine = b.plan(request("http://127.0.0.1:7001"), "", std::nullopt, c, t0);
  EXPECT_EQ(fine.action, Action::create);
  EXPECT_EQ(fine.slots, 2u) << "the model's default";
}

TEST(RegistrationRules, NewRegistrationsGetTheirOwnSecret) {
  auto b = book();
  const auto r = request("http://127.0.0.1:7001");
  EXPECT_EQ(b.record(1, r, t0), "secret-1");
  EXPECT_EQ(b.record(2, r, t0), "secret-2");
  EXPECT_EQ(b.check(1, "secret-1"), SecretCheck::ok);
  EXPECT_EQ(b.check(1, "secret-2"), SecretCheck::wrong_secret);
  EXPECT_EQ(b.check(1, ""), SecretCheck::wrong_secret);
  EXPECT_EQ(b.check(3, "secret-1"), SecretCheck::unknown);
  b.forget(1);
  EXPECT_EQ(b.check(1, "secret-1"), SecretCheck::unknown);
}

TEST(RegistrationRules, ARegisteredUrlCannotBeTakenOverWithoutItsSecret) {
  auto b = book();
  const auto c = test_config();
  const auto r = request("http://127.0.0.1:7001");
  const std::string secret = b.record(5, r, t0);
  const UrlHolder holder{5, "m", Source::registration};
  for (const char* presented : {"", "secret-99", "secret-1x"}) {
    auto p = b.plan(r, presented, holder, c, t0 + seconds(29));
    EXPECT_EQ(p.action, Action::refuse) << presented;
    EXPECT_EQ(p.refusal, Refusal::url_registered) << presented;
  }
  // Nor moved to another model.
  auto move = b.plan(request("http://127.0.0.1:7001", "other"), "", holder, c, t0);
  EXPECT_EQ(move.refusal, Refusal::url_registered);
  // With the secret: an update in place, and a move keeps the secret.
  auto update = b.plan(r, secret, holder, c, t0);
  EXPECT_EQ(update.action, Action::update);
  auto moved = b.plan(request("http://127.0.0.1:7001", "other"), secret, holder, c, t0);
  EXPECT_EQ(moved.action, Action::replace);
  EXPECT_TRUE(moved.keep_secret);
  EXPECT_FALSE(moved.took_over);
}

TEST(RegistrationRules, ARegistrationThatMissedItsHeartbeatsMayBeTakenOver) {
  auto b = book();
  const auto c = test_config();
  const auto r = request("http://127.0.0.1:7001");
  b.record(5, r, t0);
  const UrlHolder holder{5, "m", Source::registration};
  EXPECT_FALSE(b.missed_heartbeats(5, c.registration.heartbeat_interval, t0 + seconds(30)));
  EXPECT_EQ(b.plan(r, "", holder, c, t0 + seconds(30)).action, Action::refuse);
  EXPECT_TRUE(b.missed_heartbeats(5, c.registration.heartbeat_interval, t0 + seconds(31)));
  auto p = b.plan(r, "", holder, c, t0 + seconds(31));
  EXPECT_EQ(p.action, Action::replace);
  EXPECT_TRUE(p.took_over);
  EXPECT_FALSE(p.keep_secret);
  // A heartbeat keeps it: the silence counts from the last one.
  b.heartbeat(5, t0 + seconds(31));
  EXPECT_EQ(b.plan(r, "", holder, c, t0 + seconds(60)).action, Action::refuse);
}

TEST(RegistrationRules, StaticEndpointsKeepTheirModelAndSlotCeiling) {
  auto b = book();
  const auto c = test_config();
  const UrlHolder fixed{1, "m", Source::config};
  auto other = b.plan(request("http://127.0.0.1:7000", "other"), "", fixed, c, t0);
  EXPECT_EQ(other.refusal, Refusal::static_endpoint);
  // Even when no entry serves it now (an operator removed it until the next reload).
  auto gone = b.plan(request("http://127.0.0.1:7000", "other"), "", std::nullopt, c, t0);
  EXPECT_EQ(gone.refusal, Refusal::static_endpoint);

  auto more = parse_registration(R"({"url":"http://127.0.0.1:7000","model":"m","slots":8})");
  ASSERT_TRUE(more.request);
  auto attach = b.plan(*more.request, "", fixed, c, t0);
  EXPECT_EQ(attach.action, Action::attach);
  EXPECT_EQ(attach.slots, 3u) << "capped at the endpoint's slots";
  EXPECT_TRUE(attach.slots_capped);
  auto fewer = parse_registration(R"({"url":"http://127.0.0.1:7000","model":"m","slots":1})");
  ASSERT_TRUE(fewer.request);
  EXPECT_EQ(b.plan(*fewer.request, "", fixed, c, t0).slots, 1u);
  EXPECT_FALSE(b.plan(*fewer.request, "", fixed, c, t0).slots_capped);
}

TEST(RegistrationRules, AStaticEndpointsRegistrationIsGuardedLikeAnyOther) {
  auto b = book();
  const auto c = test_config();
  const auto r = request("http://127.0.0.1:7000");
  const UrlHolder fixed{1, "m", Source::config};
  const std::string secret = b.record(1, r, t0);
  EXPECT_EQ(b.plan(r, "", fixed, c, t0).refusal, Refusal::url_registered);
  EXPECT_EQ(b.plan(r, secret, fixed, c, t0).action, Action::update);
  auto taken = b.plan(r, "", fixed, c, t0 + seconds(31));
  EXPECT_EQ(taken.action, Action::attach);
  EXPECT_TRUE(taken.took_over);
}

TEST(RegistrationRules, ALocalAgentsUrlIsTheGateways) {
  auto b = book();
  const UrlHolder local{3, "m", Source::local};
  EXPECT_EQ(b.plan(request("http://127.0.0.1:7009"), "", local, test_config(), t0).refusal,
            Refusal::url_in_use);
}

TEST(RegistrationRules, SilentRegistrationsAreListed) {
  auto b = book();
  const auto r = request("http://127.0.0.1:7001");
  b.record(1, r, t0);
  b.record(2, r, t0 + seconds(5));
  EXPECT_EQ(b.silent_for(seconds(10), t0 + seconds(12)), std::vector<ReplicaId>{1});
  EXPECT_EQ(b.silent_for(seconds(10), t0 + seconds(16)), (std::vector<ReplicaId>{1, 2}));
  EXPECT_TRUE(b.silent_for(seconds(10), t0 + seconds(10)).empty());
}

TEST(RegistrationRules, SilentRegistrationsAreFoundWhetherOrNotTheBookWalksThem) {
  auto b = book();
  const auto r = request("http://127.0.0.1:7001");
  EXPECT_TRUE(b.silent_for(seconds(10), t0).empty());
  b.record(1, r, t0);
  b.record(2, r, t0 + seconds(5));
  EXPECT_TRUE(b.silent_for(seconds(10), t0 + seconds(9)).empty());  // nobody can be: no walk
  EXPECT_EQ(b.silent_for(seconds(10), t0 + seconds(12)), std::vector<ReplicaId>{1});
  b.heartbeat(1, t0 + seconds(13));
  EXPECT_TRUE(b.silent_for(seconds(10), t0 + seconds(14)).empty());
  EXPECT_EQ(b.silent_for(seconds(10), t0 + seconds(16)), std::vector<ReplicaId>{2});
  b.forget(2);
  EXPECT_TRUE(b.silent_for(seconds(10), t0 + seconds(20)).empty());
  EXPECT_EQ(b.silent_for(seconds(10), t0 + seconds(24)), std::vector<ReplicaId>{1});
  // A registration recorded with an older time than any (times are the caller's) is still found.
  b.record(3, r, t0 - seconds(100));
  EXPECT_EQ(b.silent_for(seconds(10), t0 + seconds(14)), std::vector<ReplicaId>{3});
  b.heartbeat(3, t0 + seconds(14));
  EXPECT_TRUE(b.silent_for(seconds(10), t0 + seconds(15)).empty());
  // Forgetting everyone leaves nothing to find.
  b.forget(1);
  b.forget(3);
  EXPECT_TRUE(b.silent_for(seconds(10), t0 + seconds(1000)).empty());
}

TEST(RegistrationRules, KeepingASecretAcrossAMove) {
  auto b = book();
  const auto r = request("http://127.0.0.1:7001");
  const std::string secret = b.record(1, r, t0);
  EXPECT_EQ(b.record(2, r, t0, secret), secret);
  EXPECT_EQ(b.check(2, secret), SecretCheck::ok);
}

}  // namespace
}  // namespace fg::fleet
