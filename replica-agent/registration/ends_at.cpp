#include "replica-agent/registration/ends_at.hpp"

#include <cstdio>

namespace fg::agent {

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
std::int64_t days_from_civil(std::int64_t y, unsigned m, unsigned d) {
  y -= m <= 2 ? 1 : 0;
  const std::int64_t era = (y >= 0 ? y : y - 399) / 400;
  const auto yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<std::int64_t>(doe) - 719468;
}

bool digits(std::string_view s, std::size_t at, std::size_t n, int* out) {
  if (at + n > s.size()) {
    return false;
  }
  int v = 0;
  for (std::size_t i = at; i < at + n; ++i) {
    if (s[i] < '0' || s[i] > '9') {
      return false;
    }
    v = v * 10 + (s[i] - '0');
  }
  *out = v;
  return true;
}

bool leap(int y) {
  return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

}  // namespace

std::optional<std::int64_t> parse_rfc3339(std::string_view s) {
  int year, month, day, hour, minute, second;
  if (!digits(s, 0, 4, &year) || s.size() < 20 || s[4] != '-' || !digits(s, 5, 2, &month) ||
      s[7] != '-' || !digits(s, 8, 2, &day) || (s[10] != 'T' && s[10] != 't') ||
      !digits(s, 11, 2, &hour) || s[13] != ':' || !digits(s, 14, 2, &minute) || s[16] != ':' ||
      !digits(s, 17, 2, &second)) {
    return std::nullopt;
  }
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (month < 1 || month > 12 || day < 1 ||
      day > kDays[month - 1] + (month == 2 && leap(year) ? 1 : 0) || hour > 23 || minute > 59 ||
      second > 60) {
    return std::nullopt;
  }
  std::size_t at = 19;
  if (s[at] == '.') {
    ++at;
    const std::size_t first = at;
    while (at < s.size() && s[at] >= '0' && s[at] <= '9') {
      ++at;
    }
    if (at == first) {
      return std::nullopt;
    }
  }
  std::int64_t offset = 0;
  if (at < s.size() && (s[at] == 'Z' || s[at] == 'z') && at + 1 == s.size()) {
    offset = 0;
  } else if (at < s.size() && (s[at] == '+' || s[at] == '-') && at + 6 == s.size()) {
    int oh, om;
    if (!digits(s, at + 1, 2, &oh) || s[at + 3] != ':' || !digits(s, at + 4, 2, &om) || oh > 23 ||
        om > 59) {
      return std::nullopt;
    }
    offset = (oh * 3600 + om * 60) * (s[at] == '+' ? 1 : -1);
  } else {
    return std::nullopt;
  }
  const std::int64_t days =
      days_from_civil(year, static_cast<unsigned>(month), static_cast<unsigned>(day));
  return days * 86400 + hour * 3600 + minute * 60 + second - offset;
}

std::string format_rfc3339_utc(std::int64_t t) {
  std::int64_t days = t >= 0 ? t / 86400 : (t - 86399) / 86400;
  std::int64_t rest = t - days * 86400;
  // civil_from_days
  days += 719468;
  const std::int64_t era = (days >= 0 ? days : days - 146096) / 146097;
  const auto doe = static_cast<unsigned>(days - era * 146097);
  const unsigned yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const unsigned doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const unsigned mp = (5 * doy + 2) / 153;
  const unsigned d = doy - (153 * mp + 2) / 5 + 1;
  const unsigned m = mp < 10 ? mp + 3 : mp - 9;
  const std::int64_t y = static_cast<std::int64_t>(yoe) + era * 400 + (m <= 2 ? 1 : 0);
  const auto seconds_of_day = static_cast<unsigned>(rest);  // 0..86399
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%04lld-%02u-%02uT%02u:%02u:%02uZ",
                static_cast<long long>(y), m, d, seconds_of_day / 3600, seconds_of_day / 60 % 60,
                seconds_of_day % 60);
  return buffer;
}

}  // namespace fg::agent
