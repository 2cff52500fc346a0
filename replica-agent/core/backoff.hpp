#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>

namespace fg::agent {

// Wait before attempt `failures` + 1 while the gateway is unreachable: 1 s doubling up to 30 s,
// with "equal jitter" so that a fleet of phones that lost the gateway together does not come
// back in lockstep: half the step plus a random part of the other half. `unit` is a draw in
// [0, 1). Pure.
inline std::chrono::milliseconds backoff_delay(std::uint32_t failures, double unit) {
  constexpr std::int64_t kFirstMs = 1000;
  constexpr std::int64_t kMaxMs = 30000;
  const std::int64_t step = std::min<std::int64_t>(kMaxMs, kFirstMs << std::min(failures, 5u));
  const double u = std::clamp(unit, 0.0, 1.0);
  return std::chrono::milliseconds(step / 2 + static_cast<std::int64_t>(u * (step / 2)));
}

}  // namespace fg::agent
