#include "common/net/lookup_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace fg::net {
namespace {

// A fake DNS: each host's lookup blocks until the test releases it.
class FakeDns {
 public:
  LookupResult lookup(const std::string& host, std::uint16_t) {
    std::unique_lock lock(mutex_);
    started_.push_back(host);
    changed_.notify_all();
    changed_.wait(lock, [&] { return released_.count(host) != 0; });
    LookupResult r;
    r.addresses.push_back("192.0.2." + std::to_string(host.size()));
    return r;
  }
  void release(const std::string& host) {
    std::unique_lock lock(mutex_);
    released_.insert(host);
    changed_.notify_all();
  }
  bool wait_started(const std::string& host) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] {
      return std::find(started_.begin(), started_.end(), host) != started_.end();
    });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> started_;
  std::set<std::string> released_;
};

// Pool threads may still be inside a lookup when a test ends: they keep the fake alive.
LookupFn fake(std::shared_ptr<FakeDns> dns) {
  return [dns](const std::string& host, std::uint16_t port) { return dns->lookup(host, port); };
}

// Collects completions from pool threads. The pool calls them under its lock, so once the pool
// is destroyed (before this) none runs.
class Results {
 public:
  LookupPool::Done for_host(const std::string& host) {
    return [this, host](LookupResult r) {
      std::unique_lock lock(mutex_);
      done_.push_back(host);
      ok_ = ok_ && r.ok();
      changed_.notify_all();
    };
  }
  bool wait_for(const std::string& host) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, std::chrono::seconds(10), [&] {
      return std::find(done_.begin(), done_.end(), host) != done_.end();
    });
  }
  std::vector<std::string> done() {
    std::unique_lock lock(mutex_);
    return done_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> done_;
  bool ok_ = true;
};

TEST(LookupPool, ASlowLookupDoesNotDelayAnother) {
  auto dns = std::make_shared<FakeDns>();
  Results results;
  LookupPool pool(4, fake(dns));
  ASSERT_TRUE(pool.submit("slow.example", 443, results.for_host("slow.example")));
  ASSERT_TRUE(dns->wait_started("slow.example"));
  ASSERT_TRUE(pool.submit("fast.example", 443, results.for_host("fast.example")));
  dns->release("fast.example");
  // The fast name completes while the slow one is still inside its lookup.
  ASSERT_TRUE(results.wait_for("fast.example"));
  EXPECT_EQ(results.done(), std::vector<std::string>{"fast.example"});
  dns->release("slow.example");
  ASSERT_TRUE(results.wait_for("slow.example"));
  EXPECT_EQ(pool.threads(), 2u);
}

TEST(LookupPool, ThreadsAreBoundedAndLaterLookupsQueue) {
  auto dns = std::make_shared<FakeDns>();
  Results results;
  LookupPool pool(2, fake(dns));
  for (const char* host : {"a", "bb", "ccc"}) {
    ASSERT_TRUE(pool.submit(host, 443, results.for_host(host)));
  }
  ASSERT_TRUE(dns->wait_started("a"));
  ASSERT_TRUE(dns->wait_started("bb"));
  EXPECT_EQ(pool.threads(), 2u);
  dns->release("ccc");
  dns->release("a");
  ASSERT_TRUE(results.wait_for("ccc"));  // ran on the thread "a" freed
  dns->release("bb");
  ASSERT_TRUE(results.wait_for("bb"));
  EXPECT_EQ(pool.threads(), 2u);
}

TEST(LookupPool, AFullQueueRefuses) {
  auto dns = std::make_shared<FakeDns>();
  Results results;
  LookupPool pool(1, fake(dns), 1);
  ASSERT_TRUE(pool.submit("a", 443, results.for_host("a")));
  ASSERT_TRUE(dns->wait_started("a"));
  EXPECT_TRUE(pool.submit("bb", 443, results.for_host("bb")));
  EXPECT_FALSE(pool.submit("ccc", 443, results.for_host("ccc")));
  dns->release("a");
  dns->release("bb");
  ASSERT_TRUE(results.wait_for("bb"));
}

TEST(LookupPool, NoCompletionAfterClose) {
  auto dns = std::make_shared<FakeDns>();
  Results results;
  {
    LookupPool pool(1, fake(dns));
    ASSERT_TRUE(pool.submit("a", 443, results.for_host("a")));
    ASSERT_TRUE(dns->wait_started("a"));
    ASSERT_TRUE(pool.submit("bb", 443, results.for_host("bb")));
    pool.close();
    EXPECT_FALSE(pool.submit("ccc", 443, results.for_host("ccc")));
    dns->release("a");
  }
  // The thread that was inside the lookup finishes it and drops the result; "bb" never ran.
  EXPECT_TRUE(results.done().empty());
}

TEST(SystemLookup, ResolvesLocalhostAndRefusesAnInvalidName) {
  auto local = system_lookup("localhost", 80);
  EXPECT_TRUE(local.ok()) << local.message;
  auto bad = system_lookup("no-such-host.invalid", 80);
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(bad.error, LookupResult::Error::none);
}

}  // namespace
}  // namespace fg::net
