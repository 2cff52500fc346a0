#include "orchestrator/config/config.hpp"

#include <gtest/gtest.h>

namespace fg::config {
namespace {

// registration.allowed_urls: a wildcard never crosses from one part of a URL into another.
TEST(GlobMatchDelimiters, WildcardsNeverMatchUrlDelimiters) {
  for (const char* text : {"a:b", "a/b", "a@b", "a[b", "a]b"}) {
    EXPECT_FALSE(glob_match("a*b", text)) << text;
    EXPECT_FALSE(glob_match("a?b", text)) << text;
  }
  EXPECT_TRUE(glob_match("a*b", "a-x.y_zb"));
}

TEST(GlobMatchDelimiters, AHostPatternDoesNotReachIntoPortOrUserinfo) {
  // A port the pattern did not name.
  EXPECT_FALSE(glob_match("https://*", "https://x.acu.run:8443"));
  EXPECT_FALSE(glob_match("https://*.acu.run", "https://evil.com:1.acu.run"));
  // Userinfo (which URL parsing refuses as well).
  EXPECT_FALSE(glob_match("https://*.acu.run", "https://evil.com@x.acu.run"));
  EXPECT_FALSE(glob_match("https://*.acu.run", "https://a:b@x.acu.run"));
  // An IPv6 literal is not a host name.
  EXPECT_FALSE(glob_match("http://*", "http://[::1]"));
  EXPECT_FALSE(glob_match("http://*:7001", "http://[::1]:7001"));
  EXPECT_TRUE(glob_match("http://[::1]:*", "http://[::1]:7001"));
}

TEST(GlobMatchDelimiters, PortAndPathWildcardsStillWork) {
  EXPECT_TRUE(glob_match("http://127.0.0.1:*", "http://127.0.0.1:7001"));
  EXPECT_TRUE(glob_match("https://*.acu.run", "https://a1b2.acu.run"));
  EXPECT_TRUE(glob_match("https://*.acu.run/*", "https://a1b2.acu.run/v1"));
  EXPECT_TRUE(glob_match("http://127.0.0.1:70??", "http://127.0.0.1:7001"));
}

}  // namespace
}  // namespace fg::config
