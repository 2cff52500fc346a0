// net::WorkPool and net::OffThread: the work runs on a pool thread while the io thread goes on
// serving (a job that waits for a handler the io thread runs would deadlock otherwise), the
// coroutine resumes on the io thread with the result, and a closed pool runs the work inline
// instead of losing it. Each test ends on its events; waits have deadlines, never sleeps.

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "common/net/off_thread.hpp"
#include "common/net/work_pool.hpp"

namespace fg::net {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

TEST(WorkPool, RunsJobsOnItsThreadsAndStartsThemOnlyAsNeeded) {
  WorkPool pool(2, WorkPool::Priority::same);
  EXPECT_EQ(pool.threads(), 0u);
  std::promise<std::thread::id> ran;
  auto job = WorkPool::make_job([&ran] { ran.set_value(std::this_thread::get_id()); });
  ASSERT_TRUE(pool.submit(job));
  EXPECT_EQ(job, nullptr);
  auto id = ran.get_future();
  ASSERT_EQ(id.wait_for(10s), std::future_status::ready);
  EXPECT_NE(id.get(), std::this_thread::get_id());
  EXPECT_EQ(pool.threads(), 1u);
}

TEST(WorkPool, AClosedPoolRefusesAndLeavesTheJobToTheCaller) {
  WorkPool pool(1, WorkPool::Priority::same);
  pool.close();
  bool ran = false;
  auto job = WorkPool::make_job([&ran] { ran = true; });
  EXPECT_FALSE(pool.submit(job));
  ASSERT_NE(job, nullptr);
  job->run();
  EXPECT_TRUE(ran);
}

TEST(WorkPool, AFullQueueRefuses) {
  WorkPool pool(1, WorkPool::Priority::same, /*max_queued=*/1);
  std::promise<void> release;
  auto released = release.get_future().share();
  std::promise<void> started;
  auto first = WorkPool::make_job([released, &started] {
    started.set_value();
    released.wait();
  });
  ASSERT_TRUE(pool.submit(first));
  ASSERT_EQ(started.get_future().wait_for(10s), std::future_status::ready);
  auto second = WorkPool::make_job([] {});
  ASSERT_TRUE(pool.submit(second));  // queued behind the running one
  auto third = WorkPool::make_job([] {});
  EXPECT_FALSE(pool.submit(third));
  release.set_value();
}

TEST(WorkPool, IdlePriorityRunsJobsUnderSchedIdle) {
  WorkPool pool(1, WorkPool::Priority::idle);
  std::promise<int> policy;
  auto job = WorkPool::make_job([&policy] { policy.set_value(::sched_getscheduler(0)); });
  ASSERT_TRUE(pool.submit(job));
  auto value = policy.get_future();
  ASSERT_EQ(value.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(value.get(), SCHED_IDLE);
  EXPECT_EQ(::sched_getscheduler(0), SCHED_OTHER);  // the creator's own policy is untouched
}

TEST(WorkPool, SamePriorityKeepsTheCreatorsPolicy) {
  WorkPool pool(1, WorkPool::Priority::same);
  std::promise<int> policy;
  auto job = WorkPool::make_job([&policy] { policy.set_value(::sched_getscheduler(0)); });
  ASSERT_TRUE(pool.submit(job));
  auto value = policy.get_future();
  ASSERT_EQ(value.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(value.get(), ::sched_getscheduler(0));
}

// The io thread keeps serving while the work runs: the work waits for a handler that only the io
// thread can run. Inline work would wait for itself; the deadline turns that into a failure.
TEST(OffThread, TheIoThreadServesOthersWhileTheWorkRunsAndResumesWithItsResult) {
  asio::io_context io{1};
  WorkPool pool(1, WorkPool::Priority::same);
  OffThread off_pool(io.get_executor(), &pool);
  const auto io_thread = std::this_thread::get_id();
  auto io_served = std::make_shared<std::promise<void>>();
  auto served = io_served->get_future().share();
  std::string result;
  bool resumed_on_io = false;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        // Named, not a temporary in the co_await expression (see off_thread.hpp).
        auto work = [served, io_thread] {
          const bool elsewhere = std::this_thread::get_id() != io_thread;
          const bool others_served = served.wait_for(10s) == std::future_status::ready;
          return std::string(elsewhere ? "pool" : "io") + (others_served ? "+served" : "+blocked");
        };
        result = co_await off_pool.run(std::move(work));
        resumed_on_io = std::this_thread::get_id() == io_thread;
      },
      asio::detached);
  asio::post(io, [io_served] { io_served->set_value(); });
  io.run_for(20s);
  EXPECT_EQ(result, "pool+served");
  EXPECT_TRUE(resumed_on_io);
  EXPECT_EQ(off_pool.in_flight(), 0u);
}

TEST(OffThread, AClosedPoolRunsTheWorkInline) {
  asio::io_context io{1};
  WorkPool pool(1, WorkPool::Priority::same);
  OffThread off(io.get_executor(), &pool);
  pool.close();
  const auto io_thread = std::this_thread::get_id();
  std::optional<bool> inline_run;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto work = [io_thread] { return std::this_thread::get_id() == io_thread; };
        inline_run = co_await off.run(std::move(work));
      },
      asio::detached);
  io.run_for(20s);
  ASSERT_TRUE(inline_run.has_value());
  EXPECT_TRUE(*inline_run);
}

// An exception thrown by the work on a pool thread reaches the coroutine, on the io thread,
// instead of ending the process.
TEST(OffThread, AnExceptionFromTheWorkIsRethrownByTheAwait) {
  asio::io_context io{1};
  WorkPool pool(1, WorkPool::Priority::same);
  OffThread off(io.get_executor(), &pool);
  std::string caught;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto work = []() -> int { throw std::runtime_error("scan failed"); };
        try {
          co_await off.run(std::move(work));
        } catch (const std::runtime_error& e) {
          caught = e.what();
        }
      },
      asio::detached);
  io.run_for(20s);
  EXPECT_EQ(caught, "scan failed");
  EXPECT_EQ(off.in_flight(), 0u);
}

// A move-only result (the inspected body's findings hold strings and vectors) arrives whole.
TEST(OffThread, MoveOnlyResultsAndManyAtOnce) {
  asio::io_context io{1};
  WorkPool pool(2, WorkPool::Priority::same);
  OffThread off_pool(io.get_executor(), &pool);
  std::unique_ptr<std::string> got;
  asio::co_spawn(
      io,
      [&]() -> asio::awaitable<void> {
        auto work = [] { return std::make_unique<std::string>(1 << 20, 'x'); };
        got = co_await off_pool.run(std::move(work));
      },
      asio::detached);
  // Many coroutines waiting at once: every one resumes once, with its own result.
  constexpr int kMany = 200;
  int sum = 0;
  int resumed = 0;
  for (int i = 1; i <= kMany; ++i) {
    asio::co_spawn(
        io,
        [&, i]() -> asio::awaitable<void> {
          auto work = [i] { return i; };
          sum += co_await off_pool.run(std::move(work));
          ++resumed;
        },
        asio::detached);
  }
  io.run_for(20s);
  ASSERT_NE(got, nullptr);
  EXPECT_EQ(got->size(), 1u << 20);
  EXPECT_EQ(resumed, kMany);
  EXPECT_EQ(sum, kMany * (kMany + 1) / 2);
  EXPECT_EQ(off_pool.in_flight(), 0u);
}

}  // namespace
}  // namespace fg::net
