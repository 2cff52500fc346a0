#include "replica-agent/core/admission.hpp"

#include <gtest/gtest.h>

#include <optional>
#include <vector>

namespace fg::agent {
namespace {

TEST(AgentAdmission, NeverMoreThanSlots) {
  Admission admission(2);
  auto a = admission.try_acquire("a");
  auto b = admission.try_acquire("b");
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->slot(), b->slot());
  EXPECT_EQ(admission.busy(), 2u);
  EXPECT_EQ(admission.idle(), 0u);
  EXPECT_FALSE(admission.try_acquire("c").has_value());
  a.reset();
  EXPECT_EQ(admission.busy(), 1u);
  auto c = admission.try_acquire("c");
  ASSERT_TRUE(c.has_value());
  EXPECT_FALSE(admission.try_acquire("d").has_value());
}

TEST(AgentAdmission, GuardReleasesExactlyOnceWhenMoved) {
  Admission admission(1);
  std::optional<SlotGuard> held;
  {
    auto g = admission.try_acquire("x");
    ASSERT_TRUE(g);
    held.emplace(std::move(*g));
  }  // the moved-from guard frees nothing
  EXPECT_EQ(admission.busy(), 1u);
  held.reset();
  EXPECT_EQ(admission.busy(), 0u);
}

TEST(AgentAdmission, PrefersTheSlotWithTheLongestCachedPrefix) {
  Admission admission(2);
  {
    auto a = admission.try_acquire("");
    auto b = admission.try_acquire("");
    admission.remember(*b, std::string(400, 'q'));
  }
  auto g = admission.try_acquire(std::string(400, 'q') + "next turn");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->slot(), 1u);
  EXPECT_EQ(admission.cached_tokens(*g, std::string(400, 'q') + "next turn"), 100u);
}

TEST(AgentAdmission, ResizeOnlyWhenIdle) {
  Admission admission(1);
  EXPECT_TRUE(admission.resize(4));
  EXPECT_EQ(admission.total(), 4u);
  auto g = admission.try_acquire("x");
  EXPECT_FALSE(admission.resize(2));
  EXPECT_EQ(admission.total(), 4u);
  g.reset();
  EXPECT_FALSE(admission.resize(0));
  EXPECT_TRUE(admission.resize(2));
  std::vector<SlotGuard> guards;
  while (auto next = admission.try_acquire("")) {
    guards.push_back(std::move(*next));
  }
  EXPECT_EQ(guards.size(), 2u);
}

}  // namespace
}  // namespace fg::agent
