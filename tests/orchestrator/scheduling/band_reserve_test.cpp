// The reserve for higher bands (RoutingOptions::reserve_*): a lower band may not take the last
// free replica that would finish a recent prompt of a higher band within the reserve margin of
// its idle-fleet finish. Injected clock; the arithmetic is spelled out in each test.

#include <gtest/gtest.h>

#include <chrono>
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
constexpr std::int32_t kInteractive = 10;

RoutingOptions options() {
  RoutingOptions o;
  o.policy = RoutingPolicy::expected_finish;
  o.exploration = 0;
  o.reserve_margin = 0.25;
  o.reserve_prompts = 8;
  o.reserve_window = std::chrono::seconds(600);
  return o;
}

// 7,000 tokens of its own: nothing to wait for a busy phone for.
Request batch(std::uint64_t id) {
  return review(0, 0, id, 7000);
}

Request interactive(std::uint64_t id) {
  Request r = review(2, 5000, id, 2000);
  r.priority = kInteractive;
  return r;
}

double seconds_of(TimePoint t) {
  return std::chrono::duration<double>(t - TimePoint{}).count();
}

using Pairs = std::vector<std::pair<WaiterId, ReplicaId>>;

// Ends a binding without teaching anything, so that the arithmetic stays on the measured speeds.
std::vector<Grant> done(Scheduler& s, WaiterId w, double t) {
  return s.complete(w, at_seconds(t), Completion{.ok = false});
}

Pairs pairs(const std::vector<Grant>& grants) {
  Pairs out;
  for (const Grant& g : grants) {
    out.emplace_back(g.waiter, g.replica);
  }
  return out;
}

// Three equal phones (100 prompt tokens/s, 20 decode; 16-token answers: 0.75 s of decode). At
// t = 0 a batch review takes phone 1 and two interactive reviews (instructions 2) phones 2 and
// 3: each reads 7,000 tokens, 70.75 s. The second interactive review shows what
// recurs: instructions 2 (156 blocks, 4,992 tokens). Three more batch reviews wait.
struct Fleet {
  explicit Fleet(RoutingOptions o = options()) : s(100, o) {
    s.add_model(kModel);
    for (ReplicaId r = 1; r <= 3; ++r) {
      s.add_replica(r, kModel, 1);
      s.set_measured_speeds(r, 100, 20);
    }
    EXPECT_EQ(s.admit(1, kModel, at_seconds(0), batch(1)).replica, 1u);
    EXPECT_EQ(s.admit(2, kModel, at_seconds(0), interactive(2)).replica, 2u);
    EXPECT_EQ(s.admit(3, kModel, at_seconds(0), interactive(3)).replica, 3u);
    for (WaiterId w = 4; w <= 6; ++w) {
      EXPECT_EQ(s.admit(w, kModel, at_seconds(1), batch(w)).outcome, Outcome::queued);
    }
  }
  Scheduler s;
};

TEST(BandReserve, KeepsTheLastPhoneHoldingAHigherBandsPrefixFree) {
  Fleet f;
  // Phone 2 frees at 10 s holding instructions 2: an interactive review would take 20.08 +
  // 0.75 = 20.83 s there, its idle-fleet finish; the bound is 1.25 x 20.83 = 26.04 s. Phone 3
  // also holds them but frees at 70.75 s: 60.75 + 20.83 = 81.58 s, out of the bound. So phone 2
  // stays free although batch reviews wait.
  EXPECT_TRUE(done(f.s, 2, 10).empty());
  EXPECT_EQ(f.s.reserved(kModel, 0), std::vector<ReplicaId>{2});
  EXPECT_TRUE(f.s.reserved(kModel, kInteractive).empty()) << "the band itself is not kept out";
  EXPECT_TRUE(f.s.reserved(kModel, kInteractive + 1).empty());
  // An interactive review arriving then starts at once, on the phone holding its prefix.
  const Scheduler::Admission a = f.s.admit(7, kModel, at_seconds(20), interactive(7));
  EXPECT_EQ(a.outcome, Outcome::granted);
  EXPECT_EQ(a.replica, 2u);
}

TEST(BandReserve, TimeReleasesThePhoneWhenAnotherComesWithinTheBound) {
  Fleet f;
  EXPECT_TRUE(done(f.s, 2, 10).empty());
  // Phone 3 (expected end 70.75 s) comes within the bound when 70.75 - t + 20.83 <= 26.04, at
  // t = 65.54 s: the shell's tick then gives phone 2 to the oldest batch review.
  const auto wake = f.s.next_wakeup();
  ASSERT_TRUE(wake.has_value());
  EXPECT_NEAR(seconds_of(*wake), 70.75 + 20.83 - 26.04, 0.05);
  EXPECT_TRUE(f.s.tick(*wake - std::chrono::milliseconds(100)).empty());
  EXPECT_EQ(pairs(f.s.tick(*wake)), (Pairs{{4, 2}}));
  EXPECT_TRUE(f.s.reserved(kModel, 0).empty());
}

TEST(BandReserve, ABusyPhoneFinishingWithinTheBoundCoversThePrefix) {
  Fleet f;
  // At 66 s phone 3 frees within 4.75 s: 4.75 + 20.83 = 25.58 s <= 26.04 s. Phone 2, freed
  // now, goes to the batch at once.
  EXPECT_EQ(pairs(done(f.s, 2, 66)), (Pairs{{4, 2}}));
}

TEST(BandReserve, AHeldWaiterIsNoLongerHeldWhenEverythingFreeIsKept) {
  // As the fleet above, but the batch review on phone 1 reads instructions 1 and the waiting one
  // (waiter 4) too.
  Scheduler s(100, options());
  s.add_model(kModel);
  for (ReplicaId r = 1; r <= 3; ++r) {
    s.add_replica(r, kModel, 1);
    s.set_measured_speeds(r, 100, 20);
  }
  EXPECT_EQ(s.admit(1, kModel, at_seconds(0), review(1, 5000, 1, 2000)).replica, 1u);
  EXPECT_EQ(s.admit(2, kModel, at_seconds(0), interactive(2)).replica, 2u);
  EXPECT_EQ(s.admit(3, kModel, at_seconds(0), interactive(3)).replica, 3u);
  EXPECT_EQ(s.admit(4, kModel, at_seconds(1), review(1, 5000, 4, 2000)).outcome, Outcome::queued);
  // At 66 s phone 2 frees; phone 3 covers instructions 2 (4.75 + 20.83 <= 26.04 s), so nothing
  // is kept, and waiter 4 waits for phone 1, which holds its instructions: 4.75 + 20.83 + 1 s
  // beats 70.75 s on phone 2. Without news the hold lasts until phone 1's overrun eats the gain:
  // 70.75 + (70.75 - 1) - 20.83 = 119.67 s.
  EXPECT_TRUE(done(s, 2, 66).empty());
  EXPECT_TRUE(s.held(4));
  const auto until = s.next_wakeup();
  ASSERT_TRUE(until.has_value());
  EXPECT_NEAR(seconds_of(*until), 119.67, 0.01);
  // By then phones 1 and 3 have overrun by 48.92 s: phone 2 is kept for instructions 2, so
  // waiter 4 has nothing free to be held back from. It waits, no longer held, and the next
  // wakeup is when the interactive prompts stop being recent (600 s), not now again.
  EXPECT_TRUE(s.tick(*until).empty());
  EXPECT_EQ(s.reserved(kModel, 0), std::vector<ReplicaId>{2});
  EXPECT_FALSE(s.held(4));
  const auto next = s.next_wakeup();
  ASSERT_TRUE(next.has_value());
  EXPECT_NEAR(seconds_of(*next), 600, 1e-6);
}

TEST(BandReserve, LapsesWhenTheHigherBandIsNoLongerRecent) {
  RoutingOptions o = options();
  o.reserve_window = std::chrono::seconds(30);
  Fleet f(o);
  EXPECT_TRUE(done(f.s, 2, 10).empty());
  // The interactive prompts were seen at 0 s: recent until 30 s.
  const auto wake = f.s.next_wakeup();
  ASSERT_TRUE(wake.has_value());
  EXPECT_NEAR(seconds_of(*wake), 30, 1e-6);
  EXPECT_EQ(pairs(f.s.tick(*wake)), (Pairs{{4, 2}}));
}

TEST(BandReserve, APromptBackFromAQuietSpellKeepsWhatItShared) {
  RoutingOptions o = options();
  o.reserve_margin = 0.5;
  o.reserve_window = std::chrono::seconds(30);
  Scheduler s(100, o);
  s.add_model(kModel);
  for (ReplicaId r = 1; r <= 3; ++r) {
    s.add_replica(r, kModel, 1);
    s.set_measured_speeds(r, 100, 20);
  }
  EXPECT_EQ(s.admit(1, kModel, at_seconds(0), batch(1)).replica, 1u);  // until 70.75 s
  EXPECT_EQ(s.admit(2, kModel, at_seconds(0), interactive(2)).replica, 2u);
  EXPECT_EQ(s.admit(3, kModel, at_seconds(0), interactive(3)).replica, 3u);
  EXPECT_TRUE(done(s, 2, 10).empty());
  EXPECT_TRUE(done(s, 3, 11).empty());
  // 39 s later (quiet for longer than the window) one interactive review comes back and takes
  // phone 2. What the last two shared (instructions 2) is remembered, so phone 3, which holds
  // them, is kept from the batch at once: 20.83 s there against a bound of 1.5 x 20.83 = 31.25 s;
  // phone 2 frees in 20.83 s (41.66 s with the review) and phone 1 holds no instructions.
  // (Forgotten, the prompt would keep capacity only, and phone 1 would cover that: 20.75 +
  // 70.75 = 91.5 s <= 1.5 x 70.75.)
  EXPECT_EQ(s.admit(7, kModel, at_seconds(50), interactive(7)).replica, 2u);
  EXPECT_EQ(s.admit(8, kModel, at_seconds(50), batch(8)).outcome, Outcome::queued);
  EXPECT_EQ(s.reserved(kModel, 0), std::vector<ReplicaId>{3});
}

TEST(BandReserve, OffWithZeroPromptsOrUnderLeastLoaded) {
  RoutingOptions off = options();
  off.reserve_prompts = 0;
  Fleet f(off);
  EXPECT_EQ(pairs(done(f.s, 2, 10)), (Pairs{{4, 2}}));

  RoutingOptions ll = options();
  ll.policy = RoutingPolicy::least_loaded;
  Fleet g(ll);
  EXPECT_EQ(pairs(done(g.s, 2, 10)), (Pairs{{4, 2}}));
  EXPECT_TRUE(g.s.reserved(kModel, 0).empty());
}

TEST(BandReserve, NothingIsKeptForABandWithNoLowerBandBeneathIt) {
  Scheduler s(100, options());
  s.add_model(kModel);
  for (ReplicaId r = 1; r <= 3; ++r) {
    s.add_replica(r, kModel, 1);
    s.set_measured_speeds(r, 100, 20);
  }
  // Interactive traffic alone is not recorded: there is nothing below it to keep out.
  EXPECT_EQ(s.admit(1, kModel, at_seconds(0), interactive(1)).replica, 1u);
  EXPECT_EQ(s.admit(2, kModel, at_seconds(0), interactive(2)).replica, 2u);
  EXPECT_EQ(s.admit(3, kModel, at_seconds(0), interactive(3)).replica, 3u);
  for (WaiterId w = 4; w <= 5; ++w) {
    EXPECT_EQ(s.admit(w, kModel, at_seconds(1), batch(w)).outcome, Outcome::queued);
  }
  EXPECT_EQ(pairs(done(s, 2, 10)), (Pairs{{4, 2}}));
}

TEST(BandReserve, AOnePhoneFleetIsNeverKeptIdle) {
  // At most half the replicas are kept: none of one.
  Scheduler s(100, options());
  s.add_model(kModel);
  s.add_replica(1, kModel, 1);
  EXPECT_EQ(s.admit(1, kModel, at_seconds(0), batch(1)).replica, 1u);
  EXPECT_EQ(s.admit(2, kModel, at_seconds(0), interactive(2)).outcome, Outcome::queued);
  EXPECT_EQ(s.admit(3, kModel, at_seconds(0), interactive(3)).outcome, Outcome::queued);
  EXPECT_EQ(s.admit(4, kModel, at_seconds(0), batch(4)).outcome, Outcome::queued);
  EXPECT_EQ(pairs(done(s, 1, 10)), (Pairs{{2, 1}}));
  EXPECT_EQ(pairs(done(s, 2, 20)), (Pairs{{3, 1}}));
  EXPECT_EQ(pairs(done(s, 3, 30)), (Pairs{{4, 1}}));
  EXPECT_TRUE(s.reserved(kModel, 0).empty());
}

TEST(BandReserve, AtMostHalfTheReplicasAreKept) {
  // Four phones: two kept at most. Beside a batch review on phone 1, interactive reviews of
  // instructions 2, 3 and 4 (two each, one after the other) leave phones 2, 3 and 4 free, each
  // holding one of them, and no busy phone would finish any of them in time: only the two
  // prompts seen last keep their phone.
  Scheduler s(100, options());
  s.add_model(kModel);
  for (ReplicaId r = 1; r <= 4; ++r) {
    s.add_replica(r, kModel, 1);
    s.set_measured_speeds(r, 100, 20);
  }
  EXPECT_EQ(s.admit(1, kModel, at_seconds(0), batch(1)).replica, 1u);
  WaiterId next = 2;
  double t = 1;
  for (std::uint64_t prefix = 2; prefix <= 4; ++prefix) {
    for (int twice = 0; twice < 2; ++twice, ++next, t += 1) {
      Request r = review(prefix, 5000, next, 2000);
      r.priority = kInteractive;
      const Scheduler::Admission a = s.admit(next, kModel, at_seconds(t), std::move(r));
      ASSERT_EQ(a.outcome, Outcome::granted);
      EXPECT_EQ(a.replica, static_cast<ReplicaId>(prefix));
      EXPECT_TRUE(done(s, next, t + 0.5).empty());
    }
  }
  EXPECT_EQ(s.reserved(kModel, 0), (std::vector<ReplicaId>{3, 4}));
  const Scheduler::Admission a = s.admit(next, kModel, at_seconds(t), batch(next));
  EXPECT_EQ(a.outcome, Outcome::granted);
  EXPECT_EQ(a.replica, 2u);
}

}  // namespace
}  // namespace fg::scheduling
