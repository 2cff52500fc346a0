#include "common/net/session_tracker.hpp"

#include <gtest/gtest.h>

namespace fg::net {
namespace {

struct FakeSession : Closable {
  int closed = 0;
  void close() override { ++closed; }
};

TEST(SessionTracker, DrainClosesIdleSessionsAtOnceAndBusyOnesWhenDone) {
  SessionTracker tracker;
  FakeSession idle, busy;
  const auto idle_id = tracker.add(&idle);
  const auto busy_id = tracker.add(&busy);
  tracker.set_busy(busy_id, true);
  int drained = 0;
  tracker.begin_drain([&] { ++drained; });
  EXPECT_TRUE(tracker.draining());
  EXPECT_EQ(idle.closed, 1);
  EXPECT_EQ(busy.closed, 0);
  EXPECT_EQ(drained, 0);
  tracker.set_busy(busy_id, false);
  EXPECT_EQ(busy.closed, 1);
  EXPECT_EQ(drained, 1);
  tracker.remove(idle_id);
  tracker.remove(busy_id);
  EXPECT_EQ(drained, 1);  // once
  EXPECT_EQ(tracker.size(), 0u);
}

TEST(SessionTracker, DrainWithNothingBusyCallsBackAtOnce) {
  SessionTracker tracker;
  int drained = 0;
  tracker.begin_drain([&] { ++drained; });
  EXPECT_EQ(drained, 1);
}

TEST(SessionTracker, ABusySessionThatEndsCountsAsDone) {
  SessionTracker tracker;
  FakeSession s;
  const auto id = tracker.add(&s);
  tracker.set_busy(id, true);
  tracker.set_busy(id, true);  // idempotent
  EXPECT_EQ(tracker.busy(), 1u);
  int drained = 0;
  tracker.begin_drain([&] { ++drained; });
  tracker.remove(id);
  EXPECT_EQ(tracker.busy(), 0u);
  EXPECT_EQ(drained, 1);
}

TEST(SessionTracker, ForgottenCallbackAndCloseAll) {
  SessionTracker tracker;
  FakeSession a, b;
  tracker.add(&a);
  const auto id = tracker.add(&b);
  tracker.set_busy(id, true);
  int drained = 0;
  tracker.begin_drain([&] { ++drained; });
  tracker.forget_drain_callback();
  tracker.close_all();
  EXPECT_EQ(a.closed, 2);  // by the drain, then by close_all
  EXPECT_EQ(b.closed, 1);
  tracker.set_busy(id, false);
  EXPECT_EQ(drained, 0);
}

}  // namespace
}  // namespace fg::net
