#include "orchestrator/proxy/slot_broker.hpp"

#include <chrono>
#include <functional>
#include <list>
#include <optional>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

namespace fg::proxy {
namespace {

using namespace std::chrono_literals;
namespace asio = boost::asio;

constexpr ReplicaId kReplica = 7;

// Runs the io_context until the condition holds (or a generous deadline passes).
bool run_until(asio::io_context& io, const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    io.restart();
    io.run_one_for(50ms);
  }
  return done();
}

asio::awaitable<void> acquire_into(SlotBroker* broker, scheduling::Request request,
                                   std::chrono::steady_clock::duration timeout,
                                   std::optional<AcquireResult>* out) {
  *out = co_await broker->acquire("m", std::move(request), timeout);
}

class SlotBrokerTest : public ::testing::Test {
 protected:
  SlotBrokerTest() : scheduler(16), broker(scheduler) {
    scheduler.add_model("m");
    scheduler.add_replica(kReplica, "m", 1);
  }
  std::optional<AcquireResult>& spawn(scheduling::Request request = {},
                                      std::chrono::steady_clock::duration timeout = 30s) {
    results.emplace_back();
    asio::co_spawn(io, acquire_into(&broker, std::move(request), timeout, &results.back()),
                   asio::detached);
    return results.back();
  }

  scheduling::Scheduler scheduler;
  SlotBroker broker;
  asio::io_context io;
  std::list<std::optional<AcquireResult>> results;
};

TEST_F(SlotBrokerTest, CompleteHandsTheSlotToTheNextWaiterExactlyOnce) {
  auto& first = spawn();
  ASSERT_TRUE(run_until(io, [&] { return first.has_value(); }));
  ASSERT_EQ(first->error, AcquireError::none);
  EXPECT_EQ(first->lease.replica(), kReplica);
  EXPECT_NE(first->lease.waiter(), 0u);

  auto& second = spawn();
  ASSERT_TRUE(run_until(io, [&] { return scheduler.queue_depth("m") == 1; }));
  EXPECT_FALSE(second.has_value());

  scheduling::Completion done;
  done.prompt_tokens = 100;
  done.completion_tokens = 4;
  first->lease.complete(done);
  EXPECT_FALSE(first->lease);
  // Ending it again (or destroying it) does nothing: the second waiter's slot stays its own.
  first->lease.release();
  first->lease.complete(done);
  ASSERT_TRUE(run_until(io, [&] { return second.has_value(); }));
  ASSERT_EQ(second->error, AcquireError::none);
  EXPECT_EQ(scheduler.in_flight(kReplica), 1u);
  second->lease.release();
  EXPECT_EQ(scheduler.in_flight(kReplica), 0u);
}

TEST_F(SlotBrokerTest, ALeaseDestroyedUnendedFreesTheSlot) {
  {
    auto& first = spawn();
    ASSERT_TRUE(run_until(io, [&] { return first.has_value(); }));
    EXPECT_EQ(scheduler.in_flight(kReplica), 1u);
    AcquireResult moved = std::move(*first);
    first.reset();
  }
  EXPECT_EQ(scheduler.in_flight(kReplica), 0u);
}

TEST_F(SlotBrokerTest, QueueTimeoutLeavesTheQueue) {
  auto& first = spawn();
  ASSERT_TRUE(run_until(io, [&] { return first.has_value(); }));
  auto& second = spawn({}, 1ms);
  ASSERT_TRUE(run_until(io, [&] { return second.has_value(); }));
  EXPECT_EQ(second->error, AcquireError::timeout);
  EXPECT_EQ(scheduler.queue_depth("m"), 0u);
}

TEST_F(SlotBrokerTest, ASheddableRequestIsRefusedWithRetryAfterWhenNothingIsFree) {
  auto& first = spawn();
  ASSERT_TRUE(run_until(io, [&] { return first.has_value(); }));
  auto& shed = spawn(scheduling::Request{.priority = -5, .sheddable = true});
  ASSERT_TRUE(run_until(io, [&] { return shed.has_value(); }));
  EXPECT_EQ(shed->error, AcquireError::shed);
  EXPECT_GE(shed->retry_after.count(), 1);
  EXPECT_EQ(scheduler.queue_depth("m"), 0u);
}

TEST_F(SlotBrokerTest, RemovingAGroupCapDeliversTheGrantsItAllows) {
  broker.set_group_limit("batch-1", 0);
  auto& line = spawn(scheduling::Request{.priority = -1, .group = "batch-1"});
  ASSERT_TRUE(run_until(io, [&] { return scheduler.queue_depth("m") == 1; }));
  EXPECT_FALSE(line.has_value());
  broker.set_group_limit("batch-1", std::nullopt);
  ASSERT_TRUE(run_until(io, [&] { return line.has_value(); }));
  EXPECT_EQ(line->error, AcquireError::none);
  EXPECT_EQ(scheduler.group_in_flight("batch-1"), 1u);
  line->lease.release();
  EXPECT_EQ(scheduler.group_in_flight("batch-1"), 0u);
}

TEST_F(SlotBrokerTest, AHigherBandOvertakesALowerOneInTheQueue) {
  auto& first = spawn();
  ASSERT_TRUE(run_until(io, [&] { return first.has_value(); }));
  auto& low = spawn(scheduling::Request{.priority = -1});
  ASSERT_TRUE(run_until(io, [&] { return scheduler.queue_depth("m") == 1; }));
  auto& high = spawn(scheduling::Request{.priority = 10});
  ASSERT_TRUE(run_until(io, [&] { return scheduler.queue_depth("m") == 2; }));
  first->lease.release();
  ASSERT_TRUE(run_until(io, [&] { return high.has_value(); }));
  EXPECT_FALSE(low.has_value());
  high->lease.release();
  ASSERT_TRUE(run_until(io, [&] { return low.has_value(); }));
}

// With expected_finish a waiter may be held for a busy replica; the wakeup timer re-decides when
// the hold runs out, with no other event.
TEST_F(SlotBrokerTest, TheWakeupTimerEndsAHoldByTimeAlone) {
  scheduling::RoutingOptions options;
  options.policy = scheduling::RoutingPolicy::expected_finish;
  options.exploration = 0;
  broker.set_options(options);
  broker.start(io.get_executor());
  // A fast replica busy with a short request, a slow free one: a newcomer is held for the fast
  // one (its expected finish there is far sooner), and released to whichever when the hold
  // ends. Speeds: 1000 tokens/s against 1.
  constexpr ReplicaId kSlow = 8;
  broker.deliver(scheduler.add_replica(kSlow, "m", 1));
  scheduler.set_measured_speeds(kReplica, 1e6, 1e6);
  scheduler.set_measured_speeds(kSlow, 1.0, 1.0);
  scheduling::Request small;
  small.prompt_bytes = 4;
  small.max_tokens = 2;  // one decode step after the token that ends prefill
  auto& busy = spawn(small);
  ASSERT_TRUE(run_until(io, [&] { return busy.has_value(); }));
  ASSERT_EQ(busy->lease.replica(), kReplica);
  auto& held = spawn(small);
  ASSERT_TRUE(run_until(io, [&] { return scheduler.queue_depth("m") == 1; }));
  // Held for the busy fast replica (free slow one: ~2 s; behind the fast one: ~0 s + 1 s gain).
  EXPECT_TRUE(scheduler.held(busy->lease.waiter() + 1));
  ASSERT_TRUE(broker.wakeup_at().has_value());
  // Nothing else happens: the busy binding overruns its expected end, the gain melts within
  // about a second, and the timer's tick binds the held request to the free slow replica.
  ASSERT_TRUE(run_until(io, [&] { return held.has_value(); }));
  ASSERT_EQ(held->error, AcquireError::none);
  EXPECT_EQ(held->lease.replica(), kSlow);
}

TEST_F(SlotBrokerTest, TryAcquireGrantsAFreeSlotAtOnce) {
  AcquireStart start = broker.try_acquire("m", {});
  EXPECT_FALSE(start.queued);
  ASSERT_EQ(start.result.error, AcquireError::none);
  EXPECT_EQ(start.result.lease.replica(), kReplica);
  EXPECT_EQ(scheduler.in_flight(kReplica), 1u);
  EXPECT_EQ(broker.try_acquire("nope", {}).result.error, AcquireError::unknown_model);
}

TEST_F(SlotBrokerTest, AQueueTicketNeverWaitedOnLeavesTheQueue) {
  AcquireStart first = broker.try_acquire("m", {});
  ASSERT_TRUE(first.result.lease);
  {
    // Queued, then dropped before a wait took it over (a cancelled coroutine that never ran).
    AcquireStart second = broker.try_acquire("m", {});
    ASSERT_TRUE(second.queued);
    EXPECT_EQ(scheduler.queue_depth("m"), 1u);
  }
  EXPECT_EQ(scheduler.queue_depth("m"), 0u);
  // The slot it would have had goes to the next one.
  first.result.lease.release();
  EXPECT_EQ(broker.try_acquire("m", {}).result.lease.replica(), kReplica);
}

TEST_F(SlotBrokerTest, AQueuedTicketIsGrantedThroughWaitQueued) {
  AcquireStart first = broker.try_acquire("m", {});
  ASSERT_TRUE(first.result.lease);
  AcquireStart second = broker.try_acquire("m", {});
  ASSERT_TRUE(second.queued);
  std::optional<AcquireResult> waited;
  asio::co_spawn(
      io,
      [](SlotBroker* broker, QueueTicket ticket,
         std::optional<AcquireResult>* out) -> asio::awaitable<void> {
        *out = co_await broker->wait_queued(std::move(ticket), 30s);
      }(&broker, std::move(second.queued), &waited),
      asio::detached);
  ASSERT_TRUE(run_until(io, [&] { return scheduler.queue_depth("m") == 1; }));
  EXPECT_FALSE(waited.has_value());
  first.result.lease.release();
  ASSERT_TRUE(run_until(io, [&] { return waited.has_value(); }));
  ASSERT_EQ(waited->error, AcquireError::none);
  EXPECT_EQ(waited->lease.replica(), kReplica);
}

}  // namespace
}  // namespace fg::proxy
