#include "common/net/dns_cache.hpp"

#include <gtest/gtest.h>

namespace fg::net {
namespace {

using Clock = DnsCache::Clock;
using std::chrono::seconds;

LookupResult found(std::string address) {
  LookupResult r;
  r.addresses.push_back(std::move(address));
  return r;
}

LookupResult failed() {
  LookupResult r;
  r.error = LookupResult::Error::not_found;
  r.message = "Name or service not known";
  return r;
}

const Clock::time_point t0{};

TEST(DnsCache, FirstAskerLooksUpLaterOnesWaitForIt) {
  DnsCache cache(seconds(30));
  EXPECT_EQ(cache.begin("a:443", t0).step, DnsCache::Step::lookup);
  EXPECT_TRUE(cache.in_flight("a:443"));
  EXPECT_EQ(cache.begin("a:443", t0).step, DnsCache::Step::wait);
  // Another host is not held up by it.
  EXPECT_EQ(cache.begin("b:443", t0).step, DnsCache::Step::lookup);
  cache.finish("a:443", found("192.0.2.1"), t0);
  EXPECT_FALSE(cache.in_flight("a:443"));
  auto hit = cache.begin("a:443", t0 + seconds(1));
  EXPECT_EQ(hit.step, DnsCache::Step::cached);
  EXPECT_EQ(hit.addresses, std::vector<std::string>{"192.0.2.1"});
}

TEST(DnsCache, EntriesExpireAfterTheTtl) {
  DnsCache cache(seconds(30));
  ASSERT_EQ(cache.begin("a:443", t0).step, DnsCache::Step::lookup);
  cache.finish("a:443", found("192.0.2.1"), t0);
  EXPECT_EQ(cache.begin("a:443", t0 + seconds(29)).step, DnsCache::Step::cached);
  EXPECT_EQ(cache.begin("a:443", t0 + seconds(30)).step, DnsCache::Step::lookup);
  cache.finish("a:443", found("192.0.2.2"), t0 + seconds(30));
  EXPECT_EQ(cache.begin("a:443", t0 + seconds(31)).addresses,
            std::vector<std::string>{"192.0.2.2"});
}

TEST(DnsCache, FailuresAreNotCached) {
  DnsCache cache(seconds(30));
  ASSERT_EQ(cache.begin("a:443", t0).step, DnsCache::Step::lookup);
  cache.finish("a:443", failed(), t0);
  EXPECT_EQ(cache.begin("a:443", t0).step, DnsCache::Step::lookup);
  EXPECT_EQ(cache.size(), 0u);
}

TEST(DnsCache, PortsAreSeparateKeys) {
  DnsCache cache(seconds(30));
  ASSERT_EQ(cache.begin("a:443", t0).step, DnsCache::Step::lookup);
  cache.finish("a:443", found("192.0.2.1"), t0);
  EXPECT_EQ(cache.begin("a:80", t0).step, DnsCache::Step::lookup);
}

TEST(DnsCache, ZeroTtlCachesNothingButStillSharesARunningLookup) {
  DnsCache cache(seconds(0));
  ASSERT_EQ(cache.begin("a:443", t0).step, DnsCache::Step::lookup);
  EXPECT_EQ(cache.begin("a:443", t0).step, DnsCache::Step::wait);
  cache.finish("a:443", found("192.0.2.1"), t0);
  EXPECT_EQ(cache.begin("a:443", t0).step, DnsCache::Step::lookup);
}

TEST(DnsCache, TurningTheCacheOffDropsEntries) {
  DnsCache cache(seconds(30));
  ASSERT_EQ(cache.begin("a:443", t0).step, DnsCache::Step::lookup);
  cache.finish("a:443", found("192.0.2.1"), t0);
  cache.set_ttl(seconds(0));
  EXPECT_EQ(cache.size(), 0u);
}

TEST(DnsCache, IsBoundedDroppingTheSoonestToExpire) {
  DnsCache cache(seconds(30), 2);
  for (int i = 0; i < 3; ++i) {
    const std::string key = "h" + std::to_string(i) + ":443";
    ASSERT_EQ(cache.begin(key, t0 + seconds(i)).step, DnsCache::Step::lookup);
    cache.finish(key, found("192.0.2.1"), t0 + seconds(i));
  }
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_EQ(cache.begin("h0:443", t0 + seconds(3)).step, DnsCache::Step::lookup);
  EXPECT_EQ(cache.begin("h2:443", t0 + seconds(3)).step, DnsCache::Step::cached);
}

}  // namespace
}  // namespace fg::net
