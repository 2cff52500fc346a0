#include "orchestrator/fleet/url_challenge.hpp"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace fg::fleet {
namespace {

using std::chrono::milliseconds;

const std::string kNonce =
    std::string("0123456789abcdef") + "0123456789abcdef" + "0123456789abcdef" + "0123456789abcdef";
// Python: hmac.new(b'secret-1', b'fleetgate-url-challenge:' + nonce, hashlib.sha256).hexdigest()
const std::string kHmac = "a5bd8cb41f78c83bd614b422e8389b536b6036b076397acb307bb5755da08a25";

ChallengeFetch answer(unsigned status, std::string body) {
  ChallengeFetch f;
  f.status = status;
  f.body = std::move(body);
  return f;
}

TEST(UrlChallenge, HmacMatchesAnIndependentImplementation) {
  EXPECT_EQ(challenge_hmac("secret-1", kNonce), kHmac);
  EXPECT_EQ(challenge_hmac("", kNonce),
            "c6bf29ca4fd4e50ebefdf556612a47477549d84adbb9b5326cdbc86f31338e99");
  EXPECT_NE(challenge_hmac("secret-2", kNonce), kHmac);
}

TEST(UrlChallenge, NoncesAreFreshAndWellFormed) {
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    const std::string n = make_challenge_nonce();
    EXPECT_TRUE(valid_challenge_nonce(n)) << n;
    seen.insert(n);
  }
  EXPECT_EQ(seen.size(), 50u);
  EXPECT_FALSE(valid_challenge_nonce(kNonce.substr(1)));
  EXPECT_FALSE(valid_challenge_nonce(kNonce + "0"));
  EXPECT_FALSE(valid_challenge_nonce(std::string(63, 'a') + "g"));
}

TEST(UrlChallenge, TargetKeepsThePathPrefix) {
  EXPECT_EQ(challenge_target("", "ab"), "/fleetgate/v1/challenge?nonce=ab");
  EXPECT_EQ(challenge_target("/phone7", "ab"), "/phone7/fleetgate/v1/challenge?nonce=ab");
}

TEST(UrlChallenge, TheRightHmacPasses) {
  EXPECT_TRUE(
      judge_challenge(answer(200, R"({"hmac":")" + kHmac + "\"}"), "secret-1", kNonce).passed);
  // Hex case does not matter; extra fields are ignored.
  std::string upper = kHmac;
  for (auto& c : upper) {
    c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  EXPECT_TRUE(judge_challenge(answer(200, R"({"x":1,"hmac":")" + upper + "\"}"), "secret-1", kNonce)
                  .passed);
}

TEST(UrlChallenge, EverythingElseFailsWithAShortReason) {
  struct Case {
    ChallengeFetch fetch;
    std::string why;
  };
  ChallengeFetch refused;
  refused.error = "connect";
  const Case cases[] = {
      {refused, "connect"},
      {answer(503, R"({"error":"no secret yet"})"), "HTTP 503"},
      {answer(404, "not found"), "HTTP 404"},
      {answer(200, "OK"), "answer is not a JSON object"},
      {answer(200, "[1]"), "answer is not a JSON object"},
      {answer(200, R"({"hmac":7})"), "answer has no \"hmac\" string"},
      {answer(200, R"({"status":"ok"})"), "answer has no \"hmac\" string"},
      // Another secret (a server the registrant does not run, or a stale agent).
      {answer(200, R"({"hmac":")" + challenge_hmac("other", kNonce) + "\"}"), "wrong hmac"},
      // The answer to another nonce (a replayed answer).
      {answer(200, R"({"hmac":")" + challenge_hmac("secret-1", std::string(64, 'f')) + "\"}"),
       "wrong hmac"},
      {answer(200, R"({"hmac":")" + kHmac.substr(0, 63) + "\"}"), "wrong hmac"},
      {answer(200, R"({"hmac":""})"), "wrong hmac"},
  };
  for (const auto& c : cases) {
    const auto verdict = judge_challenge(c.fetch, "secret-1", kNonce);
    EXPECT_FALSE(verdict.passed) << c.fetch.body;
    EXPECT_EQ(verdict.why, c.why) << c.fetch.body;
    EXPECT_EQ(verdict.why.find("secret-1"), std::string::npos);
  }
}

TEST(UrlChallenge, RetriesBackOffToACap) {
  EXPECT_EQ(challenge_retry_delay(1), milliseconds(250));
  EXPECT_EQ(challenge_retry_delay(2), milliseconds(500));
  EXPECT_EQ(challenge_retry_delay(3), milliseconds(1000));
  EXPECT_EQ(challenge_retry_delay(8), milliseconds(30'000));
  EXPECT_EQ(challenge_retry_delay(1'000'000), milliseconds(30'000));
  EXPECT_EQ(challenge_retry_delay(0), milliseconds(250));
}

}  // namespace
}  // namespace fg::fleet
