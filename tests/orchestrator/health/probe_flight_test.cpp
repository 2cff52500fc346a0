#include "orchestrator/health/probe_flight.hpp"

#include <gtest/gtest.h>

#include <chrono>

namespace fg::health {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

ProbeFlight::TimePoint at_ms(int ms) {
  return ProbeFlight::TimePoint{} + milliseconds(ms);
}

// Sent at 1,000 ms (steady) = 5,000,000,000 ns on the wall clock; 3 s timeout, looks every 100 ms.
ProbeFlight flight() {
  return ProbeFlight{at_ms(1000), 5'000'000'000, seconds(3), milliseconds(100)};
}

std::int64_t unix_at_ms(int ms_after_sent) {
  return 5'000'000'000 + std::int64_t{ms_after_sent} * 1'000'000;
}

TEST(ProbeFlight, LooksAgainAfterLookAfterUntilTheDeadline) {
  const auto f = flight();
  EXPECT_EQ(f.deadline(), at_ms(4000));
  EXPECT_EQ(f.next_look(at_ms(1100)), at_ms(1200));
  EXPECT_EQ(f.next_look(at_ms(3850)), at_ms(3950));
  // Never past the deadline: the last look is at it, so a timeout is found when it passes.
  EXPECT_EQ(f.next_look(at_ms(3950)), at_ms(4000));
  EXPECT_EQ(f.next_look(at_ms(3999)), at_ms(4000));
}

TEST(ProbeFlight, AtOrAfterTheDeadlineItTimedOut) {
  const auto f = flight();
  EXPECT_FALSE(f.next_look(at_ms(4000)));
  EXPECT_FALSE(f.next_look(at_ms(9000)));
}

TEST(ProbeFlight, AnAnswerTookUntilTheKernelReceivedIt) {
  const auto f = flight();
  // Read 100 ms after it was sent, received 2 ms after: it took 2 ms, not 100.
  EXPECT_EQ(f.answer_took(unix_at_ms(2), at_ms(1100)), milliseconds(2));
  EXPECT_EQ(f.answer_took(unix_at_ms(0), at_ms(1100)), milliseconds(0));
  EXPECT_EQ(f.answer_took(unix_at_ms(100), at_ms(1100)), milliseconds(100));
}

TEST(ProbeFlight, WithoutAPlausibleTimestampItTookUntilItWasRead) {
  const auto f = flight();
  EXPECT_EQ(f.answer_took(std::nullopt, at_ms(1100)), milliseconds(100));
  // The wall clock was stepped: a receive time before the send or after now is not believed.
  EXPECT_EQ(f.answer_took(unix_at_ms(-5), at_ms(1100)), milliseconds(100));
  EXPECT_EQ(f.answer_took(unix_at_ms(500), at_ms(1100)), milliseconds(100));
  // A clock read before the send gives no negative time.
  EXPECT_EQ(f.answer_took(std::nullopt, at_ms(900)), milliseconds(0));
}

TEST(ProbeFlight, AnAnswerAfterTheTimeoutIsATimeout) {
  const auto f = flight();
  EXPECT_TRUE(f.in_time(milliseconds(2)));
  EXPECT_TRUE(f.in_time(seconds(3)));
  EXPECT_FALSE(f.in_time(seconds(3) + milliseconds(1)));
  // Received 1 ms past the deadline and read at the look after it: a timeout.
  EXPECT_FALSE(f.in_time(f.answer_took(unix_at_ms(3001), at_ms(4050))));
}

}  // namespace
}  // namespace fg::health
