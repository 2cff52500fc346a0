#include "common/net/connection_limits.hpp"

#include <gtest/gtest.h>

namespace fg::net {
namespace {

TEST(ConnectionLimiter, CapsTheTotalAndEachAddress) {
  ConnectionLimiter limiter({3, 2});
  EXPECT_EQ(limiter.admit("10.0.0.1"), Admission::admitted);
  EXPECT_EQ(limiter.admit("10.0.0.1"), Admission::admitted);
  EXPECT_EQ(limiter.admit("10.0.0.1"), Admission::over_per_address);
  EXPECT_EQ(limiter.admit("10.0.0.2"), Admission::admitted);
  EXPECT_EQ(limiter.admit("10.0.0.3"), Admission::over_total);
  EXPECT_EQ(limiter.open(), 3u);
  EXPECT_EQ(limiter.open_from("10.0.0.1"), 2u);
  EXPECT_EQ(limiter.open_from("10.0.0.3"), 0u);
  limiter.release("10.0.0.1");
  EXPECT_EQ(limiter.admit("10.0.0.3"), Admission::admitted);
  EXPECT_EQ(limiter.open(), 3u);
}

TEST(ConnectionLimiter, ZeroPerAddressMeansNoPerAddressCap) {
  ConnectionLimiter limiter({5, 0});
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(limiter.admit("a"), Admission::admitted);
  }
  EXPECT_EQ(limiter.admit("a"), Admission::over_total);
}

TEST(ConnectionLimiter, ReleasingForgetsAddressesAndNewCapsApplyToNewConnections) {
  ConnectionLimiter limiter({10, 1});
  EXPECT_EQ(limiter.admit("a"), Admission::admitted);
  limiter.release("a");
  limiter.release("a");  // a second release of the same connection changes nothing
  EXPECT_EQ(limiter.open(), 0u);
  EXPECT_EQ(limiter.admit("a"), Admission::admitted);
  limiter.set_caps({1, 1});
  EXPECT_EQ(limiter.admit("b"), Admission::over_total);
  limiter.set_caps({10, 2});
  EXPECT_EQ(limiter.admit("a"), Admission::admitted);
  EXPECT_EQ(to_string(Admission::over_total), std::string("max_connections"));
  EXPECT_EQ(to_string(Admission::over_per_address), std::string("max_connections_per_ip"));
}

TEST(LogThrottle, OneLinePerIntervalWithTheCountHeldBack) {
  using namespace std::chrono;
  LogThrottle throttle(seconds(10));
  const auto t0 = steady_clock::time_point{} + hours(1);
  std::uint64_t held = 99;
  EXPECT_TRUE(throttle.allow(t0, &held));
  EXPECT_EQ(held, 0u);
  EXPECT_FALSE(throttle.allow(t0 + seconds(1), &held));
  EXPECT_FALSE(throttle.allow(t0 + seconds(9), &held));
  EXPECT_TRUE(throttle.allow(t0 + seconds(10), &held));
  EXPECT_EQ(held, 2u);
  EXPECT_TRUE(throttle.allow(t0 + seconds(30), &held));
  EXPECT_EQ(held, 0u);
}

TEST(DescriptorBudget, FitsOrNamesTheKeyAndTheLargestValueThatFits) {
  DescriptorBudget budget{10000, 256, 500};
  EXPECT_EQ(budget.needed(), 10756u);
  EXPECT_FALSE(check_descriptor_budget(budget, 10756, "server.max_connections"));
  auto problem = check_descriptor_budget(budget, 4096, "server.max_connections");
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->rfind("server.max_connections: ", 0), 0u) << *problem;
  EXPECT_NE(problem->find("at most 3340"), std::string::npos) << *problem;
  EXPECT_NE(problem->find("4096"), std::string::npos) << *problem;
  auto none_fits = check_descriptor_budget(budget, 600, "server.max_connections");
  ASSERT_TRUE(none_fits);
  EXPECT_NE(none_fits->find("none does"), std::string::npos) << *none_fits;
}

}  // namespace
}  // namespace fg::net
