// The URL challenge's HMAC and its input checks (registration/challenge.hpp).
#include "replica-agent/registration/challenge.hpp"

#include <gtest/gtest.h>

#include <string>

namespace fg::agent {
namespace {

// Vectors computed independently with the OpenSSL CLI:
//   printf 'fleetgate-url-challenge:%s' NONCE | openssl dgst -sha256 -hmac KEY
TEST(AgentChallenge, HmacMatchesKnownVectors) {
  EXPECT_EQ(challenge_hmac("test-secret", std::string(64, '0')),
            "5360b631f2d687f76430b1373c7df1688399f7214b548698863df1149c815a22");
  EXPECT_EQ(challenge_hmac("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
                           "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"),
            "a9719c2beff1d1b46adec054d8da8973b72a9a39ddc3ce466634d21c0d8b0caf");
}

TEST(AgentChallenge, HmacDependsOnTheSecretAndTheNonce) {
  const std::string nonce(64, 'a');
  EXPECT_NE(challenge_hmac("s1", nonce), challenge_hmac("s2", nonce));
  EXPECT_NE(challenge_hmac("s1", nonce), challenge_hmac("s1", std::string(64, 'b')));
  EXPECT_EQ(challenge_hmac("s1", nonce).size(), 64u);
}

TEST(AgentChallenge, NonceIsExactly64HexDigits) {
  EXPECT_TRUE(valid_challenge_nonce(std::string(64, 'f')));
  EXPECT_TRUE(valid_challenge_nonce(std::string(32, 'A') + std::string(32, '9')));
  EXPECT_FALSE(valid_challenge_nonce(std::string(63, 'a')));
  EXPECT_FALSE(valid_challenge_nonce(std::string(65, 'a')));
  EXPECT_FALSE(valid_challenge_nonce(std::string(63, 'a') + "g"));
  EXPECT_FALSE(valid_challenge_nonce(""));
  EXPECT_FALSE(valid_challenge_nonce(std::string(62, 'a') + "%0"));
}

TEST(AgentChallenge, QueryValue) {
  EXPECT_EQ(query_value("/fleetgate/v1/challenge?nonce=ab", "nonce"), "ab");
  EXPECT_EQ(query_value("/p?x=1&nonce=cd&nonce=ef", "nonce"), "cd");
  EXPECT_EQ(query_value("/p?nonce", "nonce"), "");
  EXPECT_EQ(query_value("/p?nonces=1", "nonce"), std::nullopt);
  EXPECT_EQ(query_value("/p", "nonce"), std::nullopt);
  EXPECT_EQ(query_value("/p?", "nonce"), std::nullopt);
}

}  // namespace
}  // namespace fg::agent
