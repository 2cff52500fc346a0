#include "common/util/duration.hpp"

#include <cstdint>
#include <limits>

namespace fg {

namespace {

struct Unit {
  std::string_view suffix;
  std::int64_t ms;
};

// Largest first: format_duration picks the biggest unit that divides exactly.
constexpr Unit kUnits[] = {{"h", 3'600'000}, {"m", 60'000}, {"s", 1'000}, {"ms", 1}};

}  // namespace

std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') {
    ++digits;
  }
  if (digits == 0) {
    return std::nullopt;
  }
  const std::string_view suffix = text.substr(digits);
  for (const Unit& unit : kUnits) {
    if (suffix != unit.suffix) {
      continue;
    }
    // Accumulate in milliseconds with overflow checks: a typo with many digits must fail, not wrap.
    constexpr std::int64_t kMax = std::numeric_limits<std::chrono::milliseconds::rep>::max();
    std::int64_t value = 0;
    for (std::size_t i = 0; i < digits; ++i) {
      const int digit = text[i] - '0';
      if (value > (kMax - digit) / 10) {
        return std::nullopt;
      }
      value = value * 10 + digit;
    }
    if (value > kMax / unit.ms) {
      return std::nullopt;
    }
    return std::chrono::milliseconds(value * unit.ms);
  }
  return std::nullopt;
}

std::string format_duration(std::chrono::milliseconds d) {
  const std::int64_t ms = d.count();
  if (ms == 0) {
    return "0s";
  }
  for (const Unit& unit : kUnits) {
    if (ms % unit.ms == 0) {
      // Negative values keep their sign; parse_duration rejects them, but logs should not lie.
      return std::to_string(ms / unit.ms) + std::string(unit.suffix);
    }
  }
  return std::to_string(ms) + "ms";  // unreachable: every value is a whole number of ms
}

}  // namespace fg
