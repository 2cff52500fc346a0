#include "common/util/duration.hpp"

#include <limits>

#include <gtest/gtest.h>

namespace fg {
namespace {

using std::chrono::hours;
using std::chrono::milliseconds;
using std::chrono::minutes;
using std::chrono::seconds;

TEST(DurationParse, AcceptsEachUnit) {
  EXPECT_EQ(parse_duration("250ms"), milliseconds(250));
  EXPECT_EQ(parse_duration("10s"), seconds(10));
  EXPECT_EQ(parse_duration("5m"), minutes(5));
  EXPECT_EQ(parse_duration("1h"), hours(1));
}

TEST(DurationParse, AcceptsZeroAndLeadingZeros) {
  EXPECT_EQ(parse_duration("0s"), milliseconds(0));
  EXPECT_EQ(parse_duration("0ms"), milliseconds(0));
  EXPECT_EQ(parse_duration("007s"), seconds(7));
}

TEST(DurationParse, LargeValuesAreExact) {
  EXPECT_EQ(parse_duration("600000ms"), minutes(10));
  EXPECT_EQ(parse_duration("2562047788015h"), hours(2562047788015));  // fits in int64 ms
}

TEST(DurationParse, RejectsBareNumber) {
  EXPECT_EQ(parse_duration("10"), std::nullopt);
  EXPECT_EQ(parse_duration("0"), std::nullopt);
}

TEST(DurationParse, RejectsMalformed) {
  for (const char* text :
       {"",    "s",    "ms", "-1s", "+1s",  "1.5s", " 1s", "1s ",  "1 s",   "1S",
        "1MS", "1sec", "1d", "1us", "1ms5", "1s1",  "1hm", "1mss", "0x10s", "１s"}) {
    EXPECT_EQ(parse_duration(text), std::nullopt) << "input: '" << text << "'";
  }
}

TEST(DurationParse, RejectsOverflow) {
  // int64 max is 9223372036854775807 ms: one more, or a unit multiplier past it, must fail.
  EXPECT_EQ(parse_duration("9223372036854775807ms"),
            milliseconds(std::numeric_limits<std::int64_t>::max()));
  EXPECT_EQ(parse_duration("9223372036854775808ms"), std::nullopt);
  EXPECT_EQ(parse_duration("9223372036854776s"), std::nullopt);
  EXPECT_EQ(parse_duration("2562047788016h"), std::nullopt);
  EXPECT_EQ(parse_duration("99999999999999999999999999h"), std::nullopt);
}

TEST(DurationFormat, PicksLargestExactUnit) {
  EXPECT_EQ(format_duration(milliseconds(1500)), "1500ms");
  EXPECT_EQ(format_duration(seconds(10)), "10s");
  EXPECT_EQ(format_duration(minutes(2)), "2m");
  EXPECT_EQ(format_duration(hours(3)), "3h");
  EXPECT_EQ(format_duration(seconds(90)), "90s");
  EXPECT_EQ(format_duration(minutes(90)), "90m");
  EXPECT_EQ(format_duration(milliseconds(1)), "1ms");
  EXPECT_EQ(format_duration(milliseconds(60'001)), "60001ms");
}

TEST(DurationFormat, ZeroIsSeconds) {
  EXPECT_EQ(format_duration(milliseconds(0)), "0s");
}

TEST(DurationFormat, NegativeKeepsSign) {
  EXPECT_EQ(format_duration(seconds(-2)), "-2s");
  EXPECT_EQ(format_duration(milliseconds(-1500)), "-1500ms");
}

TEST(DurationFormat, RoundTripsThroughParse) {
  for (long long ms : {0LL, 1LL, 999LL, 1000LL, 1001LL, 59'999LL, 60'000LL, 3'600'000LL,
                       7'200'000LL, 86'400'000LL, 123'456'789LL}) {
    const milliseconds d(ms);
    EXPECT_EQ(parse_duration(format_duration(d)), d) << ms;
  }
}

}  // namespace
}  // namespace fg
