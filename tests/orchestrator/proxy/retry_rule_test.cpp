#include "orchestrator/proxy/retry_rule.hpp"

#include <gtest/gtest.h>

namespace fg::proxy {
namespace {

using namespace std::chrono_literals;

// A failure before anything reached the client, with retries left, on a fresh connection.
FailedAttempt failure(UpstreamError error, Phase phase = Phase::head) {
  FailedAttempt f;
  f.error = error;
  f.phase = phase;
  f.request_written = phase != Phase::connect && phase != Phase::send;
  f.attempts_left = true;
  return f;
}

// The same on a pooled connection, failing `after` the request was written, with no answer.
FailedAttempt on_pooled(UpstreamError error, std::chrono::milliseconds after,
                        Phase phase = Phase::head) {
  FailedAttempt f = failure(error, phase);
  f.pooled = true;
  f.since_written = after;
  return f;
}

TEST(RetryRule, ReplicaFailuresBeforeContentGoElsewhereAndCount) {
  for (auto e :
       {UpstreamError::connect, UpstreamError::tls, UpstreamError::timeout, UpstreamError::http_5xx,
        UpstreamError::reset, UpstreamError::protocol, UpstreamError::model_not_found}) {
    const auto d = retry_decision(failure(e));
    EXPECT_EQ(d.action, RetryAction::retry_elsewhere) << to_string(e);
    EXPECT_TRUE(d.counts_against_replica) << to_string(e);
  }
}

TEST(RetryRule, BusyGoesElsewhereWithoutBlame) {
  const auto d = retry_decision(failure(UpstreamError::busy));
  EXPECT_EQ(d.action, RetryAction::retry_elsewhere);
  EXPECT_FALSE(d.counts_against_replica);
}

TEST(RetryRule, NoAttemptsLeftFailsButStillCounts) {
  auto f = failure(UpstreamError::http_5xx);
  f.attempts_left = false;
  const auto d = retry_decision(f);
  EXPECT_EQ(d.action, RetryAction::fail);
  EXPECT_TRUE(d.counts_against_replica);
}

TEST(RetryRule, AfterContentNeverRetried) {
  for (auto e : {UpstreamError::reset, UpstreamError::timeout, UpstreamError::protocol}) {
    auto f = failure(e, Phase::stream);
    f.answer_started = true;
    f.content_sent = true;
    const auto d = retry_decision(f);
    EXPECT_EQ(d.action, RetryAction::fail) << to_string(e);
    EXPECT_TRUE(d.counts_against_replica) << to_string(e);
  }
  // Even a failure that looks like a stale connection.
  auto f = on_pooled(UpstreamError::reset, 0ms);
  f.content_sent = true;
  EXPECT_EQ(retry_decision(f).action, RetryAction::fail);
}

TEST(RetryRule, OversizedEventBeforeContentMayGoElsewhere) {
  auto f = failure(UpstreamError::protocol, Phase::stream);
  f.answer_started = true;
  const auto d = retry_decision(f);
  EXPECT_EQ(d.action, RetryAction::retry_elsewhere);
  EXPECT_TRUE(d.counts_against_replica);
}

TEST(RetryRule, TooLargeIsNotRetriedNorBlamed) {
  // The same request gets the same answer anywhere, and a client could ask for a huge one.
  auto f = failure(UpstreamError::too_large, Phase::body);
  f.answer_started = true;
  const auto d = retry_decision(f);
  EXPECT_EQ(d.action, RetryAction::fail);
  EXPECT_FALSE(d.counts_against_replica);
}

TEST(RetryRule, DeadlineEndsTheRequestWithoutBlame) {
  auto f = failure(UpstreamError::deadline);
  EXPECT_EQ(retry_decision(f).action, RetryAction::fail);
  EXPECT_FALSE(retry_decision(f).counts_against_replica);
  // Whatever the failure, once the deadline passed.
  auto g = failure(UpstreamError::http_5xx);
  g.deadline_passed = true;
  EXPECT_EQ(retry_decision(g).action, RetryAction::fail);
  auto h = on_pooled(UpstreamError::reset, 0ms);
  h.deadline_passed = true;
  EXPECT_EQ(retry_decision(h).action, RetryAction::fail);
}

TEST(RetryRule, StalePooledConnectionGetsOneFreeRetry) {
  // Closed while idle: fails at once after the write, or the write itself fails.
  for (auto f :
       {on_pooled(UpstreamError::reset, 0ms), on_pooled(UpstreamError::reset, 900ms),
        on_pooled(UpstreamError::tls, 5ms), on_pooled(UpstreamError::reset, 0ms, Phase::send)}) {
    const auto d = retry_decision(f);
    EXPECT_EQ(d.action, RetryAction::retry_fresh_connection);
    EXPECT_FALSE(d.counts_against_replica);
  }
  // Free even with no attempts left: it is not an attempt.
  auto last = on_pooled(UpstreamError::reset, 0ms);
  last.attempts_left = false;
  EXPECT_EQ(retry_decision(last).action, RetryAction::retry_fresh_connection);
}

TEST(RetryRule, OnlyOneFreeRetry) {
  auto f = on_pooled(UpstreamError::reset, 0ms);
  f.fresh_retry_used = true;
  const auto d = retry_decision(f);
  EXPECT_EQ(d.action, RetryAction::retry_elsewhere);
  EXPECT_TRUE(d.counts_against_replica);
}

TEST(RetryRule, NoFreeRetryOnceThePhoneMayHaveStarted) {
  // Minutes of prefill, then a reset: the phone read the request.
  auto late = on_pooled(UpstreamError::reset, std::chrono::minutes(3));
  EXPECT_EQ(retry_decision(late).action, RetryAction::retry_elsewhere);
  EXPECT_TRUE(retry_decision(late).counts_against_replica);
  // Just past the window.
  EXPECT_EQ(retry_decision(on_pooled(UpstreamError::reset, kStaleWindow + 1ms)).action,
            RetryAction::retry_elsewhere);
  // A timeout: the phone held the request.
  EXPECT_EQ(retry_decision(on_pooled(UpstreamError::timeout, 0ms)).action,
            RetryAction::retry_elsewhere);
  // Part of an answer came back.
  auto answered = on_pooled(UpstreamError::reset, 0ms);
  answered.answer_started = true;
  EXPECT_EQ(retry_decision(answered).action, RetryAction::retry_elsewhere);
  // A malformed answer is an answer.
  EXPECT_EQ(retry_decision(on_pooled(UpstreamError::protocol, 0ms)).action,
            RetryAction::retry_elsewhere);
}

TEST(RetryRule, UnwrittenRequestIsSafeToResendWheneverItFailed) {
  // The phone never had the whole request, however long the write took.
  auto f = on_pooled(UpstreamError::reset, std::chrono::minutes(1), Phase::send);
  f.request_written = false;
  EXPECT_EQ(retry_decision(f).action, RetryAction::retry_fresh_connection);
}

TEST(RetryRule, FreshConnectionsNeverGetTheFreeRetry) {
  auto f = failure(UpstreamError::reset);
  f.since_written = 0ms;
  EXPECT_EQ(retry_decision(f).action, RetryAction::retry_elsewhere);
}

TEST(RetryRule, LabelsAreStable) {
  EXPECT_EQ(to_string(UpstreamError::model_not_found), "model_not_found");
  EXPECT_EQ(to_string(UpstreamError::too_large), "too_large");
  EXPECT_EQ(to_string(UpstreamError::deadline), "deadline");
  EXPECT_EQ(to_string(UpstreamError::busy), "busy");
}

}  // namespace
}  // namespace fg::proxy
