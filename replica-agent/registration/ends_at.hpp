#pragma once

// The deployment's end time sent with a registration (issue 12): RFC 3339 in, UTC out. Pure.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fg::agent {

// "2026-12-04T18:00:00Z", "2026-12-04T20:00:00.5+02:00", "2026-12-04t18:00:00z" -> Unix seconds
// (fractions dropped); nullopt for anything else (dates and times are range-checked).
std::optional<std::int64_t> parse_rfc3339(std::string_view text);

// Unix seconds -> "2026-12-04T18:00:00Z".
std::string format_rfc3339_utc(std::int64_t unix_seconds);

}  // namespace fg::agent
