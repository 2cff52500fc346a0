// The simulated fraud-review and mixed-speed workloads (fleet_sim.hpp): deterministic figures in
// virtual time, not timings. They guard the routing's headline behaviour against regressions;
// routing_sim prints the full table.

#include "tests/orchestrator/scheduling/fleet_sim.hpp"

#include <gtest/gtest.h>

namespace fg::scheduling::sim {
namespace {

Config fraud(RoutingPolicy policy) {
  Config c;
  c.phones = fraud_review_fleet();
  c.seconds = 2 * 3600.0;
  c.options.policy = policy;
  return c;
}

TEST(FleetSim, FraudReviewExpectedFinishDoesMoreThanTwiceTheWork) {
  const Result base = run(fraud(RoutingPolicy::least_loaded));
  const Result ef = run(fraud(RoutingPolicy::expected_finish));
  // FIFO onto any free phone reuses the instructions a quarter of the time: 5/7 * 1/4 of the
  // prompt tokens.
  EXPECT_NEAR(base.cache_share, 5.0 / 7 / 4, 0.03);
  EXPECT_EQ(base.max_overtaken, 0u);
  // Perfect affinity would serve 5/7 of the tokens from cache and ~2.8x the reviews per hour.
  EXPECT_GT(ef.per_hour, 2.2 * base.per_hour) << ef.per_hour << " vs " << base.per_hour;
  EXPECT_GT(ef.cache_share, 0.6);
  EXPECT_LT(ef.p95_latency, base.p95_latency);
  // The gateway's belief about the phones' caches matches what they report.
  EXPECT_NEAR(ef.prediction_ratio, 1.0, 0.02);
  EXPECT_LE(ef.max_overtaken, RoutingOptions{}.max_overtakes);
  EXPECT_LE(ef.cache_bytes, RoutingOptions{}.cache_budget_bytes);
}

TEST(FleetSim, TinyCacheBudgetStillRoutes) {
  Config c = fraud(RoutingPolicy::expected_finish);
  c.seconds = 3600;
  // Room for about four prompts in all: the model forgets, routing stays correct.
  c.options.cache_budget_bytes = 8 * 1024;
  const Result r = run(c);
  EXPECT_LE(r.cache_bytes, c.options.cache_budget_bytes);
  EXPECT_GT(r.completed, 0u);
}

// The reserve for higher bands records nothing without a higher band's traffic: the fraud
// review is the same, review for review, with it off.
TEST(FleetSim, ReserveCostsNothingWithoutAHigherBand) {
  Config c = fraud(RoutingPolicy::expected_finish);
  c.seconds = 3600;
  const Result on = run(c);
  c.options.reserve_prompts = 0;
  const Result off = run(c);
  EXPECT_EQ(on.completed, off.completed);
  EXPECT_EQ(on.mean_latency, off.mean_latency);
  EXPECT_EQ(on.cache_share, off.cache_share);
}

// Two tenants (routing_sim's run): interactive reviews (Poisson, one a minute, priority 10) alone
// on the warm fleet, then beside 48 batch clients. With the reserve the interactive p95 beside the
// batch stays within the 1.5x of its idle p95, and the batch keeps 90% of its throughput.
TEST(FleetSim, ReserveKeepsTheInteractiveBandNearItsIdleLatency) {
  Config idle = fraud(RoutingPolicy::expected_finish);
  idle.seconds = 4 * 3600.0;
  idle.workload.clients_until = idle.warmup_seconds;
  idle.warmup_seconds += 600;
  idle.workload.interactive_rate = 1.0 / 60;
  Config busy = fraud(RoutingPolicy::expected_finish);
  busy.seconds = 4 * 3600.0;
  busy.workload.clients = 48;
  busy.workload.interactive_rate = 1.0 / 60;
  const Result alone = run(idle);
  const Result with = run(busy);
  busy.options.reserve_prompts = 0;
  const Result without = run(busy);
  ASSERT_GT(with.interactive_completed, 100u);
  EXPECT_LE(with.interactive_p95, 1.5 * alone.interactive_p95)
      << with.interactive_p95 << " vs idle " << alone.interactive_p95;
  EXPECT_LT(with.interactive_p95, without.interactive_p95);
  EXPECT_LT(with.profile.interactive_mean_wait, without.profile.interactive_mean_wait);
  EXPECT_GT(with.per_hour, 0.9 * without.per_hour) << with.per_hour << " vs " << without.per_hour;
}

TEST(FleetSim, MixedSpeedsExpectedFinishHalvesMeanLatency) {
  Config c;
  c.phones = std::vector<Phone>(8);
  for (std::size_t i = 4; i < c.phones.size(); ++i) {
    c.phones[i].prefill_tps /= 10;
    c.phones[i].decode_tps /= 10;
  }
  c.workload.prefixes = 0;
  c.workload.answer_tokens = 16;
  double capacity = 0;
  for (const Phone& p : c.phones) {
    capacity += 1.0 / (c.workload.case_tokens / p.prefill_tps + 16 / p.decode_tps);
  }
  c.workload.arrival_rate = 0.5 * capacity;
  c.seconds = 2 * 3600.0;
  c.options.policy = RoutingPolicy::least_loaded;
  const Result base = run(c);
  c.options.policy = RoutingPolicy::expected_finish;
  const Result ef = run(c);
  EXPECT_LT(ef.mean_latency, 0.5 * base.mean_latency)
      << ef.mean_latency << " vs " << base.mean_latency;
  EXPECT_LT(ef.p95_latency, base.p95_latency);
}

}  // namespace
}  // namespace fg::scheduling::sim
