#include "orchestrator/scheduling/routing_options.hpp"

#include <algorithm>
#include <charconv>

#include "orchestrator/config/config.hpp"

namespace fg::scheduling {

std::optional<RoutingPolicy> parse_policy(std::string_view name) {
  if (name == "least_loaded") {
    return RoutingPolicy::least_loaded;
  }
  if (name == "expected_finish") {
    return RoutingPolicy::expected_finish;
  }
  return std::nullopt;
}

const char* to_string(RoutingPolicy policy) {
  switch (policy) {
    case RoutingPolicy::least_loaded:
      return "least_loaded";
    case RoutingPolicy::expected_finish:
      return "expected_finish";
  }
  return "least_loaded";
}

RoutingOptions routing_options(const config::RoutingConfig& routing,
                               const std::vector<config::ApiKeyConfig>& api_keys) {
  using std::chrono::duration_cast;
  using std::chrono::seconds;
  RoutingOptions o;
  o.policy = parse_policy(routing.policy).value_or(RoutingPolicy::expected_finish);
  o.default_prefill_tps = routing.default_prefill_tps;
  o.default_decode_tps = routing.default_decode_tps;
  o.speed_smoothing = routing.speed_smoothing;
  o.min_prefill_sample_tokens = routing.min_prefill_sample_tokens;
  o.min_decode_sample_tokens = routing.min_decode_sample_tokens;
  o.exploration = routing.exploration;
  o.default_tokens_per_byte = routing.default_tokens_per_byte;
  o.default_answer_tokens = routing.default_answer_tokens;
  o.cache_budget_bytes = routing.cache_budget_bytes;
  o.slot_prompt_similarity = routing.slot_prompt_similarity;
  o.hold_margin = routing.hold_margin;
  o.hold_min_gain = routing.hold_min_gain;
  o.max_overtakes = routing.max_overtakes;
  o.affinity_yield = routing.affinity_yield;
  o.scan_window = routing.scan_window;
  o.reserve_margin = routing.reserve_margin;
  o.reserve_prompts = routing.reserve_prompts;
  o.reserve_window = routing.reserve_window;
  o.default_priority = routing.default_priority;
  o.band_queue_max = routing.band_queue_max;
  o.fair_share_slack_tokens = routing.fair_share_slack_tokens;
  // Retry-After is whole seconds: round the bounds up, at least 1 s.
  auto whole_seconds = [](std::chrono::milliseconds d) {
    return std::max(seconds(1), duration_cast<seconds>(d + std::chrono::milliseconds(999)));
  };
  o.shed_retry_after_min = whole_seconds(routing.shed_retry_after_min);
  o.shed_retry_after_max =
      std::max(o.shed_retry_after_min, whole_seconds(routing.shed_retry_after_max));
  for (const auto& key : api_keys) {
    if (key.weight != 1.0) {
      o.tenant_weights[key.name] = key.weight;
    }
  }
  return o;
}

std::optional<std::int32_t> parse_priority(std::string_view header) {
  while (!header.empty() && (header.front() == ' ' || header.front() == '\t')) {
    header.remove_prefix(1);
  }
  while (!header.empty() && (header.back() == ' ' || header.back() == '\t')) {
    header.remove_suffix(1);
  }
  if (!header.empty() && header.front() == '+') {
    header.remove_prefix(1);
    if (!header.empty() && header.front() == '-') {
      return std::nullopt;
    }
  }
  std::int32_t value = 0;
  auto [end, ec] = std::from_chars(header.data(), header.data() + header.size(), value);
  if (header.empty() || ec != std::errc() || end != header.data() + header.size()) {
    return std::nullopt;
  }
  if (value < -1000 || value > 1000) {
    return std::nullopt;
  }
  return value;
}

}  // namespace fg::scheduling
