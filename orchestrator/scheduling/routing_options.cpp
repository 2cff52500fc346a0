#include "orchestrator/scheduling/routing_options.hpp"

#include <charconv>

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
