#include "orchestrator/health/probe_schedule.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <vector>

namespace fg::health {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;
using Ids = std::vector<ProbeSchedule::Id>;

ProbeSchedule::TimePoint at_ms(int ms) {
  return ProbeSchedule::TimePoint{} + milliseconds(ms);
}

// The schedule as the tests think of it: by id (the checker keeps each id's slot beside it).
class Schedule {
 public:
  void set(ProbeSchedule::Id id, ProbeSchedule::TimePoint due,
           ProbeSchedule::Duration early = ProbeSchedule::Duration::zero()) {
    auto [it, added] = slots_.try_emplace(id);
    if (added) {
      it->second = s_.add(id);
    }
    s_.set(it->second, due, early);
  }
  void remove(ProbeSchedule::Id id) {
    if (auto it = slots_.find(id); it != slots_.end()) {
      s_.remove(it->second);
      slots_.erase(it);
    }
  }
  bool contains(ProbeSchedule::Id id) const {
    auto it = slots_.find(id);
    return it != slots_.end() && s_.scheduled(it->second);
  }
  std::size_t size() const { return s_.size(); }
  std::optional<ProbeSchedule::TimePoint> next_wake() const { return s_.next_wake(); }
  Ids take_due(ProbeSchedule::TimePoint now) { return s_.take_due(now); }

 private:
  ProbeSchedule s_;
  std::map<ProbeSchedule::Id, ProbeSchedule::Slot> slots_;
};

TEST(ProbeSchedule, AllowedEarlyIsATenthOfTheIntervalAtMost100ms) {
  EXPECT_EQ(ProbeSchedule::allowed_early(seconds(5)), milliseconds(100));
  EXPECT_EQ(ProbeSchedule::allowed_early(seconds(1)), milliseconds(100));
  EXPECT_EQ(ProbeSchedule::allowed_early(milliseconds(200)), milliseconds(20));
  EXPECT_EQ(ProbeSchedule::allowed_early(milliseconds(0)), milliseconds(0));
  EXPECT_EQ(ProbeSchedule::allowed_early(milliseconds(-5)), milliseconds(0));
}

TEST(ProbeSchedule, WakesAtTheEarliestDueTime) {
  Schedule s;
  EXPECT_FALSE(s.next_wake());
  s.set(1, at_ms(500), milliseconds(100));
  s.set(2, at_ms(300), milliseconds(100));
  ASSERT_TRUE(s.next_wake());
  EXPECT_EQ(*s.next_wake(), at_ms(300));
}

TEST(ProbeSchedule, OneWakeTakesEveryProbeDueWithinItsAllowance) {
  Schedule s;
  s.set(1, at_ms(1000), milliseconds(100));
  s.set(2, at_ms(1050), milliseconds(100));
  s.set(3, at_ms(1100), milliseconds(100));
  s.set(4, at_ms(1101), milliseconds(100));
  s.set(5, at_ms(1060), milliseconds(20));  // a short interval: may go 20 ms early only
  EXPECT_EQ(s.take_due(at_ms(899)), Ids{});
  // At 1000: 1 (may go from 900), 2 (from 950), 3 (from 1000); not 4 (from 1001) nor 5 (1040).
  EXPECT_EQ(s.take_due(at_ms(1000)), (Ids{1, 2, 3}));
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(*s.next_wake(), at_ms(1060));
  EXPECT_EQ(s.take_due(at_ms(1039)), (Ids{4}));
  EXPECT_EQ(s.take_due(at_ms(1040)), (Ids{5}));
  EXPECT_EQ(s.take_due(at_ms(5000)), Ids{});
  EXPECT_EQ(s.size(), 0u);
}

TEST(ProbeSchedule, NeverEarlierThanAllowedAndNeverLeftBehind) {
  Schedule s;
  s.set(7, at_ms(1000));  // no allowance: exactly on time
  EXPECT_EQ(s.take_due(at_ms(999)), Ids{});
  EXPECT_EQ(s.take_due(at_ms(5000)), (Ids{7}));
  // An allowance above kMaxEarly is clipped to it.
  s.set(8, at_ms(1000), seconds(1));
  EXPECT_EQ(s.take_due(at_ms(899)), Ids{});
  EXPECT_EQ(s.take_due(at_ms(900)), (Ids{8}));
}

TEST(ProbeSchedule, SetMovesAndRemoveForgets) {
  Schedule s;
  s.set(1, at_ms(100));
  s.set(1, at_ms(900));
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(*s.next_wake(), at_ms(900));
  EXPECT_EQ(s.take_due(at_ms(500)), Ids{});
  s.set(2, at_ms(200));
  s.remove(2);
  s.remove(3);  // unknown: nothing happens
  EXPECT_FALSE(s.contains(2));
  EXPECT_EQ(s.take_due(at_ms(1000)), (Ids{1}));
  EXPECT_FALSE(s.next_wake());
}

TEST(ProbeSchedule, AnIdRemovedAndSetAgainGoesOnlyAtItsNewTime) {
  Schedule s;
  s.set(1, at_ms(100));
  s.remove(1);
  s.set(1, at_ms(900));
  EXPECT_EQ(*s.next_wake(), at_ms(900));
  EXPECT_EQ(s.take_due(at_ms(500)), Ids{});
  EXPECT_EQ(s.take_due(at_ms(1000)), (Ids{1}));
  EXPECT_EQ(s.take_due(at_ms(2000)), Ids{});
}

TEST(ProbeSchedule, AnIdMovedManyTimesGoesOnceAtItsLastTime) {
  Schedule s;
  for (int i = 0; i < 1000; ++i) {
    s.set(1, at_ms(10'000 - i));  // earlier each time: every old entry stays behind, stale
    s.set(2, at_ms(20'000 + i));  // later each time: the stale ones are on top
  }
  EXPECT_EQ(s.size(), 2u);
  EXPECT_EQ(*s.next_wake(), at_ms(9001));
  EXPECT_EQ(s.take_due(at_ms(9000)), Ids{});
  EXPECT_EQ(s.take_due(at_ms(15'000)), (Ids{1}));
  EXPECT_EQ(*s.next_wake(), at_ms(20'999));
  EXPECT_EQ(s.take_due(at_ms(30'000)), (Ids{2}));
  EXPECT_FALSE(s.next_wake());
}

TEST(ProbeSchedule, ASlotHandedOutAgainNeverRevivesAnOldEntry) {
  ProbeSchedule s;
  const auto a = s.add(1);
  s.set(a, at_ms(100));
  s.remove(a);
  const auto b = s.add(2);  // the same slot, another id
  EXPECT_EQ(a, b);
  EXPECT_FALSE(s.scheduled(b));
  EXPECT_FALSE(s.next_wake());
  s.set(b, at_ms(900));
  EXPECT_EQ(s.take_due(at_ms(500)), Ids{});
  EXPECT_EQ(s.take_due(at_ms(1000)), (Ids{2}));
  EXPECT_EQ(s.size(), 0u);
}

TEST(ProbeSchedule, EqualTimesGoInIdOrder) {
  Schedule s;
  s.set(3, at_ms(100));
  s.set(1, at_ms(100));
  s.set(2, at_ms(100));
  EXPECT_EQ(s.take_due(at_ms(100)), (Ids{1, 2, 3}));
}

// 5,000 replicas every 5 s with ±10% jitter: the figure the batching is for. Driving the schedule
// as the tick loop does (sleep until next_wake, take what is due, reschedule each probe one
// interval after it went), it wakes about 10 times a second, every probe goes within 100 ms
// before its due time, and every replica is probed every 4.5-5.5 s.
TEST(ProbeSchedule, FiveThousandReplicasTakeAboutTenWakeupsASecond) {
  Schedule s;
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto interval = [&] { return milliseconds(4500 + static_cast<int>(1000 * unit(rng))); };
  constexpr int kReplicas = 5000;
  std::vector<ProbeSchedule::TimePoint> due(kReplicas), last(kReplicas);
  for (int i = 0; i < kReplicas; ++i) {
    due[i] = at_ms(static_cast<int>(5000 * unit(rng)));
    s.set(static_cast<ProbeSchedule::Id>(i), due[i], ProbeSchedule::kMaxEarly);
  }
  int wakes = 0;
  int probes = 0;
  const auto end = at_ms(65'000);
  const auto measured_from = at_ms(5'000);
  while (true) {
    const auto now = *s.next_wake();
    if (now >= end) {
      break;
    }
    if (now >= measured_from) {
      ++wakes;
    }
    for (auto id : s.take_due(now)) {
      ASSERT_LE(due[id] - now, ProbeSchedule::kMaxEarly);
      ASSERT_GE(due[id] - now, milliseconds(0)) << "never late";
      if (last[id] != ProbeSchedule::TimePoint{}) {
        ASSERT_GE(now - last[id], milliseconds(4400));
        ASSERT_LE(now - last[id], milliseconds(5500));
      }
      last[id] = now;
      probes += now >= measured_from ? 1 : 0;
      const auto next = interval();
      due[id] = now + next;
      s.set(id, due[id], ProbeSchedule::allowed_early(next));
    }
  }
  const double seconds_measured = 60.0;
  EXPECT_NEAR(probes / seconds_measured, 1000.0, 50.0);
  EXPECT_LE(wakes / seconds_measured, 11.0);
  EXPECT_GE(wakes / seconds_measured, 8.0);
}

}  // namespace
}  // namespace fg::health
