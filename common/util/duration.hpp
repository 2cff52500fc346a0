#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace fg {

// Parses "250ms", "10s", "5m", "1h" (a non-negative integer and one unit, no spaces). Returns
// nullopt for anything else, including a bare number: an operator must say which unit they mean.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text);

// The shortest exact spelling of a duration in the units above ("1500ms", "10s", "2m").
std::string format_duration(std::chrono::milliseconds d);

}  // namespace fg
