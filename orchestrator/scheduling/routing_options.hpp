#pragma once

// Every knob of the scheduler's routing, with its default. Plain data: the YAML layer fills it
// (routing.*, see docs/routing.md) and Scheduler::set_options applies it at once.

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fg::config {
struct RoutingConfig;
struct ApiKeyConfig;
}  // namespace fg::config

namespace fg::scheduling {

enum class RoutingPolicy {
  // Phones are interchangeable slots: the free replica with the lowest in_flight/slots, ties in
  // rotation; the oldest waiter first. The earlier gateway's behaviour, and HAProxy leastconn +
  // maxconn's.
  least_loaded,
  // The replica and waiter with the earliest expected finish (docs/routing.md).
  expected_finish,
};

std::optional<RoutingPolicy> parse_policy(std::string_view name);
const char* to_string(RoutingPolicy policy);

struct RoutingOptions {
  // expected_finish since the routing bench (docs/benchmarks.md) showed it winning all three of
  // issue 13's scenarios; least_loaded stays for comparison and for operators who want
  // HAProxy-like behaviour.
  RoutingPolicy policy = RoutingPolicy::expected_finish;

  // --- Learned speeds
  // Before a phone has reported anything (and its agent no autotune figures). The measured
  // phones of the field report read 36 to 470 prompt tokens/s and decode 9 to 20 tokens/s; a
  // middle guess that the first answer corrects.
  double default_prefill_tps = 50.0;
  double default_decode_tps = 10.0;
  // Weight of a new sample in the moving average of seconds per token (0 < w <= 1).
  double speed_smoothing = 0.2;
  // Fewer uncached prompt tokens than this teach nothing about prefill speed (fixed costs
  // dominate such a sample); likewise fewer generated tokens for decode.
  std::uint32_t min_prefill_sample_tokens = 32;
  std::uint32_t min_decode_sample_tokens = 2;
  // expected_finish: share of grants with a choice of free replicas that go to a random one, so
  // that a phone believed slow (recovered, new, badly seeded) still gets fresh samples.
  double exploration = 0.01;

  // --- Tokens
  // Before a model's phones have reported token counts: ~4 bytes per token (English, BPE).
  double default_tokens_per_byte = 0.25;
  // Expected answer length before any answer was seen (one short line, as in the simulator).
  std::uint32_t default_answer_tokens = 16;

  // --- Prompt-cache model
  // One budget for every phone's slots and host caches together (block hashes), LRU eviction.
  std::uint64_t cache_budget_bytes = 64ull * 1024 * 1024;
  // llama-server's --slot-prompt-similarity (its default in the llama.cpp the project builds):
  // an idle slot is reused by similarity only when more than this share of the new prompt is
  // its cached prefix, otherwise the least recently used idle slot is taken.
  double slot_prompt_similarity = 0.1;

  // --- Dispatch (expected_finish)
  // A free phone stays idle for a waiter only when a busy phone is expected to finish that
  // waiter sooner: busy_time * (1 + hold_margin) + hold_min_gain < free_time. The simulation
  // did best with no relative margin (docs/routing.md); raise it where phones' speeds swing more
  // than the learned estimates follow.
  double hold_margin = 0.0;
  std::chrono::milliseconds hold_min_gain{1000};
  // A waiter lets at most this many later waiters of its own queue (same band and tenant) take a
  // slot it could have used; then it is served first (FIFO) by the next slot it can use. Its
  // extra wait beyond FIFO order is therefore at most this many slot turnovers. 0: strict FIFO.
  // (Simulated fraud review with affinity_yield, 4 seeds, docs/routing.md: 48 -> 2.49x
  // least_loaded's reviews per hour, 64 -> 2.51x, 128 and more -> 2.62x; p95 flat.)
  std::uint32_t max_overtakes = 128;
  // When a slot frees, its cheapest waiter (typically the one whose prefix it holds) lets an
  // older waiter of its queue have it instead when that older one has no busy replica to wait
  // for that would beat this slot, while the cheapest one has a busy replica expected to finish
  // it before the older one would finish here. This moves phones to a prefix that lost its fast
  // phones at once rather than when its waiters become due (docs/routing.md).
  bool affinity_yield = true;
  // How many waiters at the head of each tenant's queue are compared when a slot frees.
  std::uint32_t scan_window = 64;

  // --- Reserve for higher bands (expected_finish)
  // A request may not take the last free replica that would finish a recent prompt of a higher
  // band within (1 + reserve_margin) x that prompt's finish on an idle fleet, unless a busy
  // replica will do so. The prompts: the last reserve_prompts distinct ones (by their first
  // block; the part two of them shared is what is expected to recur) of bands above the lowest
  // band the model has served; recent: seen within reserve_window. At most half the model's
  // replicas are kept so. A fleet with one band records nothing; reserve_prompts 0 turns it off
  // (docs/routing.md). Simulated (routing_sim --seeds 16): margin 0.25 -> interactive p95
  // beside a batch 1.24x its idle p95 for 13% of the batch's throughput, 0.5 -> 1.35x for 3.2%,
  // none -> 2.19x.
  double reserve_margin = 0.5;
  std::uint32_t reserve_prompts = 8;
  std::chrono::milliseconds reserve_window{600'000};

  // --- Priorities and fair shares
  // Band of a request that names no priority. Bands are strict: a free slot goes to the highest
  // band with a waiter that can use it.
  std::int32_t default_priority = 0;
  // Queue limit of a band (absent: only the model's queue_max applies).
  std::map<std::int32_t, std::uint32_t> band_queue_max;
  // Within a band, tenants are served in order of tokens received / weight; a tenant more than
  // this many weighted tokens ahead of the least served one waits for the others.
  double fair_share_slack_tokens = 16384.0;
  std::map<std::string, double> tenant_weights;  // absent: 1
  // Retry-After of a shed request: the expected time until a slot frees, within these bounds.
  std::chrono::seconds shed_retry_after_min{1};
  std::chrono::seconds shed_retry_after_max{60};
};

// routing.* of the YAML, and each named API key's weight (tenant_weights), validated there.
RoutingOptions routing_options(const config::RoutingConfig& routing,
                               const std::vector<config::ApiKeyConfig>& api_keys);

// A client's priority header (x-fleetgate-priority): an integer in [-1000, 1000], surrounding
// spaces allowed; nullopt for anything else (the caller answers 400 naming the header).
std::optional<std::int32_t> parse_priority(std::string_view header);

// A client's negative priority is sheddable: refused with 503 + Retry-After when the fleet is
// saturated instead of queued. (The batch runner queues its low band without being sheddable.)
inline bool sheddable_priority(std::int32_t priority) {
  return priority < 0;
}

}  // namespace fg::scheduling
