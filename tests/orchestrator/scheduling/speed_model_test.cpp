#include "orchestrator/scheduling/speed_model.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "orchestrator/scheduling/routing_options.hpp"

namespace fg::scheduling {
namespace {

TEST(RoutingOptions, PolicyNames) {
  EXPECT_EQ(parse_policy("least_loaded"), RoutingPolicy::least_loaded);
  EXPECT_EQ(parse_policy("expected_finish"), RoutingPolicy::expected_finish);
  EXPECT_EQ(parse_policy("leastconn"), std::nullopt);
  EXPECT_EQ(parse_policy(""), std::nullopt);
  EXPECT_STREQ(to_string(RoutingPolicy::expected_finish), "expected_finish");
  EXPECT_STREQ(to_string(RoutingPolicy::least_loaded), "least_loaded");
  EXPECT_EQ(RoutingOptions{}.policy, RoutingPolicy::expected_finish);
}

TEST(RoutingOptions, PriorityHeader) {
  EXPECT_EQ(parse_priority("0"), 0);
  EXPECT_EQ(parse_priority(" 10 "), 10);
  EXPECT_EQ(parse_priority("+3"), 3);
  EXPECT_EQ(parse_priority("-5"), -5);
  EXPECT_EQ(parse_priority("1000"), 1000);
  EXPECT_EQ(parse_priority("-1000"), -1000);
  EXPECT_EQ(parse_priority("1001"), std::nullopt);
  EXPECT_EQ(parse_priority("99999999999"), std::nullopt);
  EXPECT_EQ(parse_priority(""), std::nullopt);
  EXPECT_EQ(parse_priority("high"), std::nullopt);
  EXPECT_EQ(parse_priority("1.5"), std::nullopt);
  EXPECT_EQ(parse_priority("+-1"), std::nullopt);
  EXPECT_EQ(parse_priority("1 2"), std::nullopt);
  EXPECT_TRUE(sheddable_priority(-1));
  EXPECT_FALSE(sheddable_priority(0));
}

TEST(CompletionFromAnswer, ReadsLlamaServerAnswer) {
  auto answer = nlohmann::json::parse(R"({
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": "RISK_LEVEL: 3"}}],
    "usage": {"prompt_tokens": 7000, "completion_tokens": 8, "total_tokens": 7008,
              "prompt_tokens_details": {"cached_tokens": 4990}},
    "timings": {"cache_n": 4990, "prompt_n": 2010, "prompt_ms": 27840.5,
                "prompt_per_second": 72.2, "predicted_n": 8, "predicted_ms": 444.4}
  })");
  Completion c = completion_from_answer(answer);
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.prompt_tokens, 7000u);
  EXPECT_EQ(c.completion_tokens, 8u);
  EXPECT_EQ(c.cached_tokens, 4990u);
  EXPECT_FALSE(c.truncated);
  ASSERT_TRUE(c.timings);
  EXPECT_DOUBLE_EQ(c.timings->prompt_n, 2010);
  EXPECT_DOUBLE_EQ(c.timings->prompt_ms, 27840.5);
  EXPECT_DOUBLE_EQ(c.timings->predicted_n, 8);
  EXPECT_DOUBLE_EQ(c.timings->predicted_ms, 444.4);
  EXPECT_EQ(c.timings->cache_n, 4990);
}

TEST(CompletionFromAnswer, CacheCountFromTimingsWhenUsageHasNone) {
  auto answer = nlohmann::json::parse(R"({
    "choices": [{"finish_reason": "length"}],
    "usage": {"prompt_tokens": 10, "completion_tokens": 4},
    "timings": {"cache_n": 6, "prompt_n": 4, "prompt_ms": 2, "predicted_n": 4, "predicted_ms": 9}
  })");
  Completion c = completion_from_answer(answer);
  EXPECT_EQ(c.cached_tokens, 6u);
  EXPECT_TRUE(c.truncated);
}

TEST(CompletionFromAnswer, MissingOrMistypedFieldsStayUnset) {
  EXPECT_FALSE(completion_from_answer(nlohmann::json::array()).prompt_tokens);
  auto answer = nlohmann::json::parse(R"({
    "usage": {"prompt_tokens": -3, "completion_tokens": "8", "prompt_tokens_details": null},
    "timings": {"prompt_n": 4, "prompt_ms": "fast"},
    "choices": []
  })");
  Completion c = completion_from_answer(answer);
  EXPECT_FALSE(c.prompt_tokens);
  EXPECT_FALSE(c.completion_tokens);
  EXPECT_FALSE(c.cached_tokens);
  EXPECT_FALSE(c.timings);
  EXPECT_FALSE(c.truncated);
}

constexpr ReplicaId kPhone = 7;

RoutingOptions options() {
  RoutingOptions o;
  o.default_prefill_tps = 50;
  o.default_decode_tps = 10;
  o.speed_smoothing = 0.5;
  return o;
}

TEST(SpeedModel, StartsAtTheConfiguredDefault) {
  SpeedModel s(options());
  s.add_replica(kPhone, "m");
  SpeedSnapshot snap = s.snapshot(kPhone);
  EXPECT_DOUBLE_EQ(snap.prefill_tps, 50);
  EXPECT_DOUBLE_EQ(snap.decode_tps, 10);
  EXPECT_EQ(snap.source, SpeedSnapshot::Source::configured_default);
  EXPECT_DOUBLE_EQ(s.prefill_seconds_per_token(kPhone), 0.02);
  // Unknown replicas read as the default too.
  EXPECT_DOUBLE_EQ(s.decode_seconds_per_token(99), 0.1);
  EXPECT_STREQ(to_string(snap.source), "default");
}

TEST(SpeedModel, FirstTimingsReplaceTheDefaultThenAverage) {
  SpeedModel s(options());
  s.add_replica(kPhone, "m");
  // 2,000 tokens read in 20 s (100 tok/s), 9 generated: 8 decode steps in 0.4 s (20 tok/s).
  s.learn(kPhone,
          {.uncached_tokens = 2000,
           .answer_tokens = 9,
           .timings =
               Timings{.prompt_n = 2000, .prompt_ms = 20000, .predicted_n = 9, .predicted_ms = 400},
           .duration_seconds = 25});
  SpeedSnapshot snap = s.snapshot(kPhone);
  EXPECT_DOUBLE_EQ(snap.prefill_tps, 100);
  EXPECT_DOUBLE_EQ(snap.decode_tps, 20);
  EXPECT_EQ(snap.source, SpeedSnapshot::Source::learned);
  EXPECT_EQ(snap.prefill_samples, 1u);
  // Next: 50 tok/s (0.02 s/token). Weight 0.5 on seconds per token: (0.01 + 0.02) / 2.
  s.learn(kPhone,
          {.timings = Timings{
               .prompt_n = 1000, .prompt_ms = 20000, .predicted_n = 9, .predicted_ms = 400}});
  EXPECT_DOUBLE_EQ(s.prefill_seconds_per_token(kPhone), 0.015);
  EXPECT_DOUBLE_EQ(s.decode_seconds_per_token(kPhone), 0.05);
}

// llama-server (tools/server/server-common.h, server_slot_stats): predicted_ms runs from the
// first token (which ends prefill, t_prompt_last) to the last one, so it covers predicted_n - 1
// decode steps; its own predicted_per_second divides by n_gen_steps() = predicted_n - 1.
TEST(SpeedModel, DecodeTimeCoversOneStepFewerThanTokens) {
  SpeedModel s(options());
  s.add_replica(kPhone, "m");
  // 5 tokens in 800 ms: 4 steps of 200 ms (5 tok/s), not 5 of 160 ms.
  s.learn(kPhone,
          {.timings = Timings{
               .prompt_n = 1000, .prompt_ms = 10000, .predicted_n = 5, .predicted_ms = 800}});
  EXPECT_DOUBLE_EQ(s.decode_seconds_per_token(kPhone), 0.2);
  // One token is all prefill: its predicted_ms (clamped to 1 us by llama-server) times no step.
  s.add_replica(8, "m");
  s.learn(8, {.timings = Timings{
                  .prompt_n = 1000, .prompt_ms = 10000, .predicted_n = 1, .predicted_ms = 0.001}});
  // No decode learned: it reads as its model's peers (kPhone's 0.2), not from this answer.
  EXPECT_DOUBLE_EQ(s.decode_seconds_per_token(8), 0.2);
  EXPECT_EQ(s.snapshot(8).decode_samples, 0u);
}

TEST(SpeedModel, TinySamplesTeachNothing) {
  SpeedModel s(options());
  s.add_replica(kPhone, "m");
  // 10 prompt tokens (below min_prefill_sample_tokens) and one generated token.
  s.learn(kPhone, {.timings = Timings{
                       .prompt_n = 10, .prompt_ms = 1, .predicted_n = 1, .predicted_ms = 1}});
  EXPECT_EQ(s.snapshot(kPhone).source, SpeedSnapshot::Source::configured_default);
  EXPECT_DOUBLE_EQ(s.prefill_seconds_per_token(kPhone), 0.02);
}

TEST(SpeedModel, FirstTokenTimeSplitsTheDuration) {
  SpeedModel s(options());
  s.add_replica(kPhone, "m");
  // 1,000 uncached tokens, first token after 10 s, 11 tokens in 12 s: 10 intervals in 2 s.
  s.learn(kPhone, {.uncached_tokens = 1000,
                   .answer_tokens = 11,
                   .first_token_seconds = 10.0,
                   .duration_seconds = 12});
  EXPECT_DOUBLE_EQ(s.prefill_seconds_per_token(kPhone), 0.01);
  EXPECT_DOUBLE_EQ(s.decode_seconds_per_token(kPhone), 0.2);
}

TEST(SpeedModel, WholeDurationScalesBothSpeeds) {
  SpeedModel s(options());
  s.add_replica(kPhone, "m");
  // Expected 1,000 * 0.02 + 9 decode steps * 0.1 = 20.9 s; it took 41.8 s: both twice as slow.
  s.learn(kPhone, {.uncached_tokens = 1000, .answer_tokens = 10, .duration_seconds = 41.8});
  EXPECT_DOUBLE_EQ(s.prefill_seconds_per_token(kPhone), 0.04);
  EXPECT_DOUBLE_EQ(s.decode_seconds_per_token(kPhone), 0.2);
}

TEST(SpeedModel, AgentMeasurementSeedsUntilSamplesArrive) {
  SpeedModel s(options());
  s.add_replica(kPhone, "m");
  s.seed(kPhone, 200, 40);
  EXPECT_EQ(s.snapshot(kPhone).source, SpeedSnapshot::Source::agent_measurement);
  EXPECT_DOUBLE_EQ(s.snapshot(kPhone).prefill_tps, 200);
  EXPECT_STREQ(to_string(SpeedSnapshot::Source::agent_measurement), "agent");
  // A seeded replica averages its first sample with the seed instead of jumping to it.
  s.learn(kPhone,
          {.timings = Timings{
               .prompt_n = 1000, .prompt_ms = 10000, .predicted_n = 10, .predicted_ms = 500}});
  EXPECT_DOUBLE_EQ(s.prefill_seconds_per_token(kPhone), (0.005 + 0.01) / 2);
  // Once learned, a new measurement does not override what traffic showed.
  s.seed(kPhone, 1000, 1000);
  EXPECT_DOUBLE_EQ(s.prefill_seconds_per_token(kPhone), (0.005 + 0.01) / 2);
  // Nonsense is ignored (a replica of another model: no peers to read as).
  s.add_replica(8, "n");
  s.seed(8, 0, -1);
  EXPECT_EQ(s.snapshot(8).source, SpeedSnapshot::Source::configured_default);
}

TEST(SpeedModel, AnUnmeasuredReplicaReadsAsItsModelsLearnedPeers) {
  // A phone nobody measured (no autotune in its /health, no traffic yet) beside phones of the same
  // model that served traffic: at the configured default (10 tokens/s) it looked 50x slower
  // than a fast peer, so expected_finish held every request for the peer and the new phone
  // never got the traffic that would teach it (integration.llama_e2e: 4 parallel streams on two
  // 2-slot phones all went to one).
  SpeedModel s(options());
  s.add_replica(1, "m");
  s.add_replica(2, "m");
  s.add_replica(3, "other");
  s.add_replica(4, "m");
  s.seed(4, 200, 40);
  s.learn(1, {.timings = Timings{
                  .prompt_n = 1000, .prompt_ms = 1000, .predicted_n = 11, .predicted_ms = 20}});
  EXPECT_DOUBLE_EQ(s.prefill_seconds_per_token(2), 0.001);
  EXPECT_DOUBLE_EQ(s.decode_seconds_per_token(2), 0.002);
  EXPECT_EQ(s.snapshot(2).source, SpeedSnapshot::Source::model_peers);
  EXPECT_STREQ(to_string(SpeedSnapshot::Source::model_peers), "peers");
  // Another model's replica stays at the default, a measured one at its measurement.
  EXPECT_EQ(s.snapshot(3).source, SpeedSnapshot::Source::configured_default);
  EXPECT_DOUBLE_EQ(s.prefill_seconds_per_token(4), 1.0 / 200);
  // Its own first sample replaces the peers' figure.
  s.learn(2, {.timings = Timings{
                  .prompt_n = 1000, .prompt_ms = 4000, .predicted_n = 11, .predicted_ms = 80}});
  EXPECT_DOUBLE_EQ(s.prefill_seconds_per_token(2), 0.004);
  EXPECT_EQ(s.snapshot(2).source, SpeedSnapshot::Source::learned);
}

TEST(SpeedModel, ModelChangeStartsOver) {
  SpeedModel s(options());
  s.add_replica(kPhone, "m");
  s.seed(kPhone, 200, 40);
  s.add_replica(kPhone, "m");
  EXPECT_DOUBLE_EQ(s.snapshot(kPhone).prefill_tps, 200);
  s.add_replica(kPhone, "other");
  EXPECT_DOUBLE_EQ(s.snapshot(kPhone).prefill_tps, 50);
  s.remove_replica(kPhone);
  EXPECT_EQ(s.snapshot(kPhone).source, SpeedSnapshot::Source::configured_default);
}

TEST(SpeedModel, NewDefaultsReachOnlyUntouchedReplicas) {
  SpeedModel s(options());
  s.add_replica(1, "m");
  s.add_replica(2, "m");
  s.seed(2, 300, 30);
  RoutingOptions o = options();
  o.default_prefill_tps = 25;
  s.set_options(o);
  EXPECT_DOUBLE_EQ(s.snapshot(1).prefill_tps, 25);
  EXPECT_DOUBLE_EQ(s.snapshot(2).prefill_tps, 300);
}

TEST(SpeedModel, ModelTokenRatioAndAnswerLength) {
  SpeedModel s(options());
  EXPECT_DOUBLE_EQ(s.tokens_per_byte("m"), 0.25);
  EXPECT_DOUBLE_EQ(s.answer_tokens("m", std::nullopt), 16);
  EXPECT_DOUBLE_EQ(s.answer_tokens("m", 4u), 4);
  // 3,000 tokens for 9,000 bytes: 1/3 token per byte. Answers of 8 tokens.
  s.learn_model("m", 9000, Completion{.prompt_tokens = 3000, .completion_tokens = 8});
  EXPECT_DOUBLE_EQ(s.tokens_per_byte("m"), 1.0 / 3);
  EXPECT_DOUBLE_EQ(s.answer_tokens("m", std::nullopt), 8);
  EXPECT_DOUBLE_EQ(s.answer_tokens("m", 100u), 8);
  // A short rendering says little about the tokenizer; a failed answer nothing at all.
  s.learn_model("m", 100, Completion{.prompt_tokens = 90});
  s.learn_model("m", 9000, Completion{.ok = false, .prompt_tokens = 1, .completion_tokens = 900});
  EXPECT_DOUBLE_EQ(s.tokens_per_byte("m"), 1.0 / 3);
  EXPECT_DOUBLE_EQ(s.answer_tokens("m", std::nullopt), 8);
  // An answer cut by max_tokens only raises the estimate.
  s.learn_model("m", 0, Completion{.completion_tokens = 4, .truncated = true});
  EXPECT_DOUBLE_EQ(s.answer_tokens("m", std::nullopt), 8);
  s.learn_model("m", 0, Completion{.completion_tokens = 12, .truncated = true});
  EXPECT_DOUBLE_EQ(s.answer_tokens("m", std::nullopt), 10);
  // Models are separate.
  EXPECT_DOUBLE_EQ(s.tokens_per_byte("other"), 0.25);
}

}  // namespace
}  // namespace fg::scheduling
