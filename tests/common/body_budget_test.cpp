#include "common/net/body_budget.hpp"

#include <vector>

#include <gtest/gtest.h>

namespace fg::net {
namespace {

constexpr std::uint64_t kMiB = 1024 * 1024;

TEST(BodyBudget, ReservesUntilTheLimitAndReleasesOnDestruction) {
  BodyBudget budget;
  {
    auto a = budget.try_reserve(60 * 1024, 100 * 1024);
    ASSERT_TRUE(a);
    EXPECT_EQ(budget.used(), 60u * 1024);
    EXPECT_FALSE(budget.try_reserve(50 * 1024, 100 * 1024)) << "over the limit";
    auto b = budget.try_reserve(40 * 1024, 100 * 1024);
    ASSERT_TRUE(b) << "exactly the limit fits";
    EXPECT_EQ(budget.used(), 100u * 1024);
  }
  EXPECT_EQ(budget.used(), 0u);
}

TEST(BodyBudget, ZeroBytesAlwaysFit) {
  BodyBudget budget;
  auto full = budget.try_reserve(BodyBudget::kSmallBody, BodyBudget::kSmallBody);
  ASSERT_TRUE(full);
  auto none = budget.try_reserve(0, BodyBudget::kSmallBody);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->bytes(), 0u);
  EXPECT_EQ(budget.used(), BodyBudget::kSmallBody);
}

TEST(BodyBudget, LargeBodiesLeaveTheLastQuarterToSmallOnes) {
  BodyBudget budget;
  const std::uint64_t limit = 16 * kMiB;
  std::vector<BodyBudget::Reservation> held;
  for (int i = 0; i < 3; ++i) {
    auto r = budget.try_reserve(4 * kMiB, limit);
    ASSERT_TRUE(r) << i;
    held.push_back(std::move(*r));
  }
  EXPECT_FALSE(budget.try_reserve(4 * kMiB, limit))
      << "a fourth large body would use the last quarter";
  EXPECT_FALSE(budget.try_reserve(BodyBudget::kSmallBody + 1, limit));
  for (int i = 0; i < 64; ++i) {
    auto r = budget.try_reserve(BodyBudget::kSmallBody, limit);
    ASSERT_TRUE(r) << "small bodies still fit: " << i;
    held.push_back(std::move(*r));
  }
  EXPECT_EQ(budget.used(), limit);
  EXPECT_FALSE(budget.try_reserve(1, limit)) << "the whole budget is used";
}

TEST(BodyBudget, AMovedReservationReleasesOnce) {
  BodyBudget budget;
  auto a = budget.try_reserve(10, 100);
  ASSERT_TRUE(a);
  BodyBudget::Reservation moved = std::move(*a);
  BodyBudget::Reservation assigned;
  assigned = std::move(moved);
  EXPECT_EQ(budget.used(), 10u);
  a.reset();
  EXPECT_EQ(budget.used(), 10u);
  assigned = BodyBudget::Reservation{};
  EXPECT_EQ(budget.used(), 0u);
}

TEST(BodyBudget, ALowerLimitAfterAReloadRefusesNewBodiesOnly) {
  BodyBudget budget;
  auto a = budget.try_reserve(80, 100);
  ASSERT_TRUE(a);
  EXPECT_FALSE(budget.try_reserve(1, 50)) << "already over the new limit";
  a.reset();
  EXPECT_TRUE(budget.try_reserve(50, 50));
}

}  // namespace
}  // namespace fg::net
