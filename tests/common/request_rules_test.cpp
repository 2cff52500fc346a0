#include "common/net/request_rules.hpp"

#include <gtest/gtest.h>

namespace fg::net {
namespace {

using std::chrono::seconds;

TEST(RequestRules, EachPhaseHasItsOwnTimeout) {
  const ReadTimeouts timeouts{seconds(60), seconds(10), seconds(30)};
  EXPECT_EQ(phase_timeout(ReadPhase::idle, timeouts), seconds(60));
  EXPECT_EQ(phase_timeout(ReadPhase::head, timeouts), seconds(10));
  EXPECT_EQ(phase_timeout(ReadPhase::body, timeouts), seconds(30));
  EXPECT_EQ(timeout_failure(ReadPhase::idle), ReadFailure::idle_timeout);
  EXPECT_EQ(timeout_failure(ReadPhase::head), ReadFailure::header_timeout);
  EXPECT_EQ(timeout_failure(ReadPhase::body), ReadFailure::body_timeout);
}

TEST(RequestRules, AStreamedBodyEarnsTimeByArriving) {
  ReadTimeouts t;
  t.body = std::chrono::seconds(60);
  const std::uint64_t per = 4 * 1024 * 1024;
  EXPECT_EQ(streamed_body_allowance(t, 0, per), std::chrono::seconds(60));
  EXPECT_EQ(streamed_body_allowance(t, per - 1, per), std::chrono::seconds(60));
  EXPECT_EQ(streamed_body_allowance(t, per, per), std::chrono::seconds(120));
  EXPECT_EQ(streamed_body_allowance(t, 50 * per + 3, per), std::chrono::seconds(51 * 60));
  EXPECT_EQ(streamed_body_allowance(t, 1000, 0), std::chrono::seconds(60));
}

TEST(RequestRules, FailureReplies) {
  EXPECT_FALSE(failure_reply(ReadFailure::closed, 100, "k"));
  EXPECT_FALSE(failure_reply(ReadFailure::idle_timeout, 100, "k"));
  EXPECT_FALSE(failure_reply(ReadFailure::header_timeout, 100, "k"));
  EXPECT_FALSE(failure_reply(ReadFailure::body_timeout, 100, "k"));
  EXPECT_EQ(failure_reply(ReadFailure::malformed, 100, "k")->status, 400u);
  EXPECT_EQ(failure_reply(ReadFailure::header_too_large, 100, "k")->status, 431u);
  auto too_large = failure_reply(ReadFailure::body_too_large, 4096, "server.max_body_bytes");
  ASSERT_TRUE(too_large);
  EXPECT_EQ(too_large->status, 413u);
  EXPECT_EQ(too_large->code, "request_too_large");
  EXPECT_NE(too_large->message.find("server.max_body_bytes (4096 bytes)"), std::string::npos);
}

TEST(RequestRules, FailureReasonsMatchTheReplyCodes) {
  EXPECT_EQ(failure_reason(ReadFailure::closed), "");
  EXPECT_EQ(failure_reason(ReadFailure::idle_timeout), "");
  EXPECT_EQ(failure_reason(ReadFailure::header_timeout), "header_timeout");
  EXPECT_EQ(failure_reason(ReadFailure::body_timeout), "body_timeout");
  for (auto f :
       {ReadFailure::malformed, ReadFailure::header_too_large, ReadFailure::body_too_large}) {
    EXPECT_EQ(failure_reason(f), failure_reply(f, 1, "k")->code);
  }
}

TEST(RequestRules, ARefusalWinsOverTheBodyAndNeverAsksForIt) {
  HeadFacts facts;
  facts.content_length = 10'000'000;
  facts.expect_continue = true;
  auto decision =
      decide_head(facts, ErrorReply{401, "invalid_api_key", "no", {}}, 4096, "server.x");
  ASSERT_TRUE(decision.reply);
  EXPECT_EQ(decision.reply->status, 401u);
  EXPECT_FALSE(decision.send_continue);
}

TEST(RequestRules, ADeclaredLengthOverTheLimitIs413BeforeAnyBody) {
  HeadFacts facts;
  facts.content_length = 4097;
  facts.expect_continue = true;
  auto decision = decide_head(facts, std::nullopt, 4096, "server.max_body_bytes");
  ASSERT_TRUE(decision.reply);
  EXPECT_EQ(decision.reply->status, 413u);
  EXPECT_FALSE(decision.send_continue);
  facts.content_length = 4096;
  decision = decide_head(facts, std::nullopt, 4096, "server.max_body_bytes");
  EXPECT_FALSE(decision.reply);
  EXPECT_TRUE(decision.send_continue);
}

TEST(RequestRules, ContinueOnlyWhenAskedAndABodyFollows) {
  HeadFacts facts;
  EXPECT_FALSE(decide_head(facts, std::nullopt, 10, "k").send_continue);
  facts.expect_continue = true;
  EXPECT_FALSE(decide_head(facts, std::nullopt, 10, "k").send_continue);  // no body
  facts.chunked = true;
  EXPECT_TRUE(decide_head(facts, std::nullopt, 10, "k").send_continue);
  facts.expect_continue = false;
  EXPECT_FALSE(decide_head(facts, std::nullopt, 10, "k").send_continue);
}

TEST(RequestRules, HasBody) {
  HeadFacts facts;
  EXPECT_FALSE(facts.has_body());
  facts.content_length = 0;
  EXPECT_FALSE(facts.has_body());
  facts.content_length = 1;
  EXPECT_TRUE(facts.has_body());
  facts.content_length.reset();
  facts.chunked = true;
  EXPECT_TRUE(facts.has_body());
}

}  // namespace
}  // namespace fg::net
