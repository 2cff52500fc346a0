// routing_sim: the fleet simulation of fleet_sim.hpp as a table, to compare least_loaded with
// expected_finish and to tune the defaults (docs/routing.md quotes its output). Pure arithmetic
// in virtual time: the figures are the same on every run and machine.

#include <cstdio>
#include <string>

#include "tests/orchestrator/scheduling/fleet_sim.hpp"

namespace {

using fg::scheduling::RoutingOptions;
using fg::scheduling::RoutingPolicy;
namespace sim = fg::scheduling::sim;

void row(const std::string& name, const sim::Result& r, double baseline) {
  std::printf("%-34s %9.0f %6.2fx %8.1f %8.1f %8.1f %6.1f%% %6.2f %5llu\n", name.c_str(),
              r.per_hour, baseline > 0 ? r.per_hour / baseline : 1.0, r.mean_latency, r.p95_latency,
              r.max_latency, 100 * r.cache_share, r.prediction_ratio,
              static_cast<unsigned long long>(r.max_overtaken));
}

void header(const char* title) {
  std::printf("\n%s\n%-34s %9s %7s %8s %8s %8s %7s %6s %5s\n", title, "policy", "per hour", "ratio",
              "mean s", "p95 s", "max s", "cached", "pred", "overt");
}

RoutingOptions with(RoutingPolicy policy) {
  RoutingOptions o;
  o.policy = policy;
  return o;
}

}  // namespace

int main() {
  sim::Config fraud;
  fraud.phones = sim::fraud_review_fleet();
  header(
      "Fraud review: K=4 prefixes of 5,000 tokens + 2,000-token case, 8-token answer, "
      "16 one-slot phones (4 at 1/4 speed), 64 closed-loop clients, 4 simulated hours");
  fraud.options = with(RoutingPolicy::least_loaded);
  const sim::Result base = sim::run(fraud);
  row("least_loaded (HAProxy leastconn)", base, base.per_hour);
  fraud.options = with(RoutingPolicy::expected_finish);
  row("expected_finish (defaults)", sim::run(fraud), base.per_hour);
  for (unsigned overtakes : {0u, 4u, 8u, 32u, 64u, 256u}) {
    fraud.options = with(RoutingPolicy::expected_finish);
    fraud.options.max_overtakes = overtakes;
    row("  max_overtakes " + std::to_string(overtakes), sim::run(fraud), base.per_hour);
  }
  for (unsigned window : {4u, 16u}) {
    fraud.options = with(RoutingPolicy::expected_finish);
    fraud.options.scan_window = window;
    row("  scan_window " + std::to_string(window), sim::run(fraud), base.per_hour);
  }
  for (double margin : {0.0, 1.0}) {
    fraud.options = with(RoutingPolicy::expected_finish);
    fraud.options.hold_margin = margin;
    row("  hold_margin " + std::to_string(margin).substr(0, 4), sim::run(fraud), base.per_hour);
  }
  fraud.options = with(RoutingPolicy::expected_finish);
  fraud.options.exploration = 0;
  row("  exploration 0", sim::run(fraud), base.per_hour);

  // The second benchmark: phones 10x apart, open-loop Poisson arrivals at half the
  // fleet's capacity, every prompt its own (no cache to find).
  sim::Config mixed;
  mixed.phones = std::vector<sim::Phone>(8);
  for (std::size_t i = 4; i < mixed.phones.size(); ++i) {
    mixed.phones[i].prefill_tps /= 10;
    mixed.phones[i].decode_tps /= 10;
  }
  mixed.workload.prefixes = 0;
  mixed.workload.answer_tokens = 16;
  double capacity = 0;
  for (const sim::Phone& p : mixed.phones) {
    capacity += 1.0 / (mixed.workload.case_tokens / p.prefill_tps +
                       mixed.workload.answer_tokens / p.decode_tps);
  }
  mixed.workload.arrival_rate = 0.5 * capacity;
  header(
      "Mixed speeds: 4 phones + 4 at 1/10 speed, 2,000-token prompts, Poisson arrivals at "
      "50% of capacity, 4 simulated hours");
  mixed.options = with(RoutingPolicy::least_loaded);
  const sim::Result mixed_base = sim::run(mixed);
  row("least_loaded (HAProxy leastconn)", mixed_base, mixed_base.per_hour);
  mixed.options = with(RoutingPolicy::expected_finish);
  row("expected_finish (defaults)", sim::run(mixed), mixed_base.per_hour);
  for (double margin : {0.0, 1.0}) {
    mixed.options = with(RoutingPolicy::expected_finish);
    mixed.options.hold_margin = margin;
    row("  hold_margin " + std::to_string(margin).substr(0, 4), sim::run(mixed),
        mixed_base.per_hour);
  }
  return 0;
}
