#pragma once

// A small deterministic simulation of phones behind the Scheduler: virtual time, no threads, no
// sockets. Each phone is a llama.cpp slot with its own truth (what it really holds, its real
// speed with jitter); the scheduler only learns what the answers report, as it will in the
// gateway. Used by fleet_sim_test.cpp and by the routing_sim tool to compare policies and tune
// the defaults before the real benchmark (./fleet bench routing) exists.

#include <cstdint>
#include <vector>

#include "orchestrator/scheduling/routing_options.hpp"

namespace fg::scheduling::sim {

struct Phone {
  double prefill_tps = 72.2;  // the 4B profile's 7,000 tokens in 97 s
  double decode_tps = 18.0;
};

struct Workload {
  // Each request: one of `prefixes` instruction texts (0: none) and a case of its own.
  std::uint32_t prefixes = 4;
  std::uint32_t prefix_tokens = 5000;
  std::uint32_t case_tokens = 2000;
  std::uint32_t answer_tokens = 8;
  // Closed loop: this many clients, each sending its next request when the last one ends.
  std::uint32_t clients = 64;
  // The closed-loop clients stop sending at this simulated time (e.g. only to warm the caches).
  double clients_until = 1e300;
  // Open loop instead, when > 0: Poisson arrivals at this rate (requests per second).
  double arrival_rate = 0;
  // Beside either: an interactive tenant's Poisson arrivals (requests per second) at this
  // priority; its latencies are reported apart (Result::interactive_*).
  double interactive_rate = 0;
  std::int32_t interactive_priority = 10;
};

struct Config {
  RoutingOptions options;
  std::vector<Phone> phones;
  Workload workload;
  double seconds = 4 * 3600.0;  // simulated
  double warmup_seconds = 600;  // excluded from the figures
  double jitter = 0.1;          // phone durations scaled by U[1 - j, 1 + j]
  std::uint64_t seed = 1;
};

struct Result {
  std::uint64_t completed = 0;  // after the warm-up
  double per_hour = 0;
  double mean_latency = 0;  // seconds, from admission to the end of the answer
  double p95_latency = 0;
  double max_latency = 0;
  double cache_share = 0;       // prompt tokens served from the phones' caches
  double prediction_ratio = 0;  // blocks the scheduler expected cached / blocks reported
  std::uint64_t max_overtaken = 0;
  std::uint64_t cache_bytes = 0;  // the scheduler's prompt-cache model at the end
  // The interactive tenant's requests (Workload::interactive_rate), apart from the others.
  std::uint64_t interactive_completed = 0;
  double interactive_mean = 0;
  double interactive_p95 = 0;
  // Where affinity is lost (requests issued after the warm-up, with a prefix): grants whose
  // phone did not hold their prefix, and why.
  struct Profile {
    std::uint64_t grants = 0;
    std::uint64_t hits = 0;         // the phone held the prefix
    std::uint64_t slow_grants = 0;  // to a slow phone (below the fleet's top speed)
    std::uint64_t slow_hits = 0;
    std::uint64_t misses_due = 0;     // missed while due (overtaken max_overtakes times)
    std::uint64_t misses_slow = 0;    // missed on a slow phone
    std::uint64_t misses_unheld = 0;  // no phone held the prefix at all
    std::uint64_t misses_interactive = 0;
    // Time-weighted: share of time some prefix was held by no fast phone, and the mean of the
    // smallest number of fast phones holding one prefix.
    double share_prefix_without_fast = 0;
    double mean_min_fast_per_prefix = 0;
    // Interactive requests: granted to a slow phone, granted without their prefix, and their
    // mean wait before the grant.
    std::uint64_t interactive_slow = 0;
    std::uint64_t interactive_misses = 0;
    double interactive_mean_wait = 0;
  } profile;
};

// 16 one-slot phones, 4 of them 4x slower: the fraud-review fleet.
std::vector<Phone> fraud_review_fleet();

Result run(const Config& config);

}  // namespace fg::scheduling::sim
