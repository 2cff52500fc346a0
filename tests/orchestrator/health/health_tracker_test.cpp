#include "orchestrator/health/health_tracker.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace fg::health {
namespace {

using std::chrono::duration_cast;
using std::chrono::seconds;

const std::string kModel = "llama";
const std::string kOther = "qwen";

TimePoint at(int s) {
  return TimePoint{} + seconds(s);
}

// Feeds n probes of one kind; returns every transition seen, in order.
std::vector<Transition> probe(HealthTracker& h, ReplicaId id, ProbeResult r, int n) {
  std::vector<Transition> seen;
  for (int i = 0; i < n; ++i) {
    if (auto t = h.on_probe(id, r, at(i))) {
      seen.push_back(*t);
    }
  }
  return seen;
}

std::vector<Transition> traffic_failures(HealthTracker& h, ReplicaId id, int n,
                                         TimePoint now = at(0)) {
  std::vector<Transition> seen;
  for (int i = 0; i < n; ++i) {
    if (auto t = h.on_traffic_failure(id, now)) {
      seen.push_back(*t);
    }
  }
  return seen;
}

void expect_transition(const std::optional<Transition>& t, ReplicaId id, State from, State to) {
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->id, id);
  EXPECT_EQ(t->from, from);
  EXPECT_EQ(t->to, to);
  EXPECT_FALSE(t->reason.empty());
  EXPECT_EQ(t->reason.find("http"), std::string::npos);
}

// ---- state names ----

TEST(HealthState, NamesAreStable) {
  EXPECT_EQ(to_string(State::joining), "joining");
  EXPECT_EQ(to_string(State::healthy), "healthy");
  EXPECT_EQ(to_string(State::unhealthy), "unhealthy");
  EXPECT_EQ(to_string(State::draining), "draining");
  EXPECT_EQ(to_string(State::gone), "gone");
}

// ---- registry basics ----

TEST(HealthRegistry, AddDefaultsToJoiningAndCanStartHealthy) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0));
  h.add(2, kModel, {}, at(0), State::healthy);
  EXPECT_TRUE(h.contains(1));
  EXPECT_EQ(h.state(1), State::joining);
  EXPECT_EQ(h.state(2), State::healthy);
  EXPECT_EQ(h.healthy_count(kModel), 1u);
  EXPECT_EQ(h.replicas(), (std::vector<ReplicaId>{1, 2}));
}

TEST(HealthRegistry, RemoveForgetsTheReplica) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.remove(1);
  EXPECT_FALSE(h.contains(1));
  EXPECT_EQ(h.state(1), State::gone);
  EXPECT_EQ(h.healthy_count(kModel), 0u);
  EXPECT_TRUE(h.replicas().empty());
}

TEST(HealthRegistry, ReAddReplacesTheEntry) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.add(1, kOther, {}, at(1));
  EXPECT_EQ(h.state(1), State::joining);
  EXPECT_EQ(h.healthy_count(kModel), 0u);
  EXPECT_EQ(h.replicas().size(), 1u);
}

TEST(HealthRegistry, HealthyCountIsPerModel) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.add(2, kModel, {}, at(0), State::healthy);
  h.add(3, kModel, {}, at(0), State::unhealthy);
  h.add(4, kOther, {}, at(0), State::healthy);
  h.add(5, kModel, {}, at(0), State::draining);
  EXPECT_EQ(h.healthy_count(kModel), 2u);
  EXPECT_EQ(h.healthy_count(kOther), 1u);
  EXPECT_EQ(h.healthy_count("missing"), 0u);
}

TEST(HealthRegistry, UnknownIdsAreNoOps) {
  HealthTracker h;
  EXPECT_FALSE(h.contains(9));
  EXPECT_EQ(h.state(9), State::gone);
  EXPECT_FALSE(h.on_probe(9, ProbeResult::pass, at(0)));
  EXPECT_FALSE(h.on_probe(9, ProbeResult::fail, at(0)));
  EXPECT_FALSE(h.on_probe(9, ProbeResult::loading, at(0)));
  EXPECT_FALSE(h.on_traffic_failure(9, at(0)));
  h.on_traffic_success(9);
  h.set_thresholds(9, {});
  h.remove(9);
  EXPECT_FALSE(h.drain(9));
  EXPECT_FALSE(h.undrain(9));
  EXPECT_FALSE(h.mark_gone(9));
  EXPECT_EQ(h.consecutive_failures(9), 0u);
  EXPECT_EQ(h.ejections(9), 0u);
  EXPECT_EQ(h.backoff(9), milliseconds{0});
  // A stale probe loop gets the default interval, never "due now" (no spinning).
  EXPECT_GE(h.next_probe_at(9, at(0), 0.0), at(0) + milliseconds{4'500});
  EXPECT_FALSE(h.contains(9));
}

// ---- active probe thresholds ----

TEST(HealthProbe, JoiningBecomesHealthyAfterHealthyAfterPasses) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0));
  EXPECT_FALSE(h.on_probe(1, ProbeResult::pass, at(0)));
  EXPECT_EQ(h.state(1), State::joining);
  auto t = h.on_probe(1, ProbeResult::pass, at(5));
  expect_transition(t, 1, State::joining, State::healthy);
  EXPECT_EQ(t->reason, "probe passed 2 times");
  EXPECT_EQ(h.state(1), State::healthy);
}

TEST(HealthProbe, HealthyBecomesUnhealthyAfterUnhealthyAfterFailures) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  EXPECT_FALSE(h.on_probe(1, ProbeResult::fail, at(0)));
  EXPECT_FALSE(h.on_probe(1, ProbeResult::fail, at(5)));
  EXPECT_EQ(h.consecutive_failures(1), 2u);
  auto t = h.on_probe(1, ProbeResult::fail, at(10));
  expect_transition(t, 1, State::healthy, State::unhealthy);
  EXPECT_EQ(t->reason, "probe failed 3 times");
}

TEST(HealthProbe, JoiningBecomesUnhealthyAfterFailures) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0));
  auto seen = probe(h, 1, ProbeResult::fail, 3);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].from, State::joining);
  EXPECT_EQ(seen[0].to, State::unhealthy);
}

TEST(HealthProbe, UnhealthyRecoversAfterPasses) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::unhealthy);
  auto seen = probe(h, 1, ProbeResult::pass, 5);
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].from, State::unhealthy);
  EXPECT_EQ(seen[0].to, State::healthy);
}

TEST(HealthProbe, CustomThresholdsAreHonoured) {
  HealthTracker h;
  Thresholds th;
  th.healthy_after = 4;
  th.unhealthy_after = 1;
  h.add(1, kModel, th, at(0));
  EXPECT_EQ(probe(h, 1, ProbeResult::pass, 3).size(), 0u);
  EXPECT_EQ(probe(h, 1, ProbeResult::pass, 1).size(), 1u);
  EXPECT_EQ(h.state(1), State::healthy);
  expect_transition(h.on_probe(1, ProbeResult::fail, at(0)), 1, State::healthy, State::unhealthy);
}

TEST(HealthProbe, ZeroThresholdsActLikeOne) {
  HealthTracker h;
  Thresholds th;
  th.healthy_after = 0;
  th.unhealthy_after = 0;
  h.add(1, kModel, th, at(0));
  EXPECT_EQ(h.state(1), State::joining);
  expect_transition(h.on_probe(1, ProbeResult::pass, at(0)), 1, State::joining, State::healthy);
  expect_transition(h.on_probe(1, ProbeResult::fail, at(1)), 1, State::healthy, State::unhealthy);
}

TEST(HealthProbe, PassResetsFailureStreak) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  probe(h, 1, ProbeResult::fail, 2);
  h.on_probe(1, ProbeResult::pass, at(0));
  EXPECT_EQ(h.consecutive_failures(1), 0u);
  EXPECT_EQ(probe(h, 1, ProbeResult::fail, 2).size(), 0u);
  EXPECT_EQ(h.state(1), State::healthy);
  EXPECT_EQ(probe(h, 1, ProbeResult::fail, 1).size(), 1u);
}

TEST(HealthProbe, FailureResetsPassStreak) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::unhealthy);
  h.on_probe(1, ProbeResult::pass, at(0));
  h.on_probe(1, ProbeResult::fail, at(1));
  EXPECT_FALSE(h.on_probe(1, ProbeResult::pass, at(2)));
  EXPECT_EQ(h.state(1), State::unhealthy);
  EXPECT_TRUE(h.on_probe(1, ProbeResult::pass, at(3)));
}

TEST(HealthProbe, TransitionsAreReportedExactlyOnce) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0));
  EXPECT_EQ(probe(h, 1, ProbeResult::pass, 10).size(), 1u);
  EXPECT_EQ(probe(h, 1, ProbeResult::fail, 10).size(), 1u);
  EXPECT_EQ(probe(h, 1, ProbeResult::pass, 10).size(), 1u);
  EXPECT_EQ(probe(h, 1, ProbeResult::loading, 10).size(), 1u);
  EXPECT_EQ(h.state(1), State::joining);
}

TEST(HealthProbe, ActiveProbesMayTakeDownTheLastHealthy) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  EXPECT_EQ(probe(h, 1, ProbeResult::fail, 3).size(), 1u);
  EXPECT_EQ(h.state(1), State::unhealthy);
  EXPECT_EQ(h.healthy_count(kModel), 0u);
  EXPECT_EQ(h.ejections(1), 0u);  // not a passive ejection: no back-off
}

TEST(HealthProbe, RaisingThresholdsLaterTakesEffectAtNextEvent) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  probe(h, 1, ProbeResult::fail, 2);
  Thresholds th;
  th.unhealthy_after = 5;
  h.set_thresholds(1, th);
  EXPECT_EQ(probe(h, 1, ProbeResult::fail, 2).size(), 0u);
  EXPECT_EQ(probe(h, 1, ProbeResult::fail, 1).size(), 1u);  // fifth consecutive failure
}

// ---- loading ----

TEST(HealthLoading, JoiningStaysJoiningAndIsNotAFailure) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0));
  EXPECT_EQ(probe(h, 1, ProbeResult::loading, 20).size(), 0u);
  EXPECT_EQ(h.state(1), State::joining);
  EXPECT_EQ(h.consecutive_failures(1), 0u);
}

TEST(HealthLoading, BreaksBothStreaks) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0));
  probe(h, 1, ProbeResult::fail, 2);
  h.on_probe(1, ProbeResult::loading, at(0));
  EXPECT_EQ(h.consecutive_failures(1), 0u);
  EXPECT_EQ(probe(h, 1, ProbeResult::fail, 2).size(), 0u);  // streak restarted
  h.on_probe(1, ProbeResult::pass, at(0));
  h.on_probe(1, ProbeResult::loading, at(0));
  EXPECT_FALSE(h.on_probe(1, ProbeResult::pass, at(0)));  // pass streak restarted
  EXPECT_TRUE(h.on_probe(1, ProbeResult::pass, at(0)));
}

TEST(HealthLoading, HealthyReplicaThatLoadsHasRestarted) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  auto t = h.on_probe(1, ProbeResult::loading, at(0));
  expect_transition(t, 1, State::healthy, State::joining);
  EXPECT_EQ(h.healthy_count(kModel), 0u);
  EXPECT_EQ(probe(h, 1, ProbeResult::pass, 2).size(), 1u);
  EXPECT_EQ(h.state(1), State::healthy);
}

TEST(HealthLoading, UnhealthyReplicaThatLoadsIsJoining) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::unhealthy);
  expect_transition(h.on_probe(1, ProbeResult::loading, at(0)), 1, State::unhealthy,
                    State::joining);
}

// ---- passive ejection ----

TEST(HealthEjection, EjectsAtExactlyEjectAfter) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.add(2, kModel, {}, at(0), State::healthy);
  EXPECT_FALSE(h.on_traffic_failure(1, at(1)));
  EXPECT_FALSE(h.on_traffic_failure(1, at(1)));
  EXPECT_EQ(h.state(1), State::healthy);
  EXPECT_EQ(h.consecutive_failures(1), 2u);
  auto t = h.on_traffic_failure(1, at(1));
  expect_transition(t, 1, State::healthy, State::unhealthy);
  EXPECT_EQ(t->reason, "3 consecutive traffic failures");
  EXPECT_EQ(h.ejections(1), 1u);
  EXPECT_EQ(h.healthy_count(kModel), 1u);
  // Further failures on in-flight requests do not report again.
  EXPECT_EQ(traffic_failures(h, 1, 5).size(), 0u);
}

TEST(HealthEjection, CustomEjectAfter) {
  HealthTracker h;
  Thresholds th;
  th.eject_after = 1;
  h.add(1, kModel, th, at(0), State::healthy);
  h.add(2, kModel, th, at(0), State::healthy);
  expect_transition(h.on_traffic_failure(1, at(0)), 1, State::healthy, State::unhealthy);
}

TEST(HealthEjection, SuccessResetsTrafficFailures) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.add(2, kModel, {}, at(0), State::healthy);
  traffic_failures(h, 1, 2);
  h.on_traffic_success(1);
  EXPECT_EQ(h.consecutive_failures(1), 0u);
  EXPECT_EQ(traffic_failures(h, 1, 2).size(), 0u);
  EXPECT_EQ(h.state(1), State::healthy);
  EXPECT_EQ(traffic_failures(h, 1, 1).size(), 1u);
}

TEST(HealthEjection, NeverEjectsTheLastHealthy) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.add(2, kModel, {}, at(0), State::unhealthy);
  h.add(3, kOther, {}, at(0), State::healthy);  // another model's replica does not count
  EXPECT_EQ(traffic_failures(h, 1, 50).size(), 0u);
  EXPECT_EQ(h.state(1), State::healthy);
  EXPECT_EQ(h.ejections(1), 0u);
  EXPECT_EQ(h.consecutive_failures(1), 50u);
}

TEST(HealthEjection, LastStaysAfterTheOtherWasEjected) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.add(2, kModel, {}, at(0), State::healthy);
  EXPECT_EQ(traffic_failures(h, 1, 3).size(), 1u);
  EXPECT_EQ(h.state(1), State::unhealthy);
  EXPECT_EQ(traffic_failures(h, 2, 10).size(), 0u);
  EXPECT_EQ(h.state(2), State::healthy);
  EXPECT_EQ(h.healthy_count(kModel), 1u);
}

TEST(HealthEjection, LastStaysAfterTheOtherFailedProbes) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.add(2, kModel, {}, at(0), State::healthy);
  traffic_failures(h, 1, 2);
  probe(h, 2, ProbeResult::fail, 3);
  EXPECT_EQ(h.state(2), State::unhealthy);
  EXPECT_EQ(traffic_failures(h, 1, 5).size(), 0u);
  EXPECT_EQ(h.state(1), State::healthy);
}

TEST(HealthEjection, EjectsOnceAnotherBecomesHealthy) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.add(2, kModel, {}, at(0));
  traffic_failures(h, 1, 5);
  EXPECT_EQ(h.state(1), State::healthy);
  probe(h, 2, ProbeResult::pass, 2);
  ASSERT_EQ(h.state(2), State::healthy);
  // Still over the threshold: the next failure ejects now that a healthy sibling exists.
  expect_transition(h.on_traffic_failure(1, at(9)), 1, State::healthy, State::unhealthy);
}

TEST(HealthEjection, FailuresOnNonHealthyStatesDoNotTransition) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0));
  h.add(2, kModel, {}, at(0), State::draining);
  h.add(3, kModel, {}, at(0), State::unhealthy);
  h.add(4, kModel, {}, at(0), State::healthy);
  h.add(5, kModel, {}, at(0), State::healthy);
  for (ReplicaId id : {1, 2, 3}) {
    EXPECT_EQ(traffic_failures(h, id, 10).size(), 0u) << id;
  }
  EXPECT_EQ(h.state(1), State::joining);
  EXPECT_EQ(h.state(2), State::draining);
  EXPECT_EQ(h.state(3), State::unhealthy);
}

TEST(HealthEjection, RecoveryAfterEjectionNeedsProbes) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.add(2, kModel, {}, at(0), State::healthy);
  traffic_failures(h, 1, 3);
  ASSERT_EQ(h.state(1), State::unhealthy);
  EXPECT_FALSE(h.on_probe(1, ProbeResult::pass, at(5)));
  expect_transition(h.on_probe(1, ProbeResult::pass, at(10)), 1, State::unhealthy, State::healthy);
  EXPECT_EQ(h.consecutive_failures(1), 0u);
  // A fresh start: ejection needs eject_after new failures again.
  EXPECT_EQ(traffic_failures(h, 1, 2).size(), 0u);
  EXPECT_EQ(h.state(1), State::healthy);
}

// ---- back-off ----

// Ejects replica 1 (replica 2 keeps it from being the last) at `now`, then proves it healthy
// again by probes without any successful traffic in between.
void eject_and_reprove(HealthTracker& h, TimePoint now) {
  ASSERT_EQ(traffic_failures(h, 1, 3, now).size(), 1u);
  ASSERT_EQ(h.state(1), State::unhealthy);
  ASSERT_EQ(probe(h, 1, ProbeResult::pass, 2).size(), 1u);
  ASSERT_EQ(h.state(1), State::healthy);
}

HealthTracker pair_without_jitter() {
  HealthTracker h;
  Thresholds th;
  th.jitter = 0.0;
  h.add(1, kModel, th, at(0), State::healthy);
  h.add(2, kModel, th, at(0), State::healthy);
  return h;
}

TEST(HealthBackoff, NoBackoffBeforeAnyEjection) {
  HealthTracker h = pair_without_jitter();
  EXPECT_EQ(h.backoff(1), milliseconds{0});
  EXPECT_EQ(h.next_probe_at(1, at(10), 0.5), at(15));
}

TEST(HealthBackoff, FirstEjectionWaitsBase) {
  HealthTracker h = pair_without_jitter();
  traffic_failures(h, 1, 3, at(100));
  EXPECT_EQ(h.ejections(1), 1u);
  EXPECT_EQ(h.backoff(1), seconds(5));
  // Probed just before the ejection: the back-off wins over the normal interval.
  EXPECT_EQ(h.next_probe_at(1, at(99), 0.5), at(105));
  EXPECT_EQ(h.next_probe_at(1, at(100), 0.5), at(105));
  // Once past the back-off, the normal interval applies.
  EXPECT_EQ(h.next_probe_at(1, at(105), 0.5), at(110));
}

TEST(HealthBackoff, DoublesOnConsecutiveEjectionsAndCapsAtMax) {
  HealthTracker h = pair_without_jitter();
  const std::vector<int> expected = {5, 10, 20, 40, 80, 160, 300, 300, 300, 300};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const TimePoint now = at(1000 * static_cast<int>(i + 1));
    eject_and_reprove(h, now);
    EXPECT_EQ(h.ejections(1), i + 1);
    EXPECT_EQ(h.backoff(1), seconds(expected[i])) << "ejection " << i + 1;
  }
  // The cap also holds on the probe schedule.
  traffic_failures(h, 1, 3, at(50'000));
  EXPECT_EQ(h.next_probe_at(1, at(50'000), 0.0), at(50'300));
}

TEST(HealthBackoff, ManyEjectionsDoNotOverflow) {
  HealthTracker h = pair_without_jitter();
  for (int i = 0; i < 200; ++i) {
    eject_and_reprove(h, at(i));
  }
  EXPECT_EQ(h.backoff(1), seconds(300));
}

TEST(HealthBackoff, CustomBaseAndMax) {
  HealthTracker h;
  Thresholds th;
  th.backoff_base = milliseconds{1'000};
  th.backoff_max = milliseconds{3'000};
  h.add(1, kModel, th, at(0), State::healthy);
  h.add(2, kModel, th, at(0), State::healthy);
  eject_and_reprove(h, at(0));
  EXPECT_EQ(h.backoff(1), seconds(1));
  eject_and_reprove(h, at(0));
  EXPECT_EQ(h.backoff(1), seconds(2));
  eject_and_reprove(h, at(0));
  EXPECT_EQ(h.backoff(1), seconds(3));
}

TEST(HealthBackoff, ResetsAfterRecoveryWithTraffic) {
  HealthTracker h = pair_without_jitter();
  eject_and_reprove(h, at(0));
  eject_and_reprove(h, at(100));
  eject_and_reprove(h, at(200));
  EXPECT_EQ(h.backoff(1), seconds(20));
  h.on_traffic_success(1);  // recovered: served a real request
  EXPECT_EQ(h.ejections(1), 0u);
  EXPECT_EQ(h.backoff(1), milliseconds{0});
  traffic_failures(h, 1, 3, at(300));
  EXPECT_EQ(h.backoff(1), seconds(5));
}

TEST(HealthBackoff, SuccessWhileEjectedDoesNotReset) {
  HealthTracker h = pair_without_jitter();
  traffic_failures(h, 1, 3, at(0));
  h.on_traffic_success(1);  // a late in-flight request finishing
  EXPECT_EQ(h.ejections(1), 1u);
  EXPECT_EQ(h.next_probe_at(1, at(0), 0.0), at(5));
}

TEST(HealthBackoff, BecomingHealthyEndsTheGate) {
  HealthTracker h = pair_without_jitter();
  eject_and_reprove(h, at(0));
  eject_and_reprove(h, at(100));  // back-off 10s, ejected at 100 and proven again
  EXPECT_EQ(h.next_probe_at(1, at(101), 0.0), at(106));  // normal interval, no gate
}

// ---- jitter ----

TEST(HealthJitter, BoundsAtTheExtremes) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);  // interval 5s, jitter 10%
  EXPECT_EQ(h.next_probe_at(1, at(10), 0.0), at(10) + milliseconds{4'500});
  const TimePoint high = h.next_probe_at(1, at(10), 0.999);
  EXPECT_LT(high, at(10) + milliseconds{5'500});
  EXPECT_GT(high, at(10) + milliseconds{5'498});
  EXPECT_EQ(h.next_probe_at(1, at(10), 0.5), at(15));
}

TEST(HealthJitter, OutOfRangeUnitsAreClamped) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  EXPECT_EQ(h.next_probe_at(1, at(0), -3.0), at(0) + milliseconds{4'500});
  EXPECT_LE(h.next_probe_at(1, at(0), 7.0), at(0) + milliseconds{5'500});
}

TEST(HealthJitter, ZeroJitterIsExact) {
  HealthTracker h;
  Thresholds th;
  th.jitter = 0.0;
  th.interval = milliseconds{2'000};
  h.add(1, kModel, th, at(0));
  EXPECT_EQ(h.next_probe_at(1, at(0), 0.0), at(2));
  EXPECT_EQ(h.next_probe_at(1, at(0), 0.999), at(2));
}

TEST(HealthJitter, MeanIsTheIntervalAndAllWithinBounds) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  std::mt19937 rng(42);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  constexpr int kSamples = 20'000;
  double sum_ms = 0;
  for (int i = 0; i < kSamples; ++i) {
    const auto d = h.next_probe_at(1, at(0), unit(rng)) - at(0);
    const double ms = std::chrono::duration<double, std::milli>(d).count();
    ASSERT_GE(ms, 4'500.0);
    ASSERT_LT(ms, 5'500.0);
    sum_ms += ms;
  }
  EXPECT_NEAR(sum_ms / kSamples, 5'000.0, 10.0);
}

// ---- drain / undrain / gone ----

TEST(HealthDrain, DrainFromEveryLiveState) {
  for (State s : {State::joining, State::healthy, State::unhealthy}) {
    HealthTracker h;
    h.add(1, kModel, {}, at(0), s);
    expect_transition(h.drain(1), 1, s, State::draining);
    EXPECT_EQ(h.state(1), State::draining);
    EXPECT_FALSE(h.drain(1));  // already draining: reported once
  }
}

TEST(HealthDrain, DrainingIsNotHealthy) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.drain(1);
  EXPECT_EQ(h.healthy_count(kModel), 0u);
}

TEST(HealthDrain, ProbesAreIgnoredWhileDraining) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.drain(1);
  EXPECT_EQ(probe(h, 1, ProbeResult::fail, 5).size(), 0u);
  EXPECT_EQ(probe(h, 1, ProbeResult::pass, 5).size(), 0u);
  EXPECT_EQ(probe(h, 1, ProbeResult::loading, 5).size(), 0u);
  EXPECT_EQ(h.state(1), State::draining);
}

TEST(HealthDrain, UndrainGoesToJoiningAndNeedsProof) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.on_probe(1, ProbeResult::pass, at(0));
  h.drain(1);
  expect_transition(h.undrain(1), 1, State::draining, State::joining);
  EXPECT_FALSE(h.undrain(1));
  EXPECT_FALSE(h.on_probe(1, ProbeResult::pass, at(1)));  // streak restarted at undrain
  expect_transition(h.on_probe(1, ProbeResult::pass, at(2)), 1, State::joining, State::healthy);
}

TEST(HealthDrain, UndrainOnlyFromDraining) {
  HealthTracker h;
  for (State s : {State::joining, State::healthy, State::unhealthy, State::gone}) {
    h.add(1, kModel, {}, at(0), s);
    EXPECT_FALSE(h.undrain(1));
    EXPECT_EQ(h.state(1), s);
  }
}

TEST(HealthGone, MarkGoneFromAnyStateOnce) {
  for (State s : {State::joining, State::healthy, State::unhealthy, State::draining}) {
    HealthTracker h;
    h.add(1, kModel, {}, at(0), s);
    expect_transition(h.mark_gone(1), 1, s, State::gone);
    EXPECT_FALSE(h.mark_gone(1));
    EXPECT_TRUE(h.contains(1));  // the owner removes it
    h.remove(1);
    EXPECT_FALSE(h.contains(1));
  }
}

TEST(HealthGone, GoneIsFinal) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0), State::healthy);
  h.add(2, kModel, {}, at(0), State::healthy);
  h.mark_gone(1);
  EXPECT_FALSE(h.drain(1));
  EXPECT_FALSE(h.undrain(1));
  EXPECT_EQ(probe(h, 1, ProbeResult::pass, 5).size(), 0u);
  EXPECT_EQ(probe(h, 1, ProbeResult::loading, 5).size(), 0u);
  EXPECT_EQ(traffic_failures(h, 1, 5).size(), 0u);
  EXPECT_EQ(h.state(1), State::gone);
  EXPECT_EQ(h.healthy_count(kModel), 1u);
}

// ---- a longer scenario: every change reported exactly once ----

TEST(HealthScenario, LifecycleReportsEachChangeOnce) {
  HealthTracker h;
  h.add(1, kModel, {}, at(0));
  h.add(2, kModel, {}, at(0), State::healthy);
  std::vector<Transition> log;
  auto record = [&](std::optional<Transition> t) {
    if (t) {
      log.push_back(*t);
    }
  };
  for (int i = 0; i < 4; ++i) {
    record(h.on_probe(1, ProbeResult::loading, at(i)));
  }
  for (int i = 0; i < 4; ++i) {
    record(h.on_probe(1, ProbeResult::pass, at(4 + i)));
  }
  for (int i = 0; i < 6; ++i) {
    record(h.on_traffic_failure(1, at(10)));
  }
  for (int i = 0; i < 4; ++i) {
    record(h.on_probe(1, ProbeResult::pass, at(20 + i)));
  }
  record(h.drain(1));
  record(h.drain(1));
  record(h.undrain(1));
  record(h.mark_gone(1));
  record(h.mark_gone(1));
  const std::vector<std::pair<State, State>> expected = {
      {State::joining, State::healthy},   {State::healthy, State::unhealthy},
      {State::unhealthy, State::healthy}, {State::healthy, State::draining},
      {State::draining, State::joining},  {State::joining, State::gone},
  };
  ASSERT_EQ(log.size(), expected.size());
  for (std::size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i].id, 1u);
    EXPECT_EQ(log[i].from, expected[i].first) << i;
    EXPECT_EQ(log[i].to, expected[i].second) << i;
    EXPECT_NE(log[i].from, log[i].to);
  }
}

}  // namespace
}  // namespace fg::health

namespace fg::health {
namespace {

TEST(HealthMarkUnhealthy, MovesOnceAndProbesMustProveItAgain) {
  HealthTracker tracker;
  const TimePoint t0{};
  Thresholds th;
  th.healthy_after = 2;
  tracker.add(1, "m", th, t0, State::healthy);
  auto t = tracker.mark_unhealthy(1, "missed 3 heartbeats");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->to, State::unhealthy);
  EXPECT_FALSE(tracker.mark_unhealthy(1, "again").has_value());
  EXPECT_FALSE(tracker.on_probe(1, ProbeResult::pass, t0).has_value());
  auto back = tracker.on_probe(1, ProbeResult::pass, t0);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->to, State::healthy);
}

TEST(HealthMarkUnhealthy, LeavesDrainingAndUnknownAlone) {
  HealthTracker tracker;
  tracker.add(1, "m", Thresholds{}, TimePoint{}, State::healthy);
  tracker.drain(1);
  EXPECT_FALSE(tracker.mark_unhealthy(1, "x").has_value());
  EXPECT_EQ(tracker.state(1), State::draining);
  EXPECT_FALSE(tracker.mark_unhealthy(42, "x").has_value());
}

}  // namespace
}  // namespace fg::health

namespace fg::health {
namespace {

// A held replica (URL challenge pending) keeps its state whatever the probes say; the release
// applies what they proved.
TEST(HealthTrackerHold, ProbesAreCountedButChangeNothingUntilRelease) {
  HealthTracker h;
  Thresholds th;
  th.healthy_after = 2;
  th.unhealthy_after = 3;
  h.add(1, "m", th, at(0));
  h.hold(1);
  EXPECT_TRUE(probe(h, 1, ProbeResult::pass, 5).empty());
  EXPECT_EQ(h.state(1), State::joining);
  auto t = h.release(1);
  ASSERT_TRUE(t);
  EXPECT_EQ(t->to, State::healthy);
  EXPECT_FALSE(h.release(1)) << "released once";

  h.add(2, "m", th, at(0));
  h.hold(2);
  EXPECT_TRUE(probe(h, 2, ProbeResult::fail, 5).empty());
  EXPECT_EQ(h.state(2), State::joining) << "a held replica does not go unhealthy either";
  EXPECT_FALSE(h.release(2)) << "nothing proven: still joining";
  EXPECT_EQ(h.state(2), State::joining);
  ASSERT_EQ(probe(h, 2, ProbeResult::pass, 2).size(), 1u);
  EXPECT_EQ(h.state(2), State::healthy);

  h.add(3, "m", th, at(0));
  h.hold(3);
  probe(h, 3, ProbeResult::pass, 1);
  EXPECT_FALSE(h.release(3)) << "one pass of two";
  ASSERT_EQ(probe(h, 3, ProbeResult::pass, 1).size(), 1u);
  EXPECT_EQ(h.state(3), State::healthy);
}

}  // namespace
}  // namespace fg::health
