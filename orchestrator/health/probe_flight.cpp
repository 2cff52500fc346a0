#include "orchestrator/health/probe_flight.hpp"

#include <algorithm>

namespace fg::health {

std::optional<ProbeFlight::TimePoint> ProbeFlight::next_look(TimePoint now) const {
  if (now >= deadline()) {
    return std::nullopt;
  }
  return std::min(now + look_after, deadline());
}

ProbeFlight::Duration ProbeFlight::answer_took(std::optional<std::int64_t> arrived_unix_ns,
                                               TimePoint now) const {
  const Duration until_now = std::max(now - sent, Duration::zero());
  if (!arrived_unix_ns) {
    return until_now;
  }
  const auto took = std::chrono::duration_cast<Duration>(
      std::chrono::nanoseconds(*arrived_unix_ns - sent_unix_ns));
  if (took < Duration::zero() || took > until_now) {
    return until_now;
  }
  return took;
}

}  // namespace fg::health
