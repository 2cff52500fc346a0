#pragma once

// Capacity that expires (issue 12, item 6): an Acurast deployment ends, and its phones stop at the
// end of its execution window. An agent registers its deployment id and end time; the gateway
// counts, per model, the healthy replicas that end within the next hour, so an operator (and the
// ReplicasEndingSoon alert) sees the fleet will be short before it is. Pure: time is passed in.

#include <chrono>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fg::fleet {

using SystemTime = std::chrono::system_clock::time_point;

// The window the ending counts look ahead.
inline constexpr std::chrono::hours kEndingHorizon{1};
// Deployment ids longer than this are refused (Acurast's are short numbers).
inline constexpr std::size_t kMaxDeploymentId = 128;

// Parses an RFC 3339 date-time ("2026-12-04T18:00:00Z", "2026-12-04T18:00:00.250+01:00"): a
// 'T' or 't' or ' ' between date and time, optional fractional seconds (kept to the
// millisecond), 'Z' or a numeric offset. nullopt for anything else (including an invalid date
// such as February 30 or a leap second, which the system clock cannot hold).
std::optional<SystemTime> parse_rfc3339(std::string_view text);

// "2026-12-04T18:00:00Z" (UTC, whole seconds; sub-second parts are dropped).
std::string format_rfc3339(SystemTime t);

// One replica as the ending count sees it.
struct EndingFacts {
  bool healthy = false;
  std::optional<SystemTime> ends_at;
};

// Healthy replicas whose deployment ends before now + horizon (ended ones included: a phone past
// its end may still answer for a moment, and will not for long).
std::size_t count_ending(const std::vector<EndingFacts>& replicas, SystemTime now,
                         std::chrono::system_clock::duration horizon = kEndingHorizon);

// Whether the model will be short of its desired count once those replicas end.
inline bool short_after_endings(std::size_t healthy, std::size_t ending, std::size_t desired) {
  return healthy - std::min(healthy, ending) < desired;
}

}  // namespace fg::fleet
