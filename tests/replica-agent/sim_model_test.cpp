#include "replica-agent/engines/sim_model.hpp"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>

namespace fg::sim {
namespace {

const SimProfile& profile(std::string_view name) {
  const SimProfile* found = find_profile(name);
  EXPECT_NE(found, nullptr) << name;
  return *found;
}

constexpr std::string_view k9b = "qwen3.5-9b/snapdragon-8-elite";
constexpr std::string_view k4b = "qwen3.5-4b/snapdragon-8-elite";
constexpr std::string_view k08b = "qwen3.5-0.8b/snapdragon-8-elite";

// A prompt of exactly `tokens` tokens under the chars/4 rule.
std::string prompt_of_tokens(std::size_t tokens) {
  return std::string(tokens * 4, 'a');
}

SimPlan plan(const SimProfile& p, const SimOptions& options, std::string_view prompt,
             std::size_t cached = 0, std::optional<std::size_t> max_tokens = std::nullopt,
             std::uint64_t rng_seed = 1) {
  std::mt19937_64 rng(rng_seed);
  return plan_request(p, options, prompt, cached, max_tokens, rng);
}

TEST(SimTokens, CharsOverFourRoundedUp) {
  EXPECT_EQ(prompt_tokens_for_chars(0), 0u);
  EXPECT_EQ(prompt_tokens_for_chars(1), 1u);
  EXPECT_EQ(prompt_tokens_for_chars(4), 1u);
  EXPECT_EQ(prompt_tokens_for_chars(5), 2u);
  EXPECT_EQ(prompt_tokens_for_chars(28000), 7000u);
}

TEST(SimPrefill, SevenThousandTokenPromptMatchesFieldReport) {
  struct Case {
    std::string_view name;
    double seconds;
  };
  for (auto [name, seconds] : {Case{k9b, 195.0}, Case{k4b, 97.0}, Case{k08b, 15.0}}) {
    SimPlan p = plan(profile(name), {}, prompt_of_tokens(7000));
    EXPECT_EQ(p.prompt_tokens, 7000u);
    EXPECT_EQ(p.cached_tokens, 0u);
    EXPECT_NEAR(p.prefill_seconds, seconds, seconds * 0.005) << name;
  }
}

TEST(SimPrefill, FastTestShortRequestUnderASecond) {
  const SimProfile& fast = profile("fast-test");
  SimPlan p = plan(fast, {}, std::string(400, 'x'));
  auto schedule = token_schedule(fast, p, 1, 1.0);
  ASSERT_EQ(schedule.size(), fast.default_max_tokens);
  EXPECT_LT(schedule.back(), 0.5);
}

TEST(SimPrefill, TimeScaleDividesEveryDuration) {
  const SimProfile& p9 = profile(k9b);
  SimOptions fast;
  fast.time_scale = 100.0;
  SimPlan scaled = plan(p9, fast, prompt_of_tokens(7000));
  EXPECT_NEAR(scaled.prefill_seconds, 1.95, 1.95 * 0.005);
  EXPECT_DOUBLE_EQ(token_interval_seconds(p9, 1, 100.0), token_interval_seconds(p9, 1, 1.0) / 100);
  EXPECT_NEAR(token_interval_seconds(p9, 1, 1.0), 1.0 / 9.3, 1e-12);
}

TEST(SimPrefill, NonPositiveTimeScaleThrows) {
  SimOptions bad;
  bad.time_scale = 0;
  EXPECT_THROW(plan(profile(k9b), bad, "hello"), std::invalid_argument);
}

TEST(SimCache, HitReducesPrefillByCachedFraction) {
  const SimProfile& p9 = profile(k9b);
  std::string history = prompt_of_tokens(6000);
  std::string prompt = history + std::string(4000, 'b');  // 7,000 tokens, 6,000 shared
  SlotCache cache(1);
  cache.store(0, history);
  std::size_t cached = cache.cached_prefix_tokens(0, prompt);
  EXPECT_EQ(cached, 6000u);
  SimPlan cold = plan(p9, {}, prompt);
  SimPlan warm = plan(p9, {}, prompt, cached);
  EXPECT_EQ(warm.cached_tokens, 6000u);
  EXPECT_NEAR(warm.prefill_seconds, cold.prefill_seconds * 1000.0 / 7000.0, 1e-9);
}

TEST(SimCache, PrefixIsCharactersOverFourFloored) {
  SlotCache cache(2);
  cache.store(0, "abcdefgXYZ");
  EXPECT_EQ(cache.cached_prefix_tokens(0, "abcdefg-and-more"), 1u);  // 7 chars -> 1
  EXPECT_EQ(cache.cached_prefix_tokens(0, "abcdefgX-and-more"), 2u);
  EXPECT_EQ(cache.cached_prefix_tokens(1, "abcdefgX-and-more"), 0u);  // empty slot
  EXPECT_EQ(cache.cached_prefix_tokens(7, "abcdefgX-and-more"), 0u);  // no such slot
  EXPECT_EQ(cache.cached_prefix_tokens(0, ""), 0u);
}

TEST(SimCache, CachedNeverEqualsFullPrompt) {
  std::string prompt = prompt_of_tokens(7000);
  SlotCache cache(1);
  cache.store(0, prompt);
  std::size_t cached = cache.cached_prefix_tokens(0, prompt);
  EXPECT_EQ(cached, 6999u);
  cache.store(0, prompt + "more text after");
  EXPECT_EQ(cache.cached_prefix_tokens(0, prompt), 6999u);
  cache.store(0, "abc");
  EXPECT_EQ(cache.cached_prefix_tokens(0, "abc"), 0u);  // one token prompt: nothing cached

  // plan_request clamps too, whatever it is given.
  SimPlan p = plan(profile(k9b), {}, prompt, 1'000'000);
  EXPECT_EQ(p.cached_tokens, 6999u);
  EXPECT_GT(p.prefill_seconds, 0.0);
  EXPECT_NEAR(p.prefill_seconds, 1.0 / (7000.0 / 195.0), 1e-9);
}

// llama-server's get_available_slot (tools/server/server-context.cpp in the pinned llama.cpp):
// the idle slot with the largest common-prefix share above --slot-prompt-similarity.
TEST(SimCache, AcquirePrefersTheLargestPrefixShareAmongIdle) {
  SlotCache cache(4);
  cache.store(1, "system prompt A; user 1");
  cache.store(2, "system prompt B; user 8");
  auto a = cache.acquire("system prompt A; user 2", {});
  ASSERT_TRUE(a);
  EXPECT_EQ(a->slot, 1u);
  EXPECT_TRUE(a->by_similarity);
  EXPECT_EQ(cache.acquire("system prompt B; user 9", {false, false, false, false})->slot, 2u);
  EXPECT_EQ(cache.acquire("system prompt A; user 2", {false, true})->slot, 2u);  // 1 busy
  EXPECT_EQ(cache.acquire("x", {true, true, true, true}), std::nullopt);
  cache.clear(1);
  EXPECT_EQ(cache.cached_prefix_tokens(1, "system prompt A; user 1"), 0u);
}

TEST(SimCache, BelowTheSimilarityThresholdTheLeastRecentlyUsedSlotIsTaken) {
  SlotCache cache(2, PromptCacheOptions{0.5, 0});
  const std::string shared = prompt_of_tokens(100);
  cache.store(0, shared + std::string(400, 'x'));  // slot 0 holds 200 tokens
  cache.release(0);
  // 100 of 200 tokens shared: 0.5 is not above 0.5, so LRU: slot 1 was never used.
  auto pick = cache.acquire(shared + std::string(400, 'y'), {});
  ASSERT_TRUE(pick);
  EXPECT_EQ(pick->slot, 1u);
  EXPECT_FALSE(pick->by_similarity);
  // 100 of 196 tokens: above 0.5, slot 0.
  pick = cache.acquire(shared + std::string(384, 'y'), {});
  EXPECT_EQ(pick->slot, 0u);
  EXPECT_TRUE(pick->by_similarity);
  // Similarity 0 turns the choice off: LRU only, even for an exact match.
  SlotCache lru_only(2, PromptCacheOptions{0.0, 0});
  lru_only.store(0, shared);
  lru_only.release(0);
  EXPECT_EQ(lru_only.acquire(shared, {})->slot, 1u);
}

TEST(SimCache, LeastRecentlyUsedFollowsReleasesNeverUsedFirstHighestIndexOnTies) {
  SlotCache cache(3);
  // All never used: llama.cpp's `<=` scan ends on the last one.
  EXPECT_EQ(cache.acquire("a", {})->slot, 2u);
  cache.release(2);
  EXPECT_EQ(cache.acquire("b", {})->slot, 1u);  // 0 and 1 never used: the higher
  cache.release(1);
  cache.release(0);
  cache.release(2);
  // Release order 2, 1, 0, 2: slot 1 is the least recently used now.
  EXPECT_EQ(cache.acquire("c", {})->slot, 1u);
  EXPECT_EQ(cache.acquire("c", {false, true})->slot, 0u);
}

TEST(SimCache, HostCacheKeepsWhatLruDisplacesAndRestoresIt) {
  SlotCache cache(1, PromptCacheOptions{0.1, 20000});
  const std::string p1 = prompt_of_tokens(5000) + "one";
  const std::string p2 = std::string(20000, 'b');
  ASSERT_EQ(cache.acquire(p1, {})->slot, 0u);  // empty slot, empty host: nothing to save
  cache.store(0, p1);
  cache.release(0);
  EXPECT_EQ(cache.host_entries(), 0u);

  // An unrelated prompt: LRU, so the slot's prompt goes to the host cache first.
  auto pick = cache.acquire(p2, {});
  EXPECT_FALSE(pick->by_similarity);
  EXPECT_FALSE(pick->restored_from_host);
  EXPECT_EQ(cache.host_entries(), 1u);
  EXPECT_EQ(cache.host_tokens(), 5001u);
  cache.store(0, p2);
  cache.release(0);

  // p1's prefix again: the slot (p2) shares nothing, the host entry all of it: restored.
  const std::string again = prompt_of_tokens(5000) + "two";
  pick = cache.acquire(again, {});
  EXPECT_TRUE(pick->restored_from_host);
  EXPECT_EQ(cache.cached_prefix_tokens(0, again), 5000u);
  // p2 was saved on the way (5,000 tokens) and p1 left the host cache for the slot.
  EXPECT_EQ(cache.host_entries(), 1u);
  EXPECT_EQ(cache.host_tokens(), 5000u);
}

TEST(SimCache, HostCacheDropsTheOldestAndSkipsWhatItHoldsOrCannotFit) {
  SlotCache cache(1, PromptCacheOptions{0.1, 250});
  auto cycle = [&](const std::string& text) {
    ASSERT_TRUE(cache.acquire(text, {}));
    cache.store(0, text);
    cache.release(0);
  };
  cycle(std::string(400, 'a'));  // 100 tokens
  cycle(std::string(400, 'b'));  // saves a
  cycle(std::string(400, 'c'));  // saves b
  EXPECT_EQ(cache.host_entries(), 2u);
  cycle(std::string(400, 'd'));  // saves c: a (the oldest) goes to make room
  EXPECT_EQ(cache.host_entries(), 2u);
  EXPECT_EQ(cache.host_tokens(), 200u);
  // A prompt larger than the whole host cache is never saved.
  cycle(std::string(1200, 'e'));  // saves d, dropping b
  cycle(std::string(400, 'f'));   // e (300 tokens) does not fit at all
  EXPECT_EQ(cache.host_entries(), 2u);
  EXPECT_EQ(cache.host_tokens(), 200u);
}

TEST(SimCache, HostCacheReplacesEntriesTheSavedPromptContainsAndSkipsContainedOnes) {
  SlotCache cache(1, PromptCacheOptions{0.1, 100000});
  const std::string base = prompt_of_tokens(1000);
  cache.store(0, base);
  cache.release(0);
  ASSERT_TRUE(cache.acquire(std::string(400, 'z'), {}));  // LRU: saves base
  EXPECT_EQ(cache.host_entries(), 1u);
  cache.store(0, base + std::string(16000, 'l'));  // the slot went on from base
  cache.release(0);
  ASSERT_TRUE(cache.acquire(std::string(400, 'w'), {}));  // saves base + l..., which holds base
  EXPECT_EQ(cache.host_entries(), 1u);
  EXPECT_EQ(cache.host_tokens(), 5000u);
  // A prompt an entry already holds is not saved again.
  cache.store(0, base);
  cache.release(0);
  auto pick = cache.acquire(std::string(400, 'v'), {});
  EXPECT_FALSE(pick->restored_from_host);
  EXPECT_EQ(cache.host_entries(), 1u);
  EXPECT_EQ(cache.host_tokens(), 5000u);
  // That entry keeps 1,000 of its 5,000 tokens for `base`: under a quarter, so not restored.
  cache.store(0, std::string(400, 'v'));
  cache.release(0);
  EXPECT_FALSE(cache.acquire(base + "x", {})->restored_from_host);
}

TEST(SimCache, KeepingLessThanHalfOfTheSlotSavesItFirst) {
  SlotCache cache(1, PromptCacheOptions{0.1, 100000});
  const std::string prefix = prompt_of_tokens(300);
  const std::string held = prefix + std::string(3600, 'h');  // 1,200 tokens
  cache.store(0, held);
  cache.release(0);
  // Shares 300 tokens with the slot: similar (300 / 400 > 0.1), but keeps 300 / 1200 < 0.5.
  auto pick = cache.acquire(prefix + std::string(400, 'n'), {});
  EXPECT_TRUE(pick->by_similarity);
  EXPECT_EQ(cache.host_entries(), 1u);
  EXPECT_EQ(cache.host_tokens(), 1200u);
  // Keeping more than half: nothing saved.
  SlotCache other(1, PromptCacheOptions{0.1, 100000});
  other.store(0, held);
  other.release(0);
  other.acquire(held + "next", {});
  EXPECT_EQ(other.host_entries(), 0u);
}

// The two requests of agent_sim.test.mjs's "simulated timing" tests, exactly: the integration
// test checks only that the running agent is never faster than this plan (a lower bound), since
// a loaded machine can only make it slower.
TEST(SimTiming, StreamOfTheTimingTest) {
  const SimProfile& p9 = profile(k9b);
  SimOptions options;
  options.time_scale = 10;
  const std::string content(1400, 'a');  // 350 tokens
  const SimPlan p = plan(p9, options, content);
  EXPECT_EQ(p.prompt_tokens, 350u);
  EXPECT_EQ(p.completion_tokens, 16u);
  const double prefill = 350.0 / (7000.0 / 195.0) / 10;  // 0.975 s
  const double interval = 1.0 / 9.3 / 10;                // 10.75 ms
  EXPECT_NEAR(p.prefill_seconds, prefill, 1e-12);
  const auto schedule = token_schedule(p9, p, 1, options.time_scale);
  ASSERT_EQ(schedule.size(), 16u);
  EXPECT_NEAR(schedule.front(), prefill, 1e-12);
  EXPECT_NEAR(schedule.back(), prefill + 15 * interval, 1e-12);  // ~1.136 s
  for (std::size_t i = 1; i < schedule.size(); ++i) {
    EXPECT_NEAR(schedule[i] - schedule[i - 1], interval, 1e-12);
  }
}

TEST(SimTiming, SharedPrefixOfTheTimingTest) {
  const SimProfile& p9 = profile(k9b);
  SimOptions options;
  options.time_scale = 10;
  const std::string prefix(2000, 'b');  // 500 tokens
  const std::string follow_up = prefix + "\nZZ follow-up question about the same case";
  SlotCache cache(1);
  const SimPlan first = plan(p9, options, prefix, cache.cached_prefix_tokens(0, prefix));
  EXPECT_EQ(first.cached_tokens, 0u);
  cache.store(0, prefix + sim_text(first.text_seed, first.completion_tokens));
  const std::size_t cached = cache.cached_prefix_tokens(0, follow_up);
  EXPECT_EQ(cached, 500u);
  const SimPlan second = plan(p9, options, follow_up, cached);
  const SimPlan uncached = plan(p9, options, follow_up);
  EXPECT_EQ(second.prompt_tokens, 511u);
  EXPECT_EQ(second.cached_tokens, 500u);
  // The follow-up reads 11 tokens instead of 511: the cache saves 500 / 35.9 / 10 = 1.39 s.
  EXPECT_NEAR(second.prefill_seconds, 11.0 / (7000.0 / 195.0) / 10, 1e-12);
  EXPECT_NEAR(uncached.prefill_seconds - second.prefill_seconds, 500.0 / (7000.0 / 195.0) / 10,
              1e-12);
}

TEST(SimDecode, ZeroPointEightBParallelSlots) {
  const SimProfile& small = profile(k08b);
  double one = token_interval_seconds(small, 1, 1.0);
  double four = token_interval_seconds(small, 4, 1.0);
  EXPECT_NEAR(1.0 / one, 20.0, 1e-9);
  EXPECT_NEAR(4.0 / four, 46.0, 1e-9);  // 4 streams in total
  EXPECT_GT(four, one);
  // Totals grow with each busy slot, per-stream speed shrinks.
  double previous_total = 0;
  double previous_interval = 0;
  for (std::size_t k = 1; k <= 4; ++k) {
    double interval = token_interval_seconds(small, k, 1.0);
    double total = static_cast<double>(k) / interval;
    EXPECT_GT(total, previous_total);
    EXPECT_GT(interval, previous_interval);
    previous_total = total;
    previous_interval = interval;
  }
  // Out of range counts are clamped.
  EXPECT_DOUBLE_EQ(token_interval_seconds(small, 0, 1.0), one);
  EXPECT_DOUBLE_EQ(token_interval_seconds(small, 9, 1.0), four);
}

TEST(SimDecode, ScheduleStartsAtPrefillEndAndStepsByInterval) {
  const SimProfile& small = profile(k08b);
  SimPlan p = plan(small, {}, prompt_of_tokens(7000), 0, 5);
  auto schedule = token_schedule(small, p, 4, 1.0);
  ASSERT_EQ(schedule.size(), 5u);
  EXPECT_DOUBLE_EQ(schedule[0], p.prefill_seconds);
  double interval = token_interval_seconds(small, 4, 1.0);
  for (std::size_t i = 1; i < schedule.size(); ++i) {
    EXPECT_NEAR(schedule[i] - schedule[i - 1], interval, 1e-9);
  }
}

TEST(SimDecode, CompletionTokensCappedByRequest) {
  const SimProfile& p9 = profile(k9b);
  SimPlan natural = plan(p9, {}, "hi");
  EXPECT_EQ(natural.completion_tokens, p9.default_max_tokens);
  EXPECT_EQ(natural.finish_reason, "stop");
  SimPlan capped = plan(p9, {}, "hi", 0, 3);
  EXPECT_EQ(capped.completion_tokens, 3u);
  EXPECT_EQ(capped.finish_reason, "length");
  SimPlan generous = plan(p9, {}, "hi", 0, 4096);
  EXPECT_EQ(generous.completion_tokens, p9.default_max_tokens);
  EXPECT_EQ(generous.finish_reason, "stop");
  EXPECT_TRUE(token_schedule(p9, plan(p9, {}, "hi", 0, 0), 1, 1.0).empty());
}

TEST(SimJitter, WithinBoundsAndDeterministic) {
  const SimProfile& p4 = profile(k4b);
  SimOptions options;
  options.jitter = 0.2;
  std::string prompt = prompt_of_tokens(7000);
  double base = 97.0;
  std::mt19937_64 rng(42);
  std::set<double> seen;
  for (int i = 0; i < 1000; ++i) {
    SimPlan p = plan_request(p4, options, prompt, 0, std::nullopt, rng);
    EXPECT_GE(p.prefill_jitter, 0.8);
    EXPECT_LE(p.prefill_jitter, 1.2);
    EXPECT_GE(p.decode_jitter, 0.8);
    EXPECT_LE(p.decode_jitter, 1.2);
    EXPECT_GE(p.prefill_seconds, base * 0.8 * 0.995);
    EXPECT_LE(p.prefill_seconds, base * 1.2 * 1.005);
    seen.insert(p.prefill_seconds);
  }
  EXPECT_GT(seen.size(), 900u);  // actually spread, not constant

  std::mt19937_64 a(7);
  std::mt19937_64 b(7);
  for (int i = 0; i < 20; ++i) {
    SimPlan pa = plan_request(p4, options, prompt, 0, std::nullopt, a);
    SimPlan pb = plan_request(p4, options, prompt, 0, std::nullopt, b);
    EXPECT_EQ(pa.prefill_seconds, pb.prefill_seconds);
    EXPECT_EQ(token_schedule(p4, pa, 1, 1.0), token_schedule(p4, pb, 1, 1.0));
  }
}

TEST(SimJitter, ZeroJitterIsExact) {
  std::mt19937_64 rng(3);
  for (int i = 0; i < 10; ++i) {
    SimPlan p = plan_request(profile(k9b), {}, "abcd", 0, std::nullopt, rng);
    EXPECT_EQ(p.prefill_jitter, 1.0);
    EXPECT_EQ(p.decode_jitter, 1.0);
  }
}

TEST(SimJitter, DecodeJitterScalesSchedule) {
  const SimProfile& p9 = profile(k9b);
  SimOptions options;
  options.jitter = 0.5;
  SimPlan p = plan(p9, options, "abcdefgh", 0, 4, 99);
  auto schedule = token_schedule(p9, p, 1, 1.0);
  EXPECT_NEAR(schedule[1] - schedule[0], p.decode_jitter / 9.3, 1e-12);
}

TEST(SimFail, RateZeroNeverFailsRateOneAlwaysFails) {
  SimOptions never;
  SimOptions always;
  always.fail_rate = 1.0;
  std::mt19937_64 rng(11);
  for (int i = 0; i < 500; ++i) {
    EXPECT_FALSE(plan_request(profile("fast-test"), never, "x", 0, std::nullopt, rng).fail);
    EXPECT_TRUE(plan_request(profile("fast-test"), always, "x", 0, std::nullopt, rng).fail);
  }
}

TEST(SimFail, RateHalfFailsAboutHalfAndIndependentOfJitter) {
  SimOptions half;
  half.fail_rate = 0.5;
  SimOptions half_jitter = half;
  half_jitter.jitter = 0.3;
  std::mt19937_64 a(5);
  std::mt19937_64 b(5);
  int failures = 0;
  for (int i = 0; i < 2000; ++i) {
    bool fa = plan_request(profile(k9b), half, "x", 0, std::nullopt, a).fail;
    bool fb = plan_request(profile(k9b), half_jitter, "x", 0, std::nullopt, b).fail;
    EXPECT_EQ(fa, fb);
    failures += fa ? 1 : 0;
  }
  EXPECT_GT(failures, 850);
  EXPECT_LT(failures, 1150);
}

TEST(SimText, TokensDeterministicWordLike) {
  std::uint64_t seed = text_seed("classify this transaction", 0);
  EXPECT_EQ(seed, text_seed("classify this transaction", 0));
  EXPECT_NE(seed, text_seed("classify this transaction", 1));
  EXPECT_NE(seed, text_seed("classify that transaction", 0));
  std::set<std::string> distinct;
  for (std::size_t i = 0; i < 50; ++i) {
    std::string token = sim_token(seed, i);
    EXPECT_EQ(token, sim_token(seed, i));
    ASSERT_FALSE(token.empty());
    EXPECT_EQ(token[0] == ' ', i != 0) << token;
    EXPECT_LE(token.size(), 10u);
    distinct.insert(token);
  }
  EXPECT_GT(distinct.size(), 5u);
  std::string text = sim_text(seed, 50);
  std::string joined;
  for (std::size_t i = 0; i < 50; ++i) {
    joined += sim_token(seed, i);
  }
  EXPECT_EQ(text, joined);
  EXPECT_NE(text, sim_text(seed + 1, 50));
  EXPECT_EQ(sim_text(seed, 0), "");
}

TEST(SimText, PlanSeedFollowsPromptAndConfiguredSeed) {
  SimOptions options;
  options.seed = 1234;
  SimPlan a = plan(profile(k9b), options, "same prompt", 0, std::nullopt, 1);
  SimPlan b = plan(profile(k9b), options, "same prompt", 0, std::nullopt, 2);
  EXPECT_EQ(a.text_seed, b.text_seed);  // RNG state does not change the answer
  EXPECT_EQ(a.text_seed, text_seed("same prompt", 1234));
}

TEST(SimPrompt, ChatStringContents) {
  auto body = nlohmann::json::parse(R"({
    "model": "m",
    "messages": [
      {"role": "system", "content": "You review fraud. "},
      {"role": "user", "content": "Transaction 42"},
      {"role": "assistant", "content": null, "tool_calls": []}
    ]})");
  EXPECT_EQ(extract_prompt_text(body), "You review fraud. Transaction 42");
}

TEST(SimPrompt, ChatArrayContents) {
  auto body = nlohmann::json::parse(R"({
    "model": "m",
    "messages": [
      {"role": "system", "content": "sys|"},
      {"role": "user", "content": [
        {"type": "text", "text": "part one|"},
        {"type": "image_url", "image_url": {"url": "data:..."}},
        {"type": "text", "text": "part two"}
      ]}
    ]})");
  EXPECT_EQ(extract_prompt_text(body), "sys|part one|part two");
}

TEST(SimPrompt, CompletionsStringAndArray) {
  EXPECT_EQ(extract_prompt_text(nlohmann::json::parse(R"({"model":"m","prompt":"Once upon"})")),
            "Once upon");
  EXPECT_EQ(
      extract_prompt_text(nlohmann::json::parse(R"({"model":"m","prompt":["a b ","c d",7]})")),
      "a b c d");
  EXPECT_EQ(extract_prompt_text(nlohmann::json::parse(R"({"model":"m","prompt":[1,2,3]})")), "");
  EXPECT_EQ(extract_prompt_text(nlohmann::json::parse(R"({"model":"m"})")), "");
  EXPECT_EQ(extract_prompt_text(nlohmann::json::parse(R"([1,2])")), "");
}

TEST(SimPrompt, RequestedMaxTokens) {
  using nlohmann::json;
  EXPECT_EQ(requested_max_tokens(json::parse(R"({"max_tokens": 5})")), 5u);
  EXPECT_EQ(requested_max_tokens(json::parse(R"({"max_completion_tokens": 7})")), 7u);
  EXPECT_EQ(requested_max_tokens(json::parse(R"({"max_tokens": 5, "max_completion_tokens": 7})")),
            7u);
  EXPECT_EQ(requested_max_tokens(json::parse(R"({"max_tokens": -1})")), std::nullopt);
  EXPECT_EQ(requested_max_tokens(json::parse(R"({"max_tokens": "5"})")), std::nullopt);
  EXPECT_EQ(requested_max_tokens(json::parse(R"({})")), std::nullopt);
}

TEST(SimPrompt, AnthropicResponsesAndRerankBodies) {
  EXPECT_EQ(extract_prompt_text(nlohmann::json::parse(R"({"model":"m","system":"sys|",
      "messages":[{"role":"user","content":[{"type":"text","text":"hello"}]}]})")),
            "sys|hello");
  EXPECT_EQ(extract_prompt_text(nlohmann::json::parse(
                R"({"model":"m","instructions":"be brief|","input":"is it risky"})")),
            "be brief|is it risky");
  EXPECT_EQ(extract_prompt_text(nlohmann::json::parse(R"({"model":"m","input":[
      {"role":"user","content":[{"type":"input_text","text":"a|"}]},
      {"type":"message","role":"assistant","content":[{"type":"output_text","text":"b"}]}]})")),
            "a|b");
  EXPECT_EQ(extract_prompt_text(
                nlohmann::json::parse(R"({"model":"m","query":"q|","documents":["d1|","d2",3]})")),
            "q|d1|d2");
  EXPECT_EQ(requested_max_tokens(nlohmann::json::parse(R"({"max_output_tokens":7})")), 7u);
}

}  // namespace
}  // namespace fg::sim
