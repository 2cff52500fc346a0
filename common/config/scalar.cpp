#include "common/config/scalar.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/util/duration.hpp"
#include "common/util/text.hpp"

namespace fg::yaml {

namespace {

constexpr std::size_t kQuotedMax = 100;

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

std::optional<double> to_number(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [stop, ec] = std::from_chars(text.data(), end, value);
  // from_chars also reads "inf" and "nan"; a configuration value is a finite number.
  if (text.empty() || ec != std::errc() || stop != end || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// "1.5s" as the whole number of milliseconds it means, for the hint; nullopt when it is not a
// fraction of a unit or not a whole number of milliseconds.
std::optional<std::chrono::milliseconds> fractional_duration(std::string_view text) {
  const std::size_t unit = text.find_first_not_of("0123456789.");
  if (unit == 0 || unit == std::string_view::npos) {
    return std::nullopt;
  }
  const auto amount = to_number(text.substr(0, unit));
  std::string one_unit = "1";
  one_unit.append(text.substr(unit));
  const auto one = parse_duration(one_unit);
  if (!amount || !one) {
    return std::nullopt;
  }
  const double ms = *amount * static_cast<double>(one->count());
  if (ms != std::floor(ms) || ms > 1e15) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms));
}

std::string number_text(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Whether max is a type's own limit rather than a bound the key states.
bool unbounded(std::uint64_t max) {
  return max == std::numeric_limits<std::uint64_t>::max() ||
         max == std::numeric_limits<std::uint32_t>::max();
}

}  // namespace

std::string quote(std::string_view text) {
  std::string out = "\"";
  const std::size_t shown = std::min(text.size(), kQuotedMax);
  for (std::size_t i = 0; i < shown; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "\\x%02x", c);
      out += hex;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += "\"";
  if (shown < text.size()) {
    out += " (" + std::to_string(text.size()) + " characters)";
  }
  return out;
}

std::string duration_example(std::chrono::milliseconds d) {
  return d.count() % 1000 == 0 ? std::to_string(d.count() / 1000) + "s" : format_duration(d);
}

Scalar::Scalar(std::string where, std::string text)
    : where_(std::move(where)), text_(std::move(text)) {}

Scalar::Scalar(std::string where, std::optional<std::string> text, std::string shape)
    : where_(std::move(where)), text_(std::move(text)), shape_(std::move(shape)) {}

void Scalar::fail(const std::string& what) const {
  throw Error(where_ + ": " + what);
}

const std::string& Scalar::text(std::string_view expected) const {
  if (!text_) {
    fail("expected " + std::string(expected) + ", got " + shape_);
  }
  return *text_;
}

std::string Scalar::string() const {
  if (!text_ && shape_ == "nothing") {
    return "";
  }
  return text("a string");
}

std::uint64_t Scalar::whole(std::uint64_t min, std::uint64_t max) const {
  const std::string& t = text("a whole number");
  const bool negative = !t.empty() && t[0] == '-';
  const std::string_view digits = std::string_view(t).substr(negative ? 1 : 0);
  if (!all_digits(digits)) {
    fail("expected a whole number, got " + quote(t));
  }
  if (negative) {
    fail("must not be negative, got " + t);
  }
  const bool bounded = !unbounded(max);
  const std::string between =
      "must be between " + std::to_string(min) + " and " + std::to_string(max) + ", got " + t;
  std::uint64_t v = 0;
  for (char c : digits) {
    const auto d = static_cast<std::uint64_t>(c - '0');
    // v * 10 + d > max, without overflowing.
    if (v > max / 10 || d > max - v * 10) {
      fail(bounded ? between : "must be at most " + std::to_string(max) + ", got " + t);
    }
    v = v * 10 + d;
  }
  if (v < min) {
    if (bounded) {
      fail(between);
    }
    fail(min == 1 ? std::string("must be greater than 0")
                  : "must be at least " + std::to_string(min) + ", got " + t);
  }
  return v;
}

std::uint32_t Scalar::whole32(std::uint32_t min, std::uint32_t max) const {
  return static_cast<std::uint32_t>(whole(min, max));
}

double Scalar::number(std::string_view expected) const {
  const std::string& t = text(expected);
  const auto v = to_number(t);
  if (!v) {
    fail("expected " + std::string(expected) + ", got " + quote(t));
  }
  return *v;
}

double Scalar::number_in(double low, double high) const {
  const double v = number();
  if (v < low || v > high) {
    fail("must be between " + number_text(low) + " and " + number_text(high) + ", got " + *text_);
  }
  return v;
}

bool Scalar::boolean() const {
  const std::string& t = text("true or false");
  if (t == "true" || t == "True" || t == "TRUE") {
    return true;
  }
  if (t == "false" || t == "False" || t == "FALSE") {
    return false;
  }
  fail("expected true or false, got " + quote(t));
}

std::chrono::milliseconds Scalar::duration(std::chrono::milliseconds example,
                                           bool allow_zero) const {
  const std::string expected = "a duration such as " + duration_example(example);
  const std::string& t = text(expected);
  const auto parsed = parse_duration(t);
  if (!parsed) {
    std::string what = "expected " + expected + ", got " + quote(t);
    if (to_number(t)) {
      what += " (add a unit: ms, s, m or h)";
    } else if (const auto exact = fractional_duration(t)) {
      what += " (whole numbers only: write " + format_duration(*exact) + ")";
    }
    fail(what);
  }
  if (!allow_zero && parsed->count() == 0) {
    fail("must be greater than 0");
  }
  return *parsed;
}

std::string Scalar::env_name() const {
  std::string name = string();
  if (!name.empty() && !is_env_name(name)) {
    fail(
        "expected an environment variable name (letters, digits, '_'; not starting with a "
        "digit), got " +
        quote(name));
  }
  return name;
}

net::HostPort Scalar::host_port(std::string_view example) const {
  const std::string expected = "host:port such as " + std::string(example);
  const std::string& t = text(expected);
  std::string why;
  const auto parsed = net::parse_host_port(t, &why);
  if (!parsed) {
    fail("expected " + expected + ", got " + quote(t) + (why.empty() ? "" : " (" + why + ")"));
  }
  return *parsed;
}

net::Url Scalar::url(std::string_view example) const {
  const std::string expected = "an http(s) URL such as " + std::string(example);
  const std::string& t = text(expected);
  std::string why;
  const auto parsed = net::parse_url(t, &why);
  if (!parsed) {
    fail("invalid URL " + quote(t) + (why.empty() ? "" : ": " + why) + " (expected " + expected +
         ")");
  }
  return *parsed;
}

std::string Scalar::one_of(const std::vector<std::string>& choices) const {
  std::string list;
  for (const auto& choice : choices) {
    list += (list.empty() ? "" : ", ") + choice;
  }
  const std::string value = text("one of " + list);
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    fail("expected one of " + list + ", got " + quote(value));
  }
  return value;
}

}  // namespace fg::yaml
