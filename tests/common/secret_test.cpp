#include "common/util/secret.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace fg {
namespace {

TEST(RandomSecret, IsLowerCaseHexOfTheAskedLength) {
  const std::string s = random_secret();
  EXPECT_EQ(s.size(), 64u);
  EXPECT_EQ(s.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(random_secret(4).size(), 8u);
}

TEST(RandomSecret, DiffersEachTime) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    seen.insert(random_secret());
  }
  EXPECT_EQ(seen.size(), 100u);
}

TEST(SecretsEqual, ComparesWholeValues) {
  const std::string s = random_secret();
  EXPECT_TRUE(secrets_equal(s, s));
  EXPECT_FALSE(secrets_equal(s.substr(0, 63), s));
  EXPECT_FALSE(secrets_equal(s + "0", s));
  EXPECT_FALSE(secrets_equal("", s));
  std::string flipped = s;
  flipped[10] = flipped[10] == 'a' ? 'b' : 'a';
  EXPECT_FALSE(secrets_equal(flipped, s));
}

TEST(SecretsEqual, AnEmptyExpectedSecretNeverMatches) {
  EXPECT_FALSE(secrets_equal("", ""));
  EXPECT_FALSE(secrets_equal("x", ""));
}

}  // namespace
}  // namespace fg
