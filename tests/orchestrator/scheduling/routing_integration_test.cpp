// The pure pieces of routing's phase 2 (docs/routing.md, "Integration"): routing.* and
// server.api_keys in the YAML, their mapping to RoutingOptions, the agent's /health fields, what
// a relayed answer reports back, and which client key a header carries.
#include <gtest/gtest.h>

#include <string>

#include "common/openai/answer.hpp"
#include "common/util/text.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/health/probe_body.hpp"
#include "orchestrator/scheduling/routing_options.hpp"
#include "orchestrator/scheduling/speed_model.hpp"

namespace fg {
namespace {

constexpr const char* kModels = "models:\n  - name: m\n";

std::string error_of(const std::string& yaml) {
  try {
    config::load_config_string(yaml, "t.yaml");
  } catch (const config::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(RoutingConfig, DefaultsMatchRoutingOptions) {
  const auto c = config::load_config_string(kModels, "t.yaml");
  const scheduling::RoutingOptions mapped = scheduling::routing_options(c.routing, {});
  const scheduling::RoutingOptions defaults;
  EXPECT_EQ(mapped.policy, defaults.policy);
  EXPECT_DOUBLE_EQ(mapped.default_prefill_tps, defaults.default_prefill_tps);
  EXPECT_DOUBLE_EQ(mapped.default_decode_tps, defaults.default_decode_tps);
  EXPECT_DOUBLE_EQ(mapped.speed_smoothing, defaults.speed_smoothing);
  EXPECT_EQ(mapped.min_prefill_sample_tokens, defaults.min_prefill_sample_tokens);
  EXPECT_EQ(mapped.min_decode_sample_tokens, defaults.min_decode_sample_tokens);
  EXPECT_DOUBLE_EQ(mapped.exploration, defaults.exploration);
  EXPECT_DOUBLE_EQ(mapped.default_tokens_per_byte, defaults.default_tokens_per_byte);
  EXPECT_EQ(mapped.default_answer_tokens, defaults.default_answer_tokens);
  EXPECT_EQ(mapped.cache_budget_bytes, defaults.cache_budget_bytes);
  EXPECT_DOUBLE_EQ(mapped.slot_prompt_similarity, defaults.slot_prompt_similarity);
  EXPECT_DOUBLE_EQ(mapped.hold_margin, defaults.hold_margin);
  EXPECT_EQ(mapped.hold_min_gain, defaults.hold_min_gain);
  EXPECT_EQ(mapped.max_overtakes, defaults.max_overtakes);
  EXPECT_EQ(mapped.affinity_yield, defaults.affinity_yield);
  EXPECT_EQ(mapped.scan_window, defaults.scan_window);
  EXPECT_DOUBLE_EQ(mapped.reserve_margin, defaults.reserve_margin);
  EXPECT_EQ(mapped.reserve_prompts, defaults.reserve_prompts);
  EXPECT_EQ(mapped.reserve_window, defaults.reserve_window);
  EXPECT_EQ(mapped.default_priority, defaults.default_priority);
  EXPECT_TRUE(mapped.band_queue_max.empty());
  EXPECT_DOUBLE_EQ(mapped.fair_share_slack_tokens, defaults.fair_share_slack_tokens);
  EXPECT_TRUE(mapped.tenant_weights.empty());
  EXPECT_EQ(mapped.shed_retry_after_min, defaults.shed_retry_after_min);
  EXPECT_EQ(mapped.shed_retry_after_max, defaults.shed_retry_after_max);
}

TEST(RoutingConfig, EveryKnobIsReadAndMapped) {
  const auto c = config::load_config_string(std::string(kModels) + R"(routing:
  policy: expected_finish
  default_prefill_tps: 72.2
  default_decode_tps: 18
  speed_smoothing: 0.5
  min_prefill_sample_tokens: 8
  min_decode_sample_tokens: 1
  exploration: 0
  default_tokens_per_byte: 0.3
  default_answer_tokens: 8
  cache_budget_bytes: 1048576
  slot_prompt_similarity: 0.5
  hold_margin: 0.25
  hold_min_gain: 500ms
  max_overtakes: 4
  affinity_yield: false
  scan_window: 16
  reserve_margin: 0.75
  reserve_prompts: 3
  reserve_window: 90s
  default_priority: 10
  band_queue_max:
    - {priority: -1, max: 50000}
    - {priority: 10, max: 200}
  fair_share_slack_tokens: 1000
  shed_retry_after_min: 1500ms
  shed_retry_after_max: 30s
server:
  api_keys:
    - {name: batch-team, key_env: BATCH_KEY, priority: -1, weight: 0.5}
    - {name: guard, key_env: GUARD_KEY}
)",
                                            "t.yaml");
  ASSERT_EQ(c.server.api_keys.size(), 2u);
  EXPECT_EQ(c.server.api_keys[0].name, "batch-team");
  EXPECT_EQ(c.server.api_keys[0].key_env, "BATCH_KEY");
  EXPECT_EQ(c.server.api_keys[0].priority, -1);
  EXPECT_FALSE(c.server.api_keys[1].priority.has_value());
  const auto o = scheduling::routing_options(c.routing, c.server.api_keys);
  EXPECT_EQ(o.policy, scheduling::RoutingPolicy::expected_finish);
  EXPECT_DOUBLE_EQ(o.default_prefill_tps, 72.2);
  EXPECT_DOUBLE_EQ(o.default_decode_tps, 18);
  EXPECT_DOUBLE_EQ(o.speed_smoothing, 0.5);
  EXPECT_EQ(o.min_prefill_sample_tokens, 8u);
  EXPECT_EQ(o.min_decode_sample_tokens, 1u);
  EXPECT_DOUBLE_EQ(o.exploration, 0);
  EXPECT_DOUBLE_EQ(o.default_tokens_per_byte, 0.3);
  EXPECT_EQ(o.default_answer_tokens, 8u);
  EXPECT_EQ(o.cache_budget_bytes, 1048576u);
  EXPECT_DOUBLE_EQ(o.slot_prompt_similarity, 0.5);
  EXPECT_DOUBLE_EQ(o.hold_margin, 0.25);
  EXPECT_EQ(o.hold_min_gain, std::chrono::milliseconds(500));
  EXPECT_EQ(o.max_overtakes, 4u);
  EXPECT_FALSE(o.affinity_yield);
  EXPECT_EQ(o.scan_window, 16u);
  EXPECT_DOUBLE_EQ(o.reserve_margin, 0.75);
  EXPECT_EQ(o.reserve_prompts, 3u);
  EXPECT_EQ(o.reserve_window, std::chrono::seconds(90));
  EXPECT_EQ(o.default_priority, 10);
  EXPECT_EQ(o.band_queue_max.at(-1), 50000u);
  EXPECT_EQ(o.band_queue_max.at(10), 200u);
  EXPECT_DOUBLE_EQ(o.fair_share_slack_tokens, 1000);
  // Retry-After is whole seconds: 1500ms rounds up.
  EXPECT_EQ(o.shed_retry_after_min, std::chrono::seconds(2));
  EXPECT_EQ(o.shed_retry_after_max, std::chrono::seconds(30));
  ASSERT_EQ(o.tenant_weights.size(), 1u);
  EXPECT_DOUBLE_EQ(o.tenant_weights.at("batch-team"), 0.5);
}

TEST(RoutingConfig, BadValuesNameFileLineAndKey) {
  const std::string m(kModels);
  EXPECT_EQ(error_of(m + "routing:\n  policy: fastest\n"),
            "t.yaml:4: routing.policy: expected one of least_loaded, expected_finish, got "
            "\"fastest\"");
  EXPECT_NE(error_of(m + "routing:\n  exploration: 2\n").find("t.yaml:4: routing.exploration"),
            std::string::npos);
  EXPECT_NE(error_of(m + "routing:\n  default_priority: 1.5\n")
                .find("t.yaml:4: routing.default_priority: expected a whole number"),
            std::string::npos);
  EXPECT_NE(error_of(m + "routing:\n  default_priority: 1001\n")
                .find("t.yaml:4: routing.default_priority"),
            std::string::npos);
  EXPECT_NE(error_of(m + "routing:\n  shed_retry_after_min: 10s\n  shed_retry_after_max: 5s\n")
                .find("routing.shed_retry_after_max must be at least"),
            std::string::npos);
  EXPECT_NE(error_of(m + "routing:\n  band_queue_max:\n    - {priority: 1, max: 2}\n    - "
                         "{priority: 1, max: 3}\n")
                .find("already has a limit"),
            std::string::npos);
  EXPECT_NE(error_of(m + "server:\n  api_keys:\n    - {key_env: K}\n")
                .find("server.api_keys[0].name: missing"),
            std::string::npos);
  EXPECT_NE(error_of(m + "server:\n  api_keys:\n    - {name: a, key_env: K}\n    - {name: a, "
                         "key_env: L}\n")
                .find("duplicate API key name \"a\""),
            std::string::npos);
  EXPECT_NE(error_of(m + "server:\n  api_keys:\n    - {name: \"a b\", key_env: K}\n")
                .find("expected 1 to 64 letters"),
            std::string::npos);
  EXPECT_NE(error_of(m + "server:\n  api_keys:\n    - {name: a}\n").find("key_env: missing"),
            std::string::npos);
  EXPECT_NE(error_of(m + "server:\n  api_keys:\n    - {name: a, key_env: K, priority: -2000}\n")
                .find("server.api_keys[0].priority"),
            std::string::npos);
  EXPECT_NE(error_of(m + "server:\n  api_keys:\n    - {name: a, key_env: K, weight: 0}\n")
                .find("server.api_keys[0].weight"),
            std::string::npos);
}

TEST(RoutingHealthFields, AnAgentsSpeedsAndCacheFactsAreRead) {
  auto b =
      health::parse_probe_body(R"({"status":"ok","model":"m","prefill_tps":85.2,"decode_tps":9.3,)"
                               R"("host_prompt_cache_tokens":32768,"engine_starts":2})",
                               "m");
  EXPECT_DOUBLE_EQ(b.prefill_tps.value_or(0), 85.2);
  EXPECT_DOUBLE_EQ(b.decode_tps.value_or(0), 9.3);
  EXPECT_EQ(b.host_prompt_cache_tokens, 32768u);
  EXPECT_EQ(b.engine_starts, 2u);
}

TEST(RoutingHealthFields, MissingMistypedOrAbsurdFieldsAreIgnored) {
  auto none = health::parse_probe_body(R"({"status":"ok","model":"m"})", "m");
  EXPECT_FALSE(none.prefill_tps || none.decode_tps || none.host_prompt_cache_tokens ||
               none.engine_starts);
  auto bad = health::parse_probe_body(
      R"({"prefill_tps":"fast","decode_tps":-1,"host_prompt_cache_tokens":1.5,)"
      R"("engine_starts":-3})",
      "m");
  EXPECT_FALSE(bad.prefill_tps || bad.decode_tps || bad.host_prompt_cache_tokens ||
               bad.engine_starts);
  auto huge = health::parse_probe_body(R"({"prefill_tps":1e300,"decode_tps":0})", "m");
  EXPECT_FALSE(huge.prefill_tps || huge.decode_tps);
}

TEST(RoutingCompletion, FromTheStatsTheRelayRead) {
  openai::AnswerStats stats;
  stats.prompt_tokens = 7000;
  stats.completion_tokens = 8;
  stats.prompt_n = 2008;
  stats.prompt_ms = 27800;
  stats.predicted_n = 8;
  stats.predicted_ms = 444;
  stats.cache_n = 4992;
  const scheduling::Completion c = scheduling::completion_from_stats(stats);
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.prompt_tokens, 7000u);
  EXPECT_EQ(c.completion_tokens, 8u);
  // No usage.cached_tokens: llama.cpp's cache_n stands in.
  EXPECT_EQ(c.cached_tokens, 4992u);
  ASSERT_TRUE(c.timings.has_value());
  EXPECT_DOUBLE_EQ(c.timings->prompt_n, 2008);
  EXPECT_DOUBLE_EQ(c.timings->prompt_ms, 27800);
  EXPECT_DOUBLE_EQ(c.timings->predicted_n, 8);
  EXPECT_DOUBLE_EQ(c.timings->predicted_ms, 444);
  EXPECT_DOUBLE_EQ(c.timings->cache_n.value_or(0), 4992);
  EXPECT_FALSE(c.truncated);
  stats.truncated = true;  // finish_reason "length"
  EXPECT_TRUE(scheduling::completion_from_stats(stats).truncated);
}

TEST(RoutingCompletion, PartialTimingsAreNoTimings) {
  openai::AnswerStats stats;
  stats.prompt_tokens = 10;
  stats.cached_tokens = 4;
  stats.prompt_n = 6;  // no prompt_ms, predicted_*
  const scheduling::Completion c = scheduling::completion_from_stats(stats);
  EXPECT_FALSE(c.timings.has_value());
  EXPECT_EQ(c.cached_tokens, 4u);
  EXPECT_FALSE(c.completion_tokens.has_value());
}

TEST(RoutingKeys, TheMatchingKeysIndexIsFound) {
  BearerKeys keys({"alpha", "", "beta"});
  EXPECT_EQ(keys.match("Bearer alpha"), 0u);
  EXPECT_EQ(keys.match("Bearer beta"), 1u);  // the empty key is skipped
  EXPECT_EQ(keys.match("bearer beta"), 1u);
  EXPECT_FALSE(keys.match("Bearer gamma").has_value());
  EXPECT_FALSE(keys.match("").has_value());
  EXPECT_FALSE(keys.match("Basic alpha").has_value());
  EXPECT_TRUE(keys.matches("Bearer beta"));
}

}  // namespace
}  // namespace fg
