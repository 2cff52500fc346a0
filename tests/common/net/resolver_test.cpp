#include "common/net/resolver.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>

namespace fg::net {
namespace {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// A fake DNS on the pool's threads: names listed in `held` block until released.
struct FakeDns {
  std::mutex mutex;
  std::condition_variable changed;
  std::set<std::string> held;
  std::map<std::string, int> calls;
  std::set<std::string> failing;

  LookupResult lookup(const std::string& host) {
    std::unique_lock lock(mutex);
    ++calls[host];
    changed.notify_all();
    changed.wait(lock, [&] { return held.count(host) == 0; });
    LookupResult r;
    if (failing.count(host) != 0) {
      r.error = LookupResult::Error::not_found;
      r.message = "not found";
    } else {
      r.addresses = {"192.0.2.7"};
    }
    return r;
  }
  void hold(const std::string& host) {
    std::unique_lock lock(mutex);
    held.insert(host);
  }
  void release(const std::string& host) {
    std::unique_lock lock(mutex);
    held.erase(host);
    changed.notify_all();
  }
  int calls_of(const std::string& host) {
    std::unique_lock lock(mutex);
    return calls[host];
  }
};

LookupFn fake(std::shared_ptr<FakeDns> dns) {
  return [dns](const std::string& host, std::uint16_t) { return dns->lookup(host); };
}

asio::awaitable<void> resolve_into(Resolver* resolver, std::string host, Clock::time_point deadline,
                                   std::optional<ResolveResult>* out) {
  *out = co_await resolver->resolve(host, 443, deadline);
}

void start(asio::io_context& io, Resolver& resolver, const std::string& host,
           Clock::time_point deadline, std::optional<ResolveResult>* out) {
  asio::co_spawn(io, resolve_into(&resolver, host, deadline, out), asio::detached);
}

// Runs the io_context until pred holds (true) or 10 s passed (false).
template <typename Pred>
bool run_until(asio::io_context& io, Pred pred) {
  const auto deadline = Clock::now() + 10s;
  while (!pred()) {
    if (Clock::now() > deadline) {
      return false;
    }
    io.restart();
    io.run_one_for(20ms);
  }
  return true;
}

class ResolverTest : public ::testing::Test {
 protected:
  std::shared_ptr<FakeDns> dns = std::make_shared<FakeDns>();
  asio::io_context io;
  Resolver resolver{io.get_executor(), 4, fake(dns)};
  Clock::time_point far() const { return Clock::now() + 30s; }
  void TearDown() override {
    std::unique_lock lock(dns->mutex);
    dns->held.clear();
    dns->changed.notify_all();
  }
};

TEST_F(ResolverTest, ASlowLookupOfOneHostDoesNotDelayAnother) {
  dns->hold("slow.example");
  std::optional<ResolveResult> slow;
  std::optional<ResolveResult> fast;
  start(io, resolver, "slow.example", far(), &slow);
  ASSERT_TRUE(run_until(io, [&] { return dns->calls_of("slow.example") == 1; }));
  start(io, resolver, "fast.example", far(), &fast);
  ASSERT_TRUE(run_until(io, [&] { return fast.has_value(); }));
  EXPECT_EQ(fast->outcome, ResolveResult::Outcome::ok);
  EXPECT_FALSE(slow.has_value()) << "the slow lookup is still running";
  dns->release("slow.example");
  ASSERT_TRUE(run_until(io, [&] { return slow.has_value(); }));
  EXPECT_EQ(slow->outcome, ResolveResult::Outcome::ok);
  ASSERT_EQ(slow->endpoints.size(), 1u);
  EXPECT_EQ(slow->endpoints[0].address().to_string(), "192.0.2.7");
  EXPECT_EQ(slow->endpoints[0].port(), 443);
}

TEST_F(ResolverTest, ALookupIsAbandonedAtTheDeadlineAndStillFillsTheCache) {
  dns->hold("slow.example");
  std::optional<ResolveResult> first;
  start(io, resolver, "slow.example", Clock::now() + 50ms, &first);
  ASSERT_TRUE(run_until(io, [&] { return first.has_value(); }));
  EXPECT_EQ(first->outcome, ResolveResult::Outcome::timeout);
  // A second asker joins the running lookup instead of starting another.
  std::optional<ResolveResult> second;
  start(io, resolver, "slow.example", far(), &second);
  dns->release("slow.example");
  ASSERT_TRUE(run_until(io, [&] { return second.has_value(); }));
  EXPECT_EQ(second->outcome, ResolveResult::Outcome::ok);
  EXPECT_EQ(dns->calls_of("slow.example"), 1);
  std::optional<ResolveResult> cached;
  start(io, resolver, "slow.example", far(), &cached);
  ASSERT_TRUE(run_until(io, [&] { return cached.has_value(); }));
  EXPECT_EQ(cached->outcome, ResolveResult::Outcome::ok);
  EXPECT_EQ(dns->calls_of("slow.example"), 1) << "served from the cache";
}

TEST_F(ResolverTest, ALookupCanBeCancelled) {
  dns->hold("slow.example");
  std::optional<ResolveResult> out;
  asio::cancellation_signal cancel;
  asio::co_spawn(io, resolve_into(&resolver, "slow.example", far(), &out),
                 asio::bind_cancellation_slot(cancel.slot(), asio::detached));
  ASSERT_TRUE(run_until(io, [&] { return dns->calls_of("slow.example") == 1; }));
  cancel.emit(asio::cancellation_type::terminal);
  ASSERT_TRUE(run_until(io, [&] { return out.has_value(); }));
  EXPECT_EQ(out->outcome, ResolveResult::Outcome::cancelled);
}

TEST_F(ResolverTest, ConcurrentAskersShareOneLookup) {
  dns->hold("a.example");
  std::optional<ResolveResult> one;
  std::optional<ResolveResult> two;
  start(io, resolver, "a.example", far(), &one);
  start(io, resolver, "a.example", far(), &two);
  ASSERT_TRUE(run_until(io, [&] { return dns->calls_of("a.example") == 1; }));
  dns->release("a.example");
  ASSERT_TRUE(run_until(io, [&] { return one.has_value() && two.has_value(); }));
  EXPECT_EQ(one->outcome, ResolveResult::Outcome::ok);
  EXPECT_EQ(two->outcome, ResolveResult::Outcome::ok);
  EXPECT_EQ(dns->calls_of("a.example"), 1);
}

TEST_F(ResolverTest, IpLiteralsNeedNoLookup) {
  std::optional<ResolveResult> v4;
  std::optional<ResolveResult> v6;
  start(io, resolver, "127.0.0.1", far(), &v4);
  start(io, resolver, "::1", far(), &v6);
  ASSERT_TRUE(run_until(io, [&] { return v4.has_value() && v6.has_value(); }));
  EXPECT_EQ(v4->endpoints.at(0).address().to_string(), "127.0.0.1");
  EXPECT_EQ(v6->endpoints.at(0).address().to_string(), "::1");
  std::unique_lock lock(dns->mutex);
  EXPECT_TRUE(dns->calls.empty());
}

TEST_F(ResolverTest, FailuresAreReportedAndNotCached) {
  {
    std::unique_lock lock(dns->mutex);
    dns->failing.insert("bad.example");
  }
  for (int i = 1; i <= 2; ++i) {
    std::optional<ResolveResult> out;
    start(io, resolver, "bad.example", far(), &out);
    ASSERT_TRUE(run_until(io, [&] { return out.has_value(); }));
    EXPECT_EQ(out->outcome, ResolveResult::Outcome::failed);
    EXPECT_EQ(out->error, LookupResult::Error::not_found);
    EXPECT_EQ(dns->calls_of("bad.example"), i);
  }
}

TEST_F(ResolverTest, ZeroTtlResolvesEveryTime) {
  resolver.set_cache_ttl(0s);
  for (int i = 1; i <= 2; ++i) {
    std::optional<ResolveResult> out;
    start(io, resolver, "a.example", far(), &out);
    ASSERT_TRUE(run_until(io, [&] { return out.has_value(); }));
    EXPECT_EQ(dns->calls_of("a.example"), i);
  }
}

TEST(ResolverFor, OneResolverPerExecutionContext) {
  asio::io_context a;
  asio::io_context b;
  EXPECT_EQ(&resolver_for(a.get_executor()), &resolver_for(a.get_executor()));
  EXPECT_NE(&resolver_for(a.get_executor()), &resolver_for(b.get_executor()));
}

}  // namespace
}  // namespace fg::net
