#include "orchestrator/scheduling/scheduler.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace fg::scheduling {
namespace {

using std::chrono::seconds;
using Outcome = Scheduler::Outcome;

const std::string kModel = "llama";

// These tests keep the earlier gateway's behaviour, least_loaded (no longer the default).
RoutingOptions least_loaded() {
  RoutingOptions o;
  o.policy = RoutingPolicy::least_loaded;
  return o;
}
const std::string kOther = "qwen";

TimePoint at(int s) {
  return TimePoint{} + seconds(s);
}

// Admits and expects a grant; returns the chosen replica.
ReplicaId grant(Scheduler& s, WaiterId w, const std::string& model = kModel,
                const std::vector<ReplicaId>& exclude = {}) {
  Scheduler::Admission a = s.admit(w, model, at(0), exclude);
  EXPECT_EQ(a.outcome, Outcome::granted) << "waiter " << w;
  return a.replica;
}

void expect_queued(Scheduler& s, WaiterId w, TimePoint now = at(0),
                   const std::vector<ReplicaId>& exclude = {}) {
  EXPECT_EQ(s.admit(w, kModel, now, exclude).outcome, Outcome::queued) << "waiter " << w;
}

std::vector<std::pair<WaiterId, ReplicaId>> pairs(const std::vector<Grant>& grants) {
  std::vector<std::pair<WaiterId, ReplicaId>> out;
  for (const Grant& g : grants) {
    out.emplace_back(g.waiter, g.replica);
  }
  return out;
}

using Pairs = std::vector<std::pair<WaiterId, ReplicaId>>;

// ---------------------------------------------------------------------------------------------
// Models

TEST(SchedulerModels, UnknownModelIsRefused) {
  Scheduler s(10, least_loaded());
  EXPECT_FALSE(s.has_model(kModel));
  EXPECT_EQ(s.admit(1, kModel, at(0)).outcome, Outcome::unknown_model);
  EXPECT_EQ(s.queue_depth(kModel), 0u);
  EXPECT_FALSE(s.cancel(1));
}

TEST(SchedulerModels, AddingTwiceKeepsReplicasAndQueue) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 1);
  expect_queued(s, 2);
  s.add_model(kModel);
  EXPECT_TRUE(s.has_model(kModel));
  EXPECT_EQ(s.queue_depth(kModel), 1u);
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{2, 1}}));
}

// least_loaded reads nothing from the prompt-cache model, so a request without blocks is not
// placed there (its slot walk cost ~20k instructions per request on a many-slot replica);
// expected_finish places every request.
TEST(SchedulerModels, LeastLoadedLeavesThePromptCacheModelAlone) {
  auto any_busy = [](const Scheduler& sched) {
    bool busy = false;
    for (std::uint32_t slot = 0; slot < 4; ++slot) {
      busy = busy || sched.prompt_cache().slot_busy(1, slot);
    }
    return busy;
  };
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 4);
  grant(s, 1);
  EXPECT_FALSE(any_busy(s));
  s.release(1);

  RoutingOptions o;
  o.policy = RoutingPolicy::expected_finish;
  Scheduler ef(10, o);
  ef.add_model(kModel);
  ef.add_replica(1, kModel, 4);
  grant(ef, 1);
  EXPECT_TRUE(any_busy(ef));
  ef.release(1);
  EXPECT_FALSE(any_busy(ef));
}

TEST(SchedulerModels, AddReplicaToUnknownModelIsIgnored) {
  Scheduler s(10, least_loaded());
  EXPECT_TRUE(s.add_replica(1, kModel, 2).empty());
  EXPECT_FALSE(s.has_replica(1));
}

TEST(SchedulerModels, RemoveModelReturnsQueuedWaitersInOrder) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_model(kOther);
  s.add_replica(1, kModel, 1);
  grant(s, 1);
  expect_queued(s, 5);
  expect_queued(s, 3);
  expect_queued(s, 4);
  s.remove_replica(1);
  EXPECT_EQ(s.remove_model(kModel), (std::vector<WaiterId>{5, 3, 4}));
  EXPECT_FALSE(s.has_model(kModel));
  EXPECT_TRUE(s.has_model(kOther));
  EXPECT_FALSE(s.cancel(3));  // answered by the caller, no longer queued
  EXPECT_EQ(s.queue_depth(kModel), 0u);
  EXPECT_EQ(s.admit(9, kModel, at(0)).outcome, Outcome::unknown_model);
  // The busy replica still drains cleanly after its model is gone.
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_FALSE(s.has_replica(1));
}

TEST(SchedulerModels, RemoveUnknownModelReturnsNothing) {
  Scheduler s(10, least_loaded());
  EXPECT_TRUE(s.remove_model(kModel).empty());
}

// Decision: removing a model that still has replicas removes them too (busy ones linger until
// their last release, exactly like remove_replica).
TEST(SchedulerModels, RemoveModelTakesRemainingReplicasWithIt) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 2);
  s.add_replica(2, kModel, 2);
  grant(s, 1);  // lands on replica 1
  EXPECT_TRUE(s.remove_model(kModel).empty());
  EXPECT_TRUE(s.has_replica(1));
  EXPECT_FALSE(s.routable(1));
  EXPECT_FALSE(s.has_replica(2));
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_FALSE(s.has_replica(1));
}

TEST(SchedulerModels, ModelsAreIndependent) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_model(kOther);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kOther, 1);
  grant(s, 1, kModel);
  EXPECT_EQ(s.admit(2, kModel, at(0)).outcome, Outcome::queued);
  EXPECT_EQ(grant(s, 3, kOther), 2u);
  EXPECT_EQ(s.queue_depth(kOther), 0u);
  EXPECT_TRUE(s.release(2).empty());  // kOther's release does not serve kModel's queue
  EXPECT_EQ(s.queue_depth(kModel), 1u);
}

// ---------------------------------------------------------------------------------------------
// Admission and replica choice

TEST(SchedulerAdmit, GrantsWhileSlotsAreFreeThenQueues) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(7, kModel, 2);
  EXPECT_EQ(grant(s, 1), 7u);
  EXPECT_EQ(grant(s, 2), 7u);
  EXPECT_EQ(s.in_flight(7), 2u);
  expect_queued(s, 3);
  EXPECT_EQ(s.in_flight(7), 2u);
  EXPECT_EQ(s.queue_depth(kModel), 1u);
}

TEST(SchedulerAdmit, ModelWithoutReplicasQueues) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  expect_queued(s, 1);
  EXPECT_EQ(pairs(s.add_replica(4, kModel, 1)), (Pairs{{1, 4}}));
}

TEST(SchedulerAdmit, QueueFullAtQueueMax) {
  Scheduler s(2, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 1);
  expect_queued(s, 2);
  expect_queued(s, 3);
  EXPECT_EQ(s.admit(4, kModel, at(0)).outcome, Outcome::queue_full);
  EXPECT_EQ(s.queue_depth(kModel), 2u);
  EXPECT_FALSE(s.cancel(4));
  // A cancelled waiter makes room again.
  EXPECT_TRUE(s.cancel(2));
  expect_queued(s, 4);
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{3, 1}}));
}

TEST(SchedulerAdmit, QueueFullDoesNotStopGrants) {
  Scheduler s(0, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  EXPECT_EQ(grant(s, 1), 1u);
  EXPECT_EQ(s.admit(2, kModel, at(0)).outcome, Outcome::queue_full);
  EXPECT_EQ(s.queue_depth(kModel), 0u);
}

TEST(SchedulerAdmit, QueueMaxCanChange) {
  Scheduler s(1, least_loaded());
  s.add_model(kModel);
  expect_queued(s, 1);
  EXPECT_EQ(s.admit(2, kModel, at(0)).outcome, Outcome::queue_full);
  s.set_queue_max(2);
  expect_queued(s, 2);
  s.set_queue_max(1);
  // Shrinking keeps who is already queued but refuses newcomers.
  EXPECT_EQ(s.queue_depth(kModel), 2u);
  EXPECT_EQ(s.admit(3, kModel, at(0)).outcome, Outcome::queue_full);
}

TEST(SchedulerAdmit, PicksLeastLoadedByRatio) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 4);
  s.add_replica(2, kModel, 1);
  EXPECT_EQ(grant(s, 1), 1u);  // tie 0/4 vs 0/1: first in rotation
  EXPECT_EQ(grant(s, 2), 2u);  // 1/4 vs 0/1
  EXPECT_EQ(grant(s, 3), 1u);  // 2 is full
  EXPECT_EQ(grant(s, 4), 1u);
  EXPECT_EQ(grant(s, 5), 1u);
  EXPECT_EQ(s.in_flight(1), 4u);
  EXPECT_EQ(s.in_flight(2), 1u);
}

TEST(SchedulerAdmit, RatioComparedExactly) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 3);
  s.add_replica(2, kModel, 2);
  EXPECT_EQ(grant(s, 1), 1u);  // tie
  EXPECT_EQ(grant(s, 2), 2u);  // 1/3 vs 0/2
  EXPECT_EQ(grant(s, 3), 1u);  // 1/3 < 1/2
  EXPECT_EQ(grant(s, 4), 2u);  // 2/3 > 1/2
  EXPECT_EQ(grant(s, 5), 1u);  // 2/3 vs 2/2 full
  EXPECT_EQ(s.in_flight(1), 3u);
  EXPECT_EQ(s.in_flight(2), 2u);
}

TEST(SchedulerAdmit, EqualIdleReplicasGetRoundRobin) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  for (ReplicaId r = 1; r <= 4; ++r) {
    s.add_replica(r, kModel, 3);
  }
  std::vector<ReplicaId> chosen;
  for (WaiterId w = 1; w <= 12; ++w) {
    chosen.push_back(grant(s, w));
  }
  EXPECT_EQ(chosen, (std::vector<ReplicaId>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST(SchedulerAdmit, RotationSpreadsSequentialRequests) {
  // One request at a time (each released before the next) still visits every replica.
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  for (ReplicaId r = 1; r <= 4; ++r) {
    s.add_replica(r, kModel, 1);
  }
  std::vector<ReplicaId> chosen;
  for (WaiterId w = 1; w <= 8; ++w) {
    ReplicaId r = grant(s, w);
    chosen.push_back(r);
    EXPECT_TRUE(s.release(r).empty());
  }
  EXPECT_EQ(chosen, (std::vector<ReplicaId>{1, 2, 3, 4, 1, 2, 3, 4}));
}

TEST(SchedulerAdmit, RotationSurvivesReplicaRemoval) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  for (ReplicaId r = 1; r <= 4; ++r) {
    s.add_replica(r, kModel, 1);
  }
  EXPECT_EQ(grant(s, 1), 1u);
  EXPECT_EQ(grant(s, 2), 2u);
  s.release(1);
  s.release(2);
  s.remove_replica(1);
  // The next replica after 2 is still 3.
  EXPECT_EQ(grant(s, 3), 3u);
  EXPECT_EQ(grant(s, 4), 4u);
  EXPECT_EQ(grant(s, 5), 2u);
}

// Decision: reusing the id of a queued waiter replaces the earlier queue entry.
TEST(SchedulerAdmit, ReusedWaiterIdSupersedesQueuedEntry) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 1);
  expect_queued(s, 2, at(1));
  expect_queued(s, 3, at(2));
  expect_queued(s, 2, at(3));
  EXPECT_EQ(s.queue_depth(kModel), 2u);
  EXPECT_EQ(s.oldest_waiter_since(kModel), at(2));
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{3, 1}}));
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{2, 1}}));
  EXPECT_TRUE(s.release(1).empty());
}

// ---------------------------------------------------------------------------------------------
// Release and FIFO late binding

TEST(SchedulerRelease, DecrementsExactly) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 3);
  grant(s, 1);
  grant(s, 2);
  grant(s, 3);
  EXPECT_EQ(s.in_flight(1), 3u);
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_EQ(s.in_flight(1), 2u);
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_EQ(s.in_flight(1), 0u);
}

TEST(SchedulerRelease, ExtraReleaseDoesNotUnderflow) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_EQ(s.in_flight(1), 0u);
  EXPECT_EQ(grant(s, 1), 1u);
  expect_queued(s, 2);
}

TEST(SchedulerRelease, UnknownReplicaIsHarmless) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  expect_queued(s, 1);
  EXPECT_TRUE(s.release(42).empty());
  EXPECT_EQ(s.queue_depth(kModel), 1u);
  EXPECT_FALSE(s.has_replica(42));
}

TEST(SchedulerRelease, ReleaseOfForgottenReplicaIsHarmless) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 1);
  s.remove_replica(1);
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_FALSE(s.has_replica(1));
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_EQ(s.in_flight(1), 0u);
}

TEST(SchedulerRelease, WaitersBoundInArrivalOrderToTheFreedReplica) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  grant(s, 100);
  grant(s, 101);
  expect_queued(s, 1, at(1));
  expect_queued(s, 2, at(2));
  expect_queued(s, 3, at(3));
  EXPECT_EQ(pairs(s.release(2)), (Pairs{{1, 2}}));
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{2, 1}}));
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{3, 1}}));
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_EQ(s.in_flight(1), 0u);
  EXPECT_EQ(s.in_flight(2), 1u);
}

TEST(SchedulerRelease, InFlightNeverExceedsSlots) {
  Scheduler s(100, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 2);
  for (WaiterId w = 1; w <= 20; ++w) {
    s.admit(w, kModel, at(0));
    EXPECT_LE(s.in_flight(1), 2u);
  }
  EXPECT_EQ(s.queue_depth(kModel), 18u);
  for (int i = 0; i < 20; ++i) {
    s.release(1);
    EXPECT_LE(s.in_flight(1), 2u);
  }
  EXPECT_EQ(s.queue_depth(kModel), 0u);
  EXPECT_EQ(s.in_flight(1), 0u);
}

// ---------------------------------------------------------------------------------------------
// Exclusions (retries)

TEST(SchedulerExclusions, ExcludedReplicaNotGrantedWhileAnotherIsRoutable) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  EXPECT_EQ(grant(s, 100, kModel, {1}), 2u);
  // Replica 1 is free but excluded; replica 2 is routable (just busy), so the retry waits.
  expect_queued(s, 1, at(0), {1});
  EXPECT_EQ(s.in_flight(1), 0u);
  EXPECT_EQ(pairs(s.release(2)), (Pairs{{1, 2}}));
}

// Documented behaviour: an older waiter that excluded the freed replica is skipped and the next
// waiter that can use it is bound instead; the skipped waiter keeps its place at the head.
TEST(SchedulerExclusions, SkippedWaiterLetsTheNextOneUseTheReplica) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  grant(s, 100);  // replica 1
  grant(s, 101);  // replica 2
  expect_queued(s, 1, at(1), {1});
  expect_queued(s, 2, at(2));
  expect_queued(s, 3, at(3));
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{2, 1}}));
  EXPECT_EQ(s.oldest_waiter_since(kModel), at(1));
  EXPECT_EQ(pairs(s.release(2)), (Pairs{{1, 2}}));
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{3, 1}}));
}

TEST(SchedulerExclusions, NewcomerUsesSlotThatQueuedRetryExcludes) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  grant(s, 100);  // replica 1
  grant(s, 101);  // replica 2
  expect_queued(s, 1, at(0), {1});
  EXPECT_TRUE(s.release(1).empty());  // only the retry waits, and it excluded replica 1
  EXPECT_EQ(s.free_slots(kModel), 1u);
  EXPECT_EQ(grant(s, 2), 1u);  // the slot is not wasted on someone who cannot take it
}

TEST(SchedulerExclusions, IgnoredWhenTheyCoverEveryRoutableReplica) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  EXPECT_EQ(grant(s, 1, kModel, {1}), 1u);
  s.add_replica(2, kModel, 1);
  grant(s, 2);  // replica 2
  s.release(1);
  EXPECT_EQ(grant(s, 3, kModel, {1, 2}), 1u);
}

TEST(SchedulerExclusions, UnroutableReplicasDoNotCountForCoverage) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  s.set_routable(2, false);
  EXPECT_EQ(grant(s, 1, kModel, {1}), 1u);
}

TEST(SchedulerExclusions, ZeroSlotReplicaDoesNotKeepRetryWaiting) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 0);
  EXPECT_EQ(grant(s, 1, kModel, {1}), 1u);
}

TEST(SchedulerExclusions, QueuedRetryFallsBackWhenLastAlternativeTurnsUnroutable) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  grant(s, 100);  // replica 1
  grant(s, 101);  // replica 2
  expect_queued(s, 1, at(0), {1});
  EXPECT_TRUE(s.release(1).empty());
  // Replica 2 goes away: exclusions now cover everything routable, so replica 1 is used.
  EXPECT_EQ(pairs(s.set_routable(2, false)), (Pairs{{1, 1}}));
}

TEST(SchedulerExclusions, QueuedRetryFallsBackWhenAlternativeIsRemovedAndDrains) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  grant(s, 100);  // replica 1
  grant(s, 101);  // replica 2
  expect_queued(s, 1, at(0), {1});
  EXPECT_TRUE(s.release(1).empty());
  s.remove_replica(2);
  // remove_replica returns nothing; the last release of the removed replica binds the retry.
  EXPECT_EQ(pairs(s.release(2)), (Pairs{{1, 1}}));
  EXPECT_FALSE(s.has_replica(2));
}

TEST(SchedulerExclusions, NewReplicaServesRetryThatCoveredEverything) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 100);
  expect_queued(s, 1, at(0), {1});
  EXPECT_EQ(pairs(s.add_replica(2, kModel, 1)), (Pairs{{1, 2}}));
}

TEST(SchedulerExclusions, UnknownIdsInExclusionsAreHarmless) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  EXPECT_EQ(grant(s, 1, kModel, {99, 98}), 1u);
}

TEST(SchedulerExclusions, ExcludedReplicaAvoidedAmongFreeOnes) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  for (ReplicaId r = 1; r <= 3; ++r) {
    s.add_replica(r, kModel, 2);
  }
  EXPECT_EQ(grant(s, 1, kModel, {1}), 2u);
  EXPECT_EQ(grant(s, 2, kModel, {3, 1}), 2u);
  EXPECT_EQ(grant(s, 3, kModel, {2}), 3u);
}

// ---------------------------------------------------------------------------------------------
// Cancel

TEST(SchedulerCancel, CancelledWaiterIsNeverGranted) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 100);
  expect_queued(s, 1, at(1));
  expect_queued(s, 2, at(2));
  expect_queued(s, 3, at(3));
  EXPECT_TRUE(s.cancel(2));
  EXPECT_EQ(s.queue_depth(kModel), 2u);
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{1, 1}}));
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{3, 1}}));
  EXPECT_TRUE(s.release(1).empty());
}

TEST(SchedulerCancel, UnknownOrGrantedOrTwiceReturnsFalse) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  EXPECT_FALSE(s.cancel(12345));
  grant(s, 1);
  EXPECT_FALSE(s.cancel(1));  // granted, not queued
  expect_queued(s, 2);
  EXPECT_TRUE(s.cancel(2));
  EXPECT_FALSE(s.cancel(2));
  EXPECT_EQ(s.queue_depth(kModel), 0u);
  EXPECT_EQ(s.oldest_waiter_since(kModel), std::nullopt);
}

TEST(SchedulerCancel, CancellingHeadMovesOldest) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  expect_queued(s, 1, at(5));
  expect_queued(s, 2, at(7));
  EXPECT_EQ(s.oldest_waiter_since(kModel), at(5));
  EXPECT_TRUE(s.cancel(1));
  EXPECT_EQ(s.oldest_waiter_since(kModel), at(7));
}

TEST(SchedulerCancel, CancelIsCheapWithLongQueue) {
  Scheduler s(20000, least_loaded());
  s.add_model(kModel);
  for (WaiterId w = 1; w <= 10000; ++w) {
    expect_queued(s, w);
  }
  // Cancel from the back, where a linear search from the head would be slowest.
  for (WaiterId w = 10000; w >= 2; --w) {
    ASSERT_TRUE(s.cancel(w));
  }
  EXPECT_EQ(s.queue_depth(kModel), 1u);
  EXPECT_EQ(pairs(s.add_replica(1, kModel, 4)), (Pairs{{1, 1}}));
}

// ---------------------------------------------------------------------------------------------
// Replica lifecycle

TEST(SchedulerReplicas, NewReplicaStartsRoutable) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 3);
  EXPECT_TRUE(s.has_replica(1));
  EXPECT_TRUE(s.routable(1));
  EXPECT_EQ(s.slots(1), 3u);
  EXPECT_EQ(s.in_flight(1), 0u);
}

TEST(SchedulerReplicas, UnknownReplicaQueriesAreZero) {
  Scheduler s(10, least_loaded());
  EXPECT_FALSE(s.has_replica(5));
  EXPECT_FALSE(s.routable(5));
  EXPECT_EQ(s.slots(5), 0u);
  EXPECT_EQ(s.in_flight(5), 0u);
  EXPECT_TRUE(s.set_slots(5, 3).empty());
  EXPECT_TRUE(s.set_routable(5, true).empty());
  s.remove_replica(5);
  EXPECT_FALSE(s.has_replica(5));
}

TEST(SchedulerReplicas, UnroutableReplicaGetsNothing) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 2);
  s.add_replica(2, kModel, 2);
  EXPECT_TRUE(s.set_routable(1, false).empty());
  EXPECT_FALSE(s.routable(1));
  EXPECT_EQ(grant(s, 1), 2u);
  EXPECT_EQ(grant(s, 2), 2u);
  expect_queued(s, 3);
  EXPECT_EQ(s.in_flight(1), 0u);
}

TEST(SchedulerReplicas, UnroutableReplicaKeepsInFlightAndReleaseDoesNotBindToIt) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 1);
  expect_queued(s, 2);
  s.set_routable(1, false);
  EXPECT_EQ(s.in_flight(1), 1u);
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_EQ(s.in_flight(1), 0u);
  EXPECT_EQ(s.queue_depth(kModel), 1u);
}

TEST(SchedulerReplicas, RoutableAgainDispatchesQueue) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 2);
  s.set_routable(1, false);
  expect_queued(s, 1);
  expect_queued(s, 2);
  expect_queued(s, 3);
  EXPECT_EQ(pairs(s.set_routable(1, true)), (Pairs{{1, 1}, {2, 1}}));
  EXPECT_EQ(s.queue_depth(kModel), 1u);
  EXPECT_EQ(s.in_flight(1), 2u);
}

TEST(SchedulerReplicas, AddReplicaDispatchesQueue) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 100);
  expect_queued(s, 1);
  expect_queued(s, 2);
  expect_queued(s, 3);
  EXPECT_EQ(pairs(s.add_replica(2, kModel, 2)), (Pairs{{1, 2}, {2, 2}}));
  EXPECT_EQ(s.queue_depth(kModel), 1u);
}

TEST(SchedulerReplicas, MoreSlotsDispatchQueue) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 100);
  expect_queued(s, 1);
  expect_queued(s, 2);
  EXPECT_EQ(pairs(s.set_slots(1, 4)), (Pairs{{1, 1}, {2, 1}}));
  EXPECT_EQ(s.in_flight(1), 3u);
  EXPECT_EQ(s.slots(1), 4u);
}

TEST(SchedulerReplicas, ShrunkSlotsGrantNothingUntilDrainedBelowLimit) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 4);
  for (WaiterId w = 1; w <= 4; ++w) {
    grant(s, w);
  }
  expect_queued(s, 10);
  EXPECT_TRUE(s.set_slots(1, 2).empty());
  EXPECT_EQ(s.in_flight(1), 4u);
  EXPECT_EQ(s.free_slots(kModel), 0u);
  EXPECT_TRUE(s.release(1).empty());  // 3 in flight, limit 2
  EXPECT_TRUE(s.release(1).empty());  // 2 in flight, limit 2
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{10, 1}}));
  EXPECT_EQ(s.in_flight(1), 2u);
  EXPECT_EQ(s.admit(11, kModel, at(0)).outcome, Outcome::queued);
}

TEST(SchedulerReplicas, ZeroSlotsMeansNoGrants) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 0);
  expect_queued(s, 1);
  EXPECT_EQ(pairs(s.set_slots(1, 1)), (Pairs{{1, 1}}));
}

TEST(SchedulerReplicas, RemovedReplicaLingersUntilLastRelease) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 2);
  grant(s, 1);
  grant(s, 2);
  expect_queued(s, 3);
  s.remove_replica(1);
  EXPECT_TRUE(s.has_replica(1));
  EXPECT_FALSE(s.routable(1));
  EXPECT_EQ(s.in_flight(1), 2u);
  EXPECT_EQ(s.free_slots(kModel), 0u);
  EXPECT_EQ(s.busy_slots(kModel), 0u);
  // Neither re-enabling nor more slots revive a removed replica.
  EXPECT_TRUE(s.set_routable(1, true).empty());
  EXPECT_TRUE(s.set_slots(1, 8).empty());
  EXPECT_FALSE(s.routable(1));
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_TRUE(s.has_replica(1));
  EXPECT_EQ(s.in_flight(1), 1u);
  EXPECT_TRUE(s.release(1).empty());
  EXPECT_FALSE(s.has_replica(1));
  EXPECT_EQ(s.queue_depth(kModel), 1u);
  EXPECT_TRUE(s.release(1).empty());
}

TEST(SchedulerReplicas, IdleReplicaIsForgottenAtOnce) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 2);
  s.remove_replica(1);
  EXPECT_FALSE(s.has_replica(1));
  expect_queued(s, 1);
  s.remove_replica(1);  // twice is harmless
}

TEST(SchedulerReplicas, ReaddedReplicaKeepsCountingOldBindings) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 2);
  grant(s, 1);
  s.remove_replica(1);
  EXPECT_TRUE(s.add_replica(1, kModel, 2).empty());
  EXPECT_TRUE(s.routable(1));
  EXPECT_EQ(s.in_flight(1), 1u);
  EXPECT_EQ(grant(s, 2), 1u);
  expect_queued(s, 3);
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{3, 1}}));
  EXPECT_EQ(s.in_flight(1), 2u);
}

TEST(SchedulerReplicas, ReannouncingLiveReplicaRefreshesIt) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 1);
  expect_queued(s, 2);
  s.set_routable(1, false);
  EXPECT_TRUE(s.add_replica(1, kModel, 1).empty());
  EXPECT_TRUE(s.routable(1));
  EXPECT_EQ(s.in_flight(1), 1u);
  EXPECT_EQ(pairs(s.add_replica(1, kModel, 2)), (Pairs{{2, 1}}));
}

TEST(SchedulerReplicas, ReplicaCanMoveToAnotherModel) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  s.add_model(kOther);
  s.add_replica(1, kModel, 1);
  grant(s, 1, kModel);
  EXPECT_EQ(s.admit(2, kOther, at(0)).outcome, Outcome::queued);
  EXPECT_TRUE(s.add_replica(1, kOther, 1).empty());  // still busy with the kModel request
  EXPECT_EQ(s.admit(3, kModel, at(0)).outcome, Outcome::queued);
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{2, 1}}));
  EXPECT_EQ(s.queue_depth(kModel), 1u);
}

// ---------------------------------------------------------------------------------------------
// Statistics

TEST(SchedulerStats, QueueDepthAndOldestWaiter) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  EXPECT_EQ(s.queue_depth(kModel), 0u);
  EXPECT_EQ(s.oldest_waiter_since(kModel), std::nullopt);
  EXPECT_EQ(s.oldest_waiter_since("nope"), std::nullopt);
  expect_queued(s, 1, at(3));
  expect_queued(s, 2, at(4));
  EXPECT_EQ(s.queue_depth(kModel), 2u);
  EXPECT_EQ(s.oldest_waiter_since(kModel), at(3));
  s.add_replica(1, kModel, 1);
  EXPECT_EQ(s.queue_depth(kModel), 1u);
  EXPECT_EQ(s.oldest_waiter_since(kModel), at(4));
}

TEST(SchedulerStats, BusyAndFreeSlotsCountRoutableReplicasOnly) {
  Scheduler s(10, least_loaded());
  s.add_model(kModel);
  EXPECT_EQ(s.busy_slots(kModel), 0u);
  EXPECT_EQ(s.free_slots(kModel), 0u);
  EXPECT_EQ(s.busy_slots("nope"), 0u);
  EXPECT_EQ(s.free_slots("nope"), 0u);
  s.add_replica(1, kModel, 3);
  s.add_replica(2, kModel, 2);
  EXPECT_EQ(s.free_slots(kModel), 5u);
  grant(s, 1);
  grant(s, 2);
  grant(s, 3);
  EXPECT_EQ(s.busy_slots(kModel), 3u);
  EXPECT_EQ(s.free_slots(kModel), 2u);
  s.set_routable(2, false);
  EXPECT_EQ(s.busy_slots(kModel), s.in_flight(1));
  EXPECT_EQ(s.free_slots(kModel), 3u - s.in_flight(1));
  s.set_routable(2, true);
  // A replica over its shrunk limit adds no free slots (never negative).
  s.set_slots(1, 1);
  EXPECT_EQ(s.in_flight(1), 2u);
  EXPECT_EQ(s.free_slots(kModel), 1u);
  EXPECT_EQ(s.busy_slots(kModel), 3u);
}

// ---------------------------------------------------------------------------------------------
// Efficiency: the dispatch scan must not walk the queue when nothing more can be bound.

TEST(SchedulerEfficiency, ReleaseWithLongQueueVisitsOneWaiter) {
  Scheduler s(20000, least_loaded());
  s.add_model(kModel);
  for (ReplicaId r = 1; r <= 4; ++r) {
    s.add_replica(r, kModel, 2);
  }
  WaiterId next = 1;
  for (int i = 0; i < 8; ++i) {
    grant(s, next++);
  }
  for (int i = 0; i < 10000; ++i) {
    expect_queued(s, next++);
  }
  EXPECT_EQ(pairs(s.release(3)), (Pairs{{9, 3}}));
  EXPECT_EQ(s.last_dispatch_visits(), 1u);
  EXPECT_TRUE(s.release(77).empty());
  EXPECT_EQ(s.last_dispatch_visits(), 0u);
}

TEST(SchedulerEfficiency, DrainingLongQueueVisitsEachWaiterOnce) {
  Scheduler s(20000, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  grant(s, 0);
  for (WaiterId w = 1; w <= 10000; ++w) {
    expect_queued(s, w);
  }
  std::size_t visits = 0;
  for (WaiterId w = 1; w <= 10000; ++w) {
    std::vector<Grant> g = s.release(1);
    ASSERT_EQ(g.size(), 1u);
    ASSERT_EQ(g[0].waiter, w);
    visits += s.last_dispatch_visits();
  }
  EXPECT_EQ(visits, 10000u);
  EXPECT_EQ(s.queue_depth(kModel), 0u);
}

TEST(SchedulerEfficiency, NewCapacityStopsScanWhenFilled) {
  Scheduler s(20000, least_loaded());
  s.add_model(kModel);
  for (WaiterId w = 1; w <= 10000; ++w) {
    expect_queued(s, w);
  }
  EXPECT_EQ(s.add_replica(1, kModel, 3).size(), 3u);
  EXPECT_EQ(s.last_dispatch_visits(), 3u);
  EXPECT_EQ(s.set_slots(1, 4).size(), 1u);
  EXPECT_EQ(s.last_dispatch_visits(), 1u);
  EXPECT_TRUE(s.set_routable(1, false).empty());
  EXPECT_EQ(s.last_dispatch_visits(), 0u);
}

// Waiters skipped for their exclusions are the only ones a dispatch passes over.
TEST(SchedulerEfficiency, ScanPassesOnlyOverExcludingWaiters) {
  Scheduler s(100, least_loaded());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  s.add_replica(2, kModel, 1);
  grant(s, 100);  // replica 1
  grant(s, 101);  // replica 2
  for (WaiterId w = 1; w <= 5; ++w) {
    expect_queued(s, w, at(0), {1});
  }
  expect_queued(s, 6);
  expect_queued(s, 7);
  EXPECT_EQ(pairs(s.release(1)), (Pairs{{6, 1}}));
  EXPECT_EQ(s.last_dispatch_visits(), 6u);
}

// ---------------------------------------------------------------------------------------------
// Randomized property test against a simple reference of who is queued and who holds a slot.

struct Harness {
  static constexpr int kReplicas = 4;

  explicit Harness(std::uint32_t seed, std::uint32_t queue_max) : rng(seed), s(queue_max) {
    s.add_model(kModel);
    for (ReplicaId r = 1; r <= kReplicas; ++r) {
      s.add_replica(r, kModel, std::uniform_int_distribution<std::uint32_t>(1, 3)(rng));
    }
  }

  std::uint32_t pick(std::uint32_t n) {
    return std::uniform_int_distribution<std::uint32_t>(0, n - 1)(rng);
  }

  // Exclusions that the scheduler should honour for this waiter right now.
  std::vector<ReplicaId> effective(const std::vector<ReplicaId>& exclude) const {
    for (ReplicaId r = 1; r <= kReplicas; ++r) {
      bool serves = s.routable(r) && s.slots(r) > 0;
      if (serves && std::find(exclude.begin(), exclude.end(), r) == exclude.end()) {
        return exclude;
      }
    }
    return {};
  }

  bool can_use_now(const std::vector<ReplicaId>& exclude, ReplicaId r) const {
    std::vector<ReplicaId> eff = effective(exclude);
    return s.routable(r) && s.in_flight(r) < s.slots(r) &&
           std::find(eff.begin(), eff.end(), r) == eff.end();
  }

  void take(const std::vector<Grant>& grants) {
    // FIFO: every older waiter still queued must have been unable to use the granted replica.
    for (const Grant& g : grants) {
      ASSERT_TRUE(queued.contains(g.waiter)) << "grant for a waiter not queued: " << g.waiter;
      for (WaiterId older : order) {
        if (older == g.waiter) {
          break;
        }
        std::vector<ReplicaId> eff = effective(queued[older]);
        ASSERT_NE(std::find(eff.begin(), eff.end(), g.replica), eff.end())
            << "waiter " << g.waiter << " overtook " << older << " on replica " << g.replica;
      }
      std::vector<ReplicaId> eff = effective(queued[g.waiter]);
      ASSERT_EQ(std::find(eff.begin(), eff.end(), g.replica), eff.end()) << "excluded replica";
      ASSERT_TRUE(s.routable(g.replica));
      ASSERT_LE(s.in_flight(g.replica), s.slots(g.replica));
      ASSERT_TRUE(granted.insert(g.waiter).second) << "granted twice: " << g.waiter;
      queued.erase(g.waiter);
      order.remove(g.waiter);
      held.push_back(g.replica);
      ++late_grants;
    }
  }

  void step(bool vary_slots) {
    std::uint32_t op = pick(vary_slots ? 100 : 90);
    if (op < 40) {
      WaiterId w = next_waiter++;
      std::vector<ReplicaId> exclude;
      if (pick(3) == 0) {
        for (ReplicaId r = 1; r <= kReplicas; ++r) {
          if (pick(2) == 0) {
            exclude.push_back(r);
          }
        }
      }
      const std::size_t before = order.size();
      Scheduler::Admission a = s.admit(w, kModel, at(static_cast<int>(w)), exclude);
      switch (a.outcome) {
        case Outcome::granted: {
          std::vector<ReplicaId> eff = effective(exclude);
          ASSERT_EQ(std::find(eff.begin(), eff.end(), a.replica), eff.end());
          ASSERT_TRUE(s.routable(a.replica));
          ASSERT_LE(s.in_flight(a.replica), s.slots(a.replica));
          ASSERT_TRUE(granted.insert(w).second);
          held.push_back(a.replica);
          break;
        }
        case Outcome::queued:
          ASSERT_LT(before, max_queue);
          queued[w] = exclude;
          order.push_back(w);
          break;
        case Outcome::queue_full:
          ++refusals;
          ASSERT_EQ(before, max_queue);
          break;
        case Outcome::unknown_model:
          FAIL() << "model exists";
      }
    } else if (op < 70) {
      if (held.empty()) {
        return;
      }
      std::size_t i = pick(static_cast<std::uint32_t>(held.size()));
      ReplicaId r = held[i];
      held[i] = held.back();
      held.pop_back();
      std::uint32_t before = s.in_flight(r);
      std::vector<Grant> grants = s.release(r);
      std::uint32_t rebound = 0;
      for (const Grant& g : grants) {
        rebound += g.replica == r ? 1 : 0;
      }
      ASSERT_EQ(s.in_flight(r), before - 1 + rebound);
      take(grants);
    } else if (op < 80) {
      if (!order.empty() && pick(4) != 0) {
        auto it = order.begin();
        std::advance(it, pick(static_cast<std::uint32_t>(order.size())));
        WaiterId w = *it;
        ASSERT_TRUE(s.cancel(w));
        queued.erase(w);
        order.erase(it);
      } else {
        // Granted, already cancelled or never seen.
        WaiterId w = pick(2) == 0 && !granted.empty() ? *granted.begin() : next_waiter + 1000;
        ASSERT_FALSE(s.cancel(w));
      }
    } else if (op < 90) {
      ReplicaId r = pick(kReplicas) + 1;
      take(s.set_routable(r, !s.routable(r)));
    } else {
      ReplicaId r = pick(kReplicas) + 1;
      take(s.set_slots(r, pick(4)));
    }
  }

  void check(bool vary_slots) {
    std::uint64_t total = 0;
    for (ReplicaId r = 1; r <= kReplicas; ++r) {
      if (!vary_slots) {
        ASSERT_LE(s.in_flight(r), s.slots(r));
      }
      total += s.in_flight(r);
    }
    ASSERT_EQ(total, held.size());
    ASSERT_EQ(s.queue_depth(kModel), order.size());
    if (order.empty()) {
      ASSERT_EQ(s.oldest_waiter_since(kModel), std::nullopt);
    } else {
      ASSERT_EQ(s.oldest_waiter_since(kModel), at(static_cast<int>(order.front())));
    }
    // Work never waits while a slot it may use is free.
    for (WaiterId w : order) {
      for (ReplicaId r = 1; r <= kReplicas; ++r) {
        ASSERT_FALSE(can_use_now(queued[w], r)) << "waiter " << w << " could use replica " << r;
      }
    }
    std::uint32_t free = 0;
    std::uint32_t busy = 0;
    for (ReplicaId r = 1; r <= kReplicas; ++r) {
      if (s.routable(r)) {
        busy += s.in_flight(r);
        free += s.in_flight(r) < s.slots(r) ? s.slots(r) - s.in_flight(r) : 0;
      }
    }
    ASSERT_EQ(s.free_slots(kModel), free);
    ASSERT_EQ(s.busy_slots(kModel), busy);
  }

  std::mt19937 rng;
  Scheduler s;
  std::size_t max_queue = 0;
  WaiterId next_waiter = 1;
  std::map<WaiterId, std::vector<ReplicaId>> queued;
  std::list<WaiterId> order;
  std::set<WaiterId> granted;
  std::vector<ReplicaId> held;  // one entry per slot the test holds
  std::size_t late_grants = 0;
  std::size_t refusals = 0;
};

void run_property(std::uint32_t seed, bool vary_slots) {
  constexpr std::uint32_t kQueueMax = 12;
  Harness h(seed, kQueueMax);
  h.max_queue = kQueueMax;
  for (int i = 0; i < 5000; ++i) {
    ASSERT_NO_FATAL_FAILURE(h.step(vary_slots)) << "seed " << seed << " step " << i;
    ASSERT_NO_FATAL_FAILURE(h.check(vary_slots)) << "seed " << seed << " step " << i;
  }
  // The run must actually exercise queueing, late binding and a full queue.
  EXPECT_GT(h.late_grants, 100u) << "seed " << seed;
  EXPECT_GT(h.refusals, 0u) << "seed " << seed;
  // Drain: releasing everything (with every replica back on) serves every remaining waiter.
  for (ReplicaId r = 1; r <= Harness::kReplicas; ++r) {
    if (h.s.slots(r) == 0) {
      h.take(h.s.set_slots(r, 1));
    }
    h.take(h.s.set_routable(r, true));
  }
  while (!h.held.empty()) {
    ReplicaId r = h.held.back();
    h.held.pop_back();
    ASSERT_NO_FATAL_FAILURE(h.take(h.s.release(r)));
  }
  EXPECT_TRUE(h.order.empty()) << "seed " << seed;
  EXPECT_EQ(h.s.queue_depth(kModel), 0u);
  for (ReplicaId r = 1; r <= Harness::kReplicas; ++r) {
    EXPECT_EQ(h.s.in_flight(r), 0u);
  }
}

TEST(SchedulerProperty, RandomOperationsKeepInvariants) {
  for (std::uint32_t seed = 1; seed <= 8; ++seed) {
    ASSERT_NO_FATAL_FAILURE(run_property(seed, false));
  }
}

TEST(SchedulerProperty, RandomOperationsWithSlotChangesKeepInvariants) {
  for (std::uint32_t seed = 101; seed <= 108; ++seed) {
    ASSERT_NO_FATAL_FAILURE(run_property(seed, true));
  }
}

}  // namespace
}  // namespace fg::scheduling
