#include "orchestrator/admin/rate_history.hpp"

#include <gtest/gtest.h>

namespace fg::admin {
namespace {

using std::chrono::seconds;
using TimePoint = RateHistory::TimePoint;

const TimePoint t0{seconds(1000)};

TEST(RateHistory, FirstSampleHasNoIntervalYet) {
  RateHistory h(10);
  h.sample(t0, {{"m", {5, 100}}});
  EXPECT_TRUE(h.points("m").empty());
  EXPECT_EQ(h.recent("m", seconds(10)).requests_per_second, 0);
  EXPECT_TRUE(h.points("other").empty());
}

TEST(RateHistory, RatesAreDeltasOverTheInterval) {
  RateHistory h(10);
  h.sample(t0, {{"m", {5, 100}}});
  h.sample(t0 + seconds(2), {{"m", {9, 300}}});
  auto points = h.points("m");
  ASSERT_EQ(points.size(), 1u);
  EXPECT_DOUBLE_EQ(points[0].requests_per_second, 2.0);
  EXPECT_DOUBLE_EQ(points[0].tokens_per_second, 100.0);
  EXPECT_EQ(points[0].from, t0);
  EXPECT_EQ(points[0].at, t0 + seconds(2));
}

TEST(RateHistory, KeepsOnlyCapacityIntervalsOldestFirst) {
  RateHistory h(3);
  for (int i = 0; i <= 6; ++i) {
    h.sample(t0 + seconds(i), {{"m", {static_cast<std::uint64_t>(i * i), 0}}});
  }
  auto points = h.points("m");
  ASSERT_EQ(points.size(), 3u);
  // Intervals 3-4, 4-5, 5-6: i*i deltas 7, 9, 11.
  EXPECT_DOUBLE_EQ(points[0].requests_per_second, 7);
  EXPECT_DOUBLE_EQ(points[1].requests_per_second, 9);
  EXPECT_DOUBLE_EQ(points[2].requests_per_second, 11);
}

TEST(RateHistory, RecentAveragesTheIntervalsInsideTheWindowWeightedByLength) {
  RateHistory h(100);
  h.sample(t0, {{"m", {0, 0}}});
  h.sample(t0 + seconds(10), {{"m", {100, 0}}});  // 10/s over 10 s
  h.sample(t0 + seconds(12), {{"m", {100, 0}}});  // 0/s over 2 s
  h.sample(t0 + seconds(14), {{"m", {120, 0}}});  // 10/s over 2 s
  // Window 5 s: the two newest intervals (4 s, 20 requests).
  EXPECT_DOUBLE_EQ(h.recent("m", seconds(5)).requests_per_second, 5.0);
  EXPECT_EQ(h.recent("m", seconds(5)).from, t0 + seconds(10));
  // Window 60 s: all of them (14 s, 120 requests).
  EXPECT_NEAR(h.recent("m", seconds(60)).requests_per_second, 120.0 / 14.0, 1e-9);
  // A window shorter than the newest interval still reports that interval.
  EXPECT_DOUBLE_EQ(h.recent("m", seconds(1)).requests_per_second, 10.0);
}

TEST(RateHistory, ACounterThatWentDownRestartsFromZero) {
  RateHistory h(10);
  h.sample(t0, {{"m", {50, 500}}});
  h.sample(t0 + seconds(1), {{"m", {3, 30}}});
  auto points = h.points("m");
  ASSERT_EQ(points.size(), 1u);
  EXPECT_DOUBLE_EQ(points[0].requests_per_second, 3);
  EXPECT_DOUBLE_EQ(points[0].tokens_per_second, 30);
}

TEST(RateHistory, ModelsThatLeaveAreForgottenAndNewOnesStartFresh) {
  RateHistory h(10);
  h.sample(t0, {{"a", {0, 0}}, {"b", {0, 0}}});
  h.sample(t0 + seconds(1), {{"a", {1, 0}}, {"b", {2, 0}}});
  h.sample(t0 + seconds(2), {{"a", {2, 0}}});
  EXPECT_EQ(h.points("a").size(), 2u);
  EXPECT_TRUE(h.points("b").empty());
  h.sample(t0 + seconds(3), {{"a", {3, 0}}, {"b", {100, 0}}});
  EXPECT_TRUE(h.points("b").empty());  // a first sample again, not a jump of 100
}

TEST(RateHistory, ASampleThatIsNotLaterIsIgnored) {
  RateHistory h(10);
  h.sample(t0, {{"m", {0, 0}}});
  h.sample(t0, {{"m", {5, 0}}});
  h.sample(t0 - seconds(1), {{"m", {6, 0}}});
  EXPECT_TRUE(h.points("m").empty());
  h.sample(t0 + seconds(1), {{"m", {7, 0}}});
  ASSERT_EQ(h.points("m").size(), 1u);
  EXPECT_DOUBLE_EQ(h.points("m")[0].requests_per_second, 7);
}

}  // namespace
}  // namespace fg::admin
