// The routing rules of issue 13 on the Scheduler: expected-finish choice, cache affinity, holds,
// the overtaking bound, bands, shedding, fair shares and group caps. scheduler_test.cpp keeps
// today's (least_loaded) behaviour.

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "orchestrator/scheduling/scheduler.hpp"
#include "tests/orchestrator/scheduling/routing_test_util.hpp"

namespace fg::scheduling {
namespace {

using testing::at_seconds;
using testing::review;
using Outcome = Scheduler::Outcome;

const std::string kModel = "qwen";

RoutingOptions ef() {
  RoutingOptions o;
  o.policy = RoutingPolicy::expected_finish;
  o.exploration = 0;
  o.default_prefill_tps = 50;
  o.default_decode_tps = 10;
  o.hold_margin = 0.25;  // the arithmetic below is written for these, whatever the defaults
  o.hold_min_gain = std::chrono::milliseconds(1000);
  return o;
}

RoutingOptions least_loaded() {
  RoutingOptions o;
  o.policy = RoutingPolicy::least_loaded;
  return o;
}

// A request of `tokens` prompt tokens of its own (nothing shared).
Request plain(std::uint64_t id, std::uint32_t tokens) {
  return review(0, 0, id, tokens);
}

ReplicaId granted(Scheduler& s, WaiterId w, Request r, double t = 0) {
  Scheduler::Admission a = s.admit(w, kModel, at_seconds(t), std::move(r));
  EXPECT_EQ(a.outcome, Outcome::granted) << "waiter " << w;
  return a.replica;
}

void queued(Scheduler& s, WaiterId w, Request r, double t = 0) {
  EXPECT_EQ(s.admit(w, kModel, at_seconds(t), std::move(r)).outcome, Outcome::queued)
      << "waiter " << w;
}

using Pairs = std::vector<std::pair<WaiterId, ReplicaId>>;

Pairs pairs(const std::vector<Grant>& grants) {
  Pairs out;
  for (const Grant& g : grants) {
    out.emplace_back(g.waiter, g.replica);
  }
  return out;
}

double seconds_of(TimePoint t) {
  return std::chrono::duration<double>(t - TimePoint{}).count();
}

// Phone 1 fast (100 prompt tok/s, 20 decode tok/s), phone 2 slow (10 and 5).
Scheduler fast_and_slow(RoutingOptions o = ef()) {
  Scheduler s(100, o);
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  s.set_measured_speeds(1, 100, 20);
  s.set_measured_speeds(2, 10, 5);
  return s;
}

// ---------------------------------------------------------------------------------------------
// Choice of replica

TEST(ExpectedFinish, NewcomerTakesTheFreeReplicaThatFinishesItFirst) {
  Scheduler s = fast_and_slow();
  EXPECT_EQ(granted(s, 1, plain(1, 1000)), 1u);
  // least_loaded's rotation would have taken replica 1 and then 2 whatever their speeds.
  Scheduler ll = fast_and_slow(least_loaded());
  EXPECT_EQ(granted(ll, 1, plain(1, 1000)), 1u);
  EXPECT_EQ(granted(ll, 2, plain(2, 1000)), 2u);
}

TEST(ExpectedFinish, CachedPrefixBeatsRawSpeed) {
  Scheduler s(100, ef());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  s.set_measured_speeds(1, 100, 10);
  s.set_measured_speeds(2, 50, 10);
  // Phone 2 reads the fraud instructions once...
  Request first = review(1, 5000, 1, 2000);
  first.exclude = {1};
  EXPECT_EQ(granted(s, 1, first), 2u);
  s.release(2, at_seconds(1));
  // ...then ~2,000 new tokens at 50 tok/s (40 s) beat 7,000 at 100 tok/s (70 s).
  EXPECT_EQ(granted(s, 2, review(1, 5000, 2, 2000), 1), 2u);
  // Other instructions: the faster phone.
  EXPECT_EQ(granted(s, 3, review(2, 5000, 3, 2000), 1), 1u);
}

TEST(ExpectedFinish, FreedSlotGoesToTheWaiterItServesCheapest) {
  Scheduler s(100, ef());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  EXPECT_EQ(granted(s, 1, review(1, 5000, 1, 2000)), 1u);
  queued(s, 2, review(2, 5000, 2, 2000), 1);
  queued(s, 3, review(1, 5000, 3, 2000), 2);
  EXPECT_EQ(pairs(s.release(1, at_seconds(10))), (Pairs{{3, 1}}));
  EXPECT_EQ(s.overtaken(2), 1u);
  EXPECT_EQ(pairs(s.release(1, at_seconds(20))), (Pairs{{2, 1}}));
}

// Three equal phones (100 prompt tok/s, 20 decode) reading instructions 1, `second`, 1; all busy
// until 70.75 s. Waiting: waiter 4 with instructions `fourth`, then waiter 5 with instructions 1.
Scheduler three_busy(std::uint64_t second, std::uint64_t fourth, RoutingOptions o = ef()) {
  Scheduler s(100, o);
  s.add_model(kModel);
  for (ReplicaId r = 1; r <= 3; ++r) {
    s.add_replica(r, kModel, 1);
    s.set_measured_speeds(r, 100, 20);
  }
  EXPECT_EQ(granted(s, 1, review(1, 5000, 1, 2000)), 1u);
  EXPECT_EQ(granted(s, 2, review(second, 5000, 2, 2000)), 2u);
  EXPECT_EQ(granted(s, 3, review(1, 5000, 3, 2000)), 3u);
  queued(s, 4, review(fourth, 5000, 4, 2000), 1);
  queued(s, 5, review(1, 5000, 5, 2000), 2);
  return s;
}

TEST(ExpectedFinish, AffinityYieldsToAnOlderWaiterWithNowhereBetterToGo) {
  // Phone 3 frees at 60 s. Waiter 5 would take 20.8 s there (instructions cached), and phone 1
  // or 2, which hold them too, free in 10.75 s: 31.6 s. Waiter 4's instructions are nowhere:
  // 70.75 s here, 81.5 s behind any busy phone. Giving phone 3 to waiter 5 would leave waiter 4
  // to wait for a phone that none of its kind will hold until it is due.
  Scheduler s = three_busy(2, 3);
  EXPECT_EQ(pairs(s.release(3, at_seconds(60))), (Pairs{{4, 3}}));
  EXPECT_EQ(s.overtaken(5), 0u);  // served after an older waiter: FIFO, not overtaken
  EXPECT_EQ(pairs(s.release(1, at_seconds(70))), (Pairs{{5, 1}}));
}

TEST(ExpectedFinish, AffinityKeepsItsSlotWhenTheOlderWaiterHasABusyReplicaToWaitFor) {
  // Waiter 4's instructions (2) are on phone 2, free in 10.75 s: 31.6 s there beats 70.75 s on
  // phone 3, so the cached waiter 5 keeps phone 3 and waiter 4 counts an overtake.
  Scheduler s = three_busy(2, 2);
  EXPECT_EQ(pairs(s.release(3, at_seconds(60))), (Pairs{{5, 3}}));
  EXPECT_EQ(s.overtaken(4), 1u);
}

TEST(ExpectedFinish, AffinityYieldCanBeTurnedOff) {
  RoutingOptions o = ef();
  o.affinity_yield = false;
  Scheduler s = three_busy(2, 3, o);
  EXPECT_EQ(pairs(s.release(3, at_seconds(60))), (Pairs{{5, 3}}));
  EXPECT_EQ(s.overtaken(4), 1u);
}

TEST(ExpectedFinish, AWaiterIsOvertakenAtMostMaxOvertakesTimes) {
  RoutingOptions o = ef();
  o.max_overtakes = 2;
  Scheduler s(100, o);
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  granted(s, 1, review(1, 5000, 1, 2000));
  queued(s, 2, review(2, 5000, 2, 2000));
  for (WaiterId w = 3; w <= 5; ++w) {
    queued(s, w, review(1, 5000, w, 2000));
  }
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{3, 1}}));
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{4, 1}}));
  EXPECT_EQ(s.overtaken(2), 2u);
  // Due: it goes first although waiter 5 would be cheaper.
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{2, 1}}));
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{5, 1}}));
}

TEST(ExpectedFinish, OnlyOlderWaitersThatCouldUseTheSlotAreOvertaken) {
  Scheduler s(100, ef());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  granted(s, 1, review(1, 5000, 1, 2000));  // replica 1 (rotation)
  granted(s, 2, review(2, 5000, 2, 2000));  // replica 2
  Request retry = review(3, 5000, 3, 2000);
  retry.exclude = {1};
  queued(s, 3, retry);
  queued(s, 4, review(1, 5000, 4, 2000));
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{4, 1}}));
  EXPECT_EQ(s.overtaken(3), 0u);  // it could not have used replica 1
}

// ---------------------------------------------------------------------------------------------
// Holding a request for a busy replica

TEST(ExpectedFinish, WaitsForABusyReplicaExpectedToFinishItSooner) {
  Scheduler s = fast_and_slow();
  granted(s, 1, plain(1, 1000));  // fast: 10 s + 15 decode steps / 20 = 10.75 s
  // On the slow phone 1000 / 10 + 15 / 5 = 103 s; behind the fast one 10.75 + 10.75 = 21.5 s.
  queued(s, 2, plain(2, 1000));
  EXPECT_TRUE(s.held(2));
  EXPECT_EQ(s.in_flight(2), 0u);
  EXPECT_EQ(s.free_slots(kModel), 1u);
  ASSERT_TRUE(s.next_wakeup());
  // Held until the fast phone's overrun eats the gain: 10.75 + (103 - 1) / 1.25 - 10.75.
  EXPECT_NEAR(seconds_of(*s.next_wakeup()), 81.6, 1e-6);
  EXPECT_EQ(pairs(s.release(1, at_seconds(11))), (Pairs{{2, 1}}));
  EXPECT_FALSE(s.held(2));
  EXPECT_EQ(s.next_wakeup(), std::nullopt);
}

TEST(ExpectedFinish, AnAnswerOfNTokensCostsNMinusOneDecodeSteps) {
  // The first token ends prefill; decode adds one step per later token (llama-server's
  // n_gen_steps, which the decode speed is learned from). One-token answers: no decode at all.
  Scheduler s = fast_and_slow();
  Request one = plain(1, 1000);
  one.max_tokens = 1;
  granted(s, 1, one);  // fast: 10 s
  Request other = plain(2, 1000);
  other.max_tokens = 1;
  queued(s, 2, other);  // slow: 100 s; behind the fast one 20 s
  EXPECT_TRUE(s.held(2));
  // Held until the fast phone's overrun eats the gain: 10 + (100 - 1) / 1.25 - 10.
  EXPECT_NEAR(seconds_of(*s.next_wakeup()), 79.2, 1e-6);
}

TEST(ExpectedFinish, HoldEndsWhenTheBusyReplicaOverrunsTooLong) {
  Scheduler s = fast_and_slow();
  granted(s, 1, plain(1, 1000));
  queued(s, 2, plain(2, 1000));
  EXPECT_TRUE(s.tick(at_seconds(50)).empty());
  EXPECT_TRUE(s.held(2));
  const TimePoint wake = *s.next_wakeup();
  EXPECT_EQ(pairs(s.tick(wake)), (Pairs{{2, 2}}));
  EXPECT_EQ(s.next_wakeup(), std::nullopt);
}

TEST(ExpectedFinish, HoldNeverOutlastsTheTimeTheFreeReplicaWouldHaveTaken) {
  Scheduler s = fast_and_slow();
  granted(s, 1, plain(1, 4000));  // fast busy until 40.75 s
  queued(s, 2, plain(2, 1000));   // 40.75 + 10.75 = 51.5 s there, 103 s on the slow phone
  EXPECT_TRUE(s.held(2));
  // The overrun would allow until 111.6 s, but waiting longer than 103 s is never a gain.
  EXPECT_NEAR(seconds_of(*s.next_wakeup()), 103.0, 1e-6);
}

TEST(ExpectedFinish, OneHeldWaiterPerBusySlot) {
  Scheduler s = fast_and_slow();
  granted(s, 1, plain(1, 1000));
  queued(s, 2, plain(2, 1000));
  EXPECT_TRUE(s.held(2));
  // The fast phone's next slot is promised: the next request takes the slow phone.
  EXPECT_EQ(granted(s, 3, plain(3, 1000)), 2u);
  EXPECT_TRUE(s.held(2));
  // With nothing free left, nobody is held back any more.
  EXPECT_TRUE(s.tick(at_seconds(1)).empty());
  EXPECT_FALSE(s.held(2));
  EXPECT_EQ(pairs(s.release(1, at_seconds(11))), (Pairs{{2, 1}}));
}

TEST(ExpectedFinish, NoHoldWithoutEnoughGain) {
  Scheduler s = fast_and_slow();
  granted(s, 1, plain(1, 9000));  // fast busy for 90.75 s
  EXPECT_EQ(granted(s, 2, plain(2, 1000)), 2u);
  RoutingOptions o = ef();
  o.hold_margin = 0;
  o.hold_min_gain = std::chrono::milliseconds(0);
  Scheduler eager = fast_and_slow(o);
  granted(eager, 1, plain(1, 9000));
  queued(eager, 2, plain(2, 1000));  // 101.5 s behind the fast phone < 103 s
  EXPECT_TRUE(eager.held(2));
}

TEST(ExpectedFinish, NoHoldWhenTheNextInLineWouldWasteTheFreeSlot) {
  // Phone 1 fast (100 prompt tok/s, 20 decode), phone 2 slow (25 and 5); 16-token answers.
  Scheduler s(100, ef());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  s.set_measured_speeds(1, 100, 20);
  s.set_measured_speeds(2, 25, 5);
  // Both read instructions 1: the slow one until 283 s, the fast one until 70.75 s.
  Request first = review(1, 5000, 100, 2000);
  first.exclude = {1};
  EXPECT_EQ(granted(s, 100, first), 2u);
  EXPECT_EQ(granted(s, 1, review(1, 5000, 1, 2000)), 1u);
  queued(s, 2, review(2, 5000, 2, 2000), 1);  // instructions nobody holds
  queued(s, 3, review(1, 5000, 3, 2000), 2);
  // The slow phone frees at 66 s. Waiter 3 costs 2,008 / 25 + 15 / 5 = 83.3 s there; behind the
  // fast phone 4.75 + 20.83 = 25.58 s, a hold by the rule alone. But then the slot goes to waiter
  // 2, 7,000 / 25 + 3 = 283 s there: the slot would lose 199.7 s for waiter 3's 57.7. So waiter 3
  // takes the slow phone, and waiter 2 the fast one when it frees (both done by ~145 s, not 283).
  EXPECT_EQ(pairs(s.complete(100, at_seconds(66), Completion{.ok = false})), (Pairs{{3, 2}}));
  EXPECT_FALSE(s.held(2));
  EXPECT_EQ(pairs(s.complete(1, at_seconds(70.75), Completion{.ok = false})), (Pairs{{2, 1}}));
}

TEST(ExpectedFinish, CancellingAHeldWaiterClearsTheWakeup) {
  Scheduler s = fast_and_slow();
  granted(s, 1, plain(1, 1000));
  queued(s, 2, plain(2, 1000));
  ASSERT_TRUE(s.next_wakeup());
  EXPECT_TRUE(s.cancel(2));
  EXPECT_EQ(s.next_wakeup(), std::nullopt);
}

TEST(ExpectedFinish, SwitchingToLeastLoadedReleasesHolds) {
  Scheduler s = fast_and_slow();
  granted(s, 1, plain(1, 1000));
  queued(s, 2, plain(2, 1000));
  EXPECT_EQ(pairs(s.set_options(least_loaded())), (Pairs{{2, 2}}));
  EXPECT_EQ(s.next_wakeup(), std::nullopt);
}

// ---------------------------------------------------------------------------------------------
// Priorities, shedding, queue limits

TEST(Priorities, HigherBandGoesFirst) {
  for (RoutingPolicy policy : {RoutingPolicy::least_loaded, RoutingPolicy::expected_finish}) {
    RoutingOptions o = ef();
    o.policy = policy;
    Scheduler s(100, o);
    s.add_model(kModel);
    s.add_replica(1, kModel, 1);
    granted(s, 1, review(1, 5000, 1, 2000));
    queued(s, 2, review(1, 5000, 2, 2000));  // band 0, cheap (cached)
    Request urgent = review(2, 5000, 3, 2000);
    urgent.priority = 5;
    queued(s, 3, urgent);
    EXPECT_EQ(s.band_depth(kModel, 0), 1u);
    EXPECT_EQ(s.band_depth(kModel, 5), 1u);
    EXPECT_EQ(pairs(s.release(1)), (Pairs{{3, 1}})) << to_string(policy);
    EXPECT_EQ(pairs(s.release(1)), (Pairs{{2, 1}})) << to_string(policy);
  }
}

TEST(Priorities, DefaultBandIsConfigurable) {
  RoutingOptions o = ef();
  o.default_priority = 3;
  Scheduler s(100, o);
  s.add_model(kModel);
  queued(s, 1, plain(1, 100));
  EXPECT_EQ(s.band_depth(kModel, 3), 1u);
}

TEST(Priorities, SheddableRequestIsRefusedWhenNothingIsFree) {
  for (RoutingPolicy policy : {RoutingPolicy::least_loaded, RoutingPolicy::expected_finish}) {
    RoutingOptions o = ef();
    o.policy = policy;
    Scheduler s(100, o);
    s.add_model(kModel);
    Request optional = plain(9, 1000);
    optional.priority = -1;
    optional.sheddable = true;
    // No replica at all: the longest Retry-After.
    Scheduler::Admission none = s.admit(9, kModel, at_seconds(0), optional);
    EXPECT_EQ(none.outcome, Outcome::queue_full);
    EXPECT_TRUE(none.shed);
    EXPECT_EQ(none.retry_after, std::chrono::seconds(60));
    s.add_replica(1, kModel, 1);
    s.set_measured_speeds(1, 100, 20);
    EXPECT_EQ(granted(s, 1, optional), 1u);  // a free slot: served
    Scheduler::Admission shed = s.admit(2, kModel, at_seconds(0), optional);
    EXPECT_EQ(shed.outcome, Outcome::queue_full);
    EXPECT_TRUE(shed.shed);
    // The slot is expected to free in 10.8 s.
    EXPECT_EQ(shed.retry_after, std::chrono::seconds(11)) << to_string(policy);
    EXPECT_EQ(s.queue_depth(kModel), 0u);
    // A non-sheddable request of the same band waits.
    Request patient = plain(3, 1000);
    patient.priority = -1;
    queued(s, 3, patient);
  }
}

TEST(Priorities, BandQueueLimits) {
  RoutingOptions o = ef();
  o.band_queue_max = {{0, 1}};
  Scheduler s(100, o);
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  granted(s, 1, plain(1, 100));
  queued(s, 2, plain(2, 100));
  Scheduler::Admission full = s.admit(3, kModel, at_seconds(0), plain(3, 100));
  EXPECT_EQ(full.outcome, Outcome::queue_full);
  EXPECT_FALSE(full.shed);
  Request other = plain(4, 100);
  other.priority = 5;
  queued(s, 4, other);
  EXPECT_EQ(s.band_depth(kModel, 0), 1u);
  EXPECT_EQ(s.queue_depth(kModel), 2u);
  // The model's queue_max still applies to all bands together.
  s.set_queue_max(2);
  other.priority = 6;
  EXPECT_EQ(s.admit(5, kModel, at_seconds(0), other).outcome, Outcome::queue_full);
}

// ---------------------------------------------------------------------------------------------
// Fair shares

TEST(FairShare, TenantsShareByTokensNotRequests) {
  for (RoutingPolicy policy : {RoutingPolicy::least_loaded, RoutingPolicy::expected_finish}) {
    RoutingOptions o = ef();
    o.policy = policy;
    o.fair_share_slack_tokens = 0;
    Scheduler s(1000, o);
    s.add_model(kModel);
    s.add_replica(1, kModel, 1);
    WaiterId next = 1;
    granted(s, next++, plain(0, 10));
    // "big" queued first: 4,000-token reviews; "small": 400-token guard calls.
    for (int i = 0; i < 60; ++i) {
      Request big = plain(next, 4000);
      big.tenant = "big";
      queued(s, next++, big);
    }
    for (int i = 0; i < 200; ++i) {
      Request small = plain(next, 400);
      small.tenant = "small";
      queued(s, next++, small);
    }
    std::map<WaiterId, std::string> tenant_of;
    for (WaiterId w = 2; w < 62; ++w) {
      tenant_of[w] = "big";
    }
    std::map<std::string, int> served;
    for (int i = 0; i < 110; ++i) {
      for (const Grant& g : s.release(1)) {
        ++served[tenant_of.contains(g.waiter) ? "big" : "small"];
      }
    }
    // Equal tokens: about ten small requests per big one (each also costs 16 answer tokens).
    EXPECT_NEAR(served["small"] / static_cast<double>(served["big"]), 9.6, 1.5)
        << to_string(policy) << " big " << served["big"] << " small " << served["small"];
  }
}

TEST(FairShare, WeightsSplitTheShare) {
  RoutingOptions o = ef();
  o.fair_share_slack_tokens = 0;
  o.tenant_weights = {{"gold", 3.0}};
  Scheduler s(1000, o);
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  WaiterId next = 1;
  granted(s, next++, plain(0, 10));
  std::set<WaiterId> gold;
  for (int i = 0; i < 100; ++i) {
    for (const char* tenant : {"gold", "basic"}) {
      Request r = plain(next, 1000);
      r.tenant = tenant;
      if (r.tenant == "gold") {
        gold.insert(next);
      }
      queued(s, next++, r);
    }
  }
  int gold_served = 0;
  for (int i = 0; i < 80; ++i) {
    for (const Grant& g : s.release(1)) {
      gold_served += gold.contains(g.waiter) ? 1 : 0;
    }
  }
  EXPECT_NEAR(gold_served, 60, 2);
}

TEST(FairShare, AnIdleTenantCannotSaveUpItsShare) {
  RoutingOptions o = ef();
  o.fair_share_slack_tokens = 0;
  Scheduler s(1000, o);
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  WaiterId next = 1;
  granted(s, next++, plain(0, 10));
  for (int i = 0; i < 30; ++i) {
    Request r = plain(next, 1000);
    r.tenant = "busy";
    queued(s, next++, r);
  }
  for (int i = 0; i < 20; ++i) {
    s.release(1);
  }
  // A tenant arriving now starts at the band's clock, not at zero: it alternates with "busy"
  // instead of taking the next 20 slots.
  std::set<WaiterId> late;
  for (int i = 0; i < 10; ++i) {
    Request r = plain(next, 1000);
    r.tenant = "late";
    late.insert(next);
    queued(s, next++, r);
  }
  int late_served = 0;
  for (int i = 0; i < 10; ++i) {
    for (const Grant& g : s.release(1)) {
      late_served += late.contains(g.waiter) ? 1 : 0;
    }
  }
  EXPECT_NEAR(late_served, 5, 1);
  ASSERT_TRUE(s.tenant_usage(kModel, 0, "late"));
  EXPECT_FALSE(s.tenant_usage(kModel, 0, "nobody"));
}

// ---------------------------------------------------------------------------------------------
// Group caps (a batch's slots in use)

TEST(GroupLimit, CapsSlotsInUseAcrossModels) {
  for (RoutingPolicy policy : {RoutingPolicy::least_loaded, RoutingPolicy::expected_finish}) {
    RoutingOptions o = ef();
    o.policy = policy;
    Scheduler s(100, o);
    s.add_model(kModel);
    s.add_model("other");
    s.add_replica(1, kModel, 1);
    s.add_replica(2, kModel, 1);
    s.add_replica(3, "other", 1);
    EXPECT_TRUE(s.set_group_limit("batch-1", 1).empty());
    Request line = plain(1, 100);
    line.group = "batch-1";
    EXPECT_NE(granted(s, 1, line), 0u);
    EXPECT_EQ(s.group_in_flight("batch-1"), 1u);
    queued(s, 2, line);  // a replica is free, but the batch is at its cap
    EXPECT_EQ(s.admit(3, "other", at_seconds(0), line).outcome, Outcome::queued);
    EXPECT_FALSE(s.held(2));
    // Interactive work still gets the free replica.
    EXPECT_NE(granted(s, 4, plain(4, 100)), 0u);
    // The batch's slot frees: its oldest line, whatever the model, goes next.
    Pairs next = pairs(s.complete(1, at_seconds(5)));
    ASSERT_EQ(next.size(), 1u) << to_string(policy);
    EXPECT_EQ(next[0].first, 2u);
    // Raising the cap lets the other model's line in.
    EXPECT_EQ(pairs(s.set_group_limit("batch-1", 2)), (Pairs{{3, 3}}));
    EXPECT_EQ(s.group_in_flight("batch-1"), 2u);
    EXPECT_TRUE(s.set_group_limit("batch-1", std::nullopt).empty());
    EXPECT_EQ(s.group_in_flight("nothing"), 0u);
  }
}

// ---------------------------------------------------------------------------------------------
// Learning from answers

TEST(Learning, SpeedsAndCacheFromWhatThePhoneReported) {
  Scheduler s(100, ef());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  granted(s, 1, review(1, 5000, 1, 2000));
  Completion first{.prompt_tokens = 7000,
                   .cached_tokens = 0,
                   .completion_tokens = 8,
                   .timings = Timings{.prompt_n = 7000,
                                      .prompt_ms = 70000,
                                      .predicted_n = 8,
                                      .predicted_ms = 400,
                                      .cache_n = 0}};
  EXPECT_TRUE(s.complete(1, at_seconds(71), first).empty());
  ASSERT_TRUE(s.speeds(1));
  EXPECT_DOUBLE_EQ(s.speeds(1)->prefill_tps, 100);
  // predicted_ms covers predicted_n - 1 decode steps (llama-server: the first token comes with
  // the prompt): 7 / 0.4 s.
  EXPECT_DOUBLE_EQ(s.speeds(1)->decode_tps, 17.5);
  EXPECT_EQ(s.speeds(1)->source, SpeedSnapshot::Source::learned);
  EXPECT_DOUBLE_EQ(s.speed_model().answer_tokens(kModel, std::nullopt), 8);
  // The same instructions again: the gateway expects 156 blocks (4,992 tokens) cached.
  granted(s, 2, review(1, 5000, 2, 2000), 71);
  Completion second = first;
  second.cached_tokens = 4990;
  second.timings->prompt_n = 2010;
  second.timings->prompt_ms = 20100;
  s.complete(2, at_seconds(92), second);
  const auto& stats = s.prompt_cache().stats();
  EXPECT_EQ(stats.reports, 2u);
  EXPECT_EQ(stats.predicted_blocks, 156u);
  EXPECT_EQ(stats.reported_blocks, 155u);
  EXPECT_EQ(stats.under, 0u);
  EXPECT_FALSE(s.speeds(99));
  // Unknown waiters and failed answers teach nothing and free nothing twice.
  EXPECT_TRUE(s.complete(2, at_seconds(93), second).empty());
  granted(s, 3, plain(3, 1000), 93);
  s.complete(3, at_seconds(500), Completion{.ok = false});
  EXPECT_DOUBLE_EQ(s.speeds(1)->prefill_tps, 100);
  EXPECT_EQ(s.in_flight(1), 0u);
}

TEST(Learning, ReleaseByReplicaEndsTheOldestBinding) {
  Scheduler s(100, ef());
  s.add_model(kModel);
  s.add_replica(1, kModel, 2);
  granted(s, 1, plain(1, 100));
  granted(s, 2, plain(2, 100));
  s.release(1);
  EXPECT_EQ(s.in_flight(1), 1u);
  EXPECT_TRUE(s.complete(1, at_seconds(1)).empty());  // already ended by the release
  EXPECT_EQ(s.in_flight(1), 1u);
  s.complete(2, at_seconds(1));
  EXPECT_EQ(s.in_flight(1), 0u);
}

TEST(Learning, HostPromptCacheSizeComesFromTheAgent) {
  Scheduler s(100, ef());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.set_host_prompt_cache(1, 100'000);  // tokens
  granted(s, 1, review(1, 5000, 1, 2000));
  s.release(1);
  granted(s, 2, review(2, 5000, 2, 2000));
  s.release(1);
  EXPECT_EQ(s.prompt_cache().host_entries(1), 1u);
  s.forget_prompt_cache(1);
  EXPECT_EQ(s.prompt_cache().host_entries(1), 0u);
  EXPECT_EQ(s.prompt_cache().slot_blocks(1, 0), 0u);
}

// ---------------------------------------------------------------------------------------------
// Exploration

TEST(Exploration, SomeGrantsGoToAnotherFreeReplica) {
  for (double share : {0.0, 0.5}) {
    RoutingOptions o = ef();
    o.exploration = share;
    Scheduler s = fast_and_slow(o);
    std::map<ReplicaId, int> used;
    for (WaiterId w = 1; w <= 200; ++w) {
      ReplicaId r = granted(s, w, plain(w, 1000), static_cast<double>(w));
      ++used[r];
      s.release(r, at_seconds(static_cast<double>(w)));
    }
    if (share == 0) {
      EXPECT_EQ(used[2], 0);
    } else {
      // Half the grants explore, half of those land on the slow phone.
      EXPECT_NEAR(used[2], 50, 20);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// docs/routing.md's worked example, step by step.

TEST(WorkedExample, OfTheRoutingDoc) {
  RoutingOptions o;
  o.policy = RoutingPolicy::expected_finish;
  o.exploration = 0;
  Scheduler s(100, o);
  s.add_model(kModel);
  constexpr ReplicaId kA = 1, kB = 2, kC = 3, kD = 4;
  for (ReplicaId r = kA; r <= kD; ++r) {
    s.add_replica(r, kModel, 1);
    s.set_measured_speeds(r, r <= kB ? 72.2 : 18.05, r <= kB ? 18 : 4.5);
  }
  s.set_routable(kD, false);
  auto reviewing = [](std::uint64_t prefix, std::uint64_t id, std::uint32_t case_tokens = 2000) {
    Request r = review(prefix, 5000, id, case_tokens);
    r.max_tokens = 8;
    return r;
  };
  auto only = [&](Request r, ReplicaId on) {
    for (ReplicaId other = kA; other <= kC; ++other) {
      if (other != on) {
        r.exclude.push_back(other);
      }
    }
    return r;
  };
  // A holds P1 and ends at 97.3 s, B holds P2 and ends at 137.3 s, C holds P3.
  EXPECT_EQ(granted(s, 101, only(reviewing(1, 101), kA)), kA);
  EXPECT_EQ(granted(s, 102, only(reviewing(2, 102, 4888), kB)), kB);
  EXPECT_EQ(granted(s, 103, only(reviewing(3, 103), kC)), kC);
  queued(s, 1, reviewing(1, 1), 1);              // W1
  queued(s, 2, reviewing(3, 2), 2);              // W2
  const double t = 7000 / 72.2 + 7 / 18.0 - 20;  // A frees in 20 s, B in 60 s
  // 1. C frees: W2 reuses P3 there (112.8 s); behind A it would take 117.3 s.
  EXPECT_EQ(pairs(s.release(kC, at_seconds(t))), (Pairs{{2, kC}}));
  EXPECT_EQ(s.overtaken(1), 1u);
  // 2. D is free: W1 would take 389.4 s there, 48.2 s behind A. Held until 380.2 s from now.
  EXPECT_TRUE(s.set_routable(kD, true).empty());
  EXPECT_TRUE(s.held(1));
  EXPECT_NEAR(seconds_of(*s.next_wakeup()) - t, 380.17, 0.01);
  // 3. W3 (P2) waits for B (88.2 s); W4 (P1) finds both next slots promised and takes D.
  queued(s, 3, reviewing(2, 3), t);
  EXPECT_TRUE(s.held(3));
  EXPECT_EQ(granted(s, 4, reviewing(1, 4), t), kD);
  // 4. A frees: W1 gets it; with nothing free, W3 is no longer held.
  EXPECT_EQ(pairs(s.release(kA, at_seconds(t + 20))), (Pairs{{1, kA}}));
  EXPECT_FALSE(s.held(3));
  EXPECT_EQ(s.next_wakeup(), std::nullopt);
}

}  // namespace
}  // namespace fg::scheduling
