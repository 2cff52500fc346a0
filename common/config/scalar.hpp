#pragma once

// The value rules of both binaries' configuration: how a whole number, a number, a boolean, a
// duration, an environment variable name, host:port, a URL or a string is read from text, and what
// the message says when it cannot be. YAML values (common/config/yaml_reader.hpp) and the agent's
// command-line flags are read through the same rules, so a rule and its message exist once.
// Pure: no YAML library, no I/O. docs/configuration.md ("Value types") describes the rules.

#include <chrono>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "common/net/url.hpp"

namespace fg::yaml {

// A configuration problem at a known place: what() is "<where>: <what is wrong>", where being
// "file:line: key.path" for a YAML value or the flag ("--slots") for a command-line value. Each
// binary turns it into its own error type at its API boundary.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A value for a message: quoted, control characters escaped, at most 100 characters of it.
std::string quote(std::string_view text);

// One value to read and where it came from.
class Scalar {
 public:
  // A command-line flag's value (always text); where is the flag.
  Scalar(std::string where, std::string text);
  // A YAML value: text is nullopt when the key has no value or its value is a map or a list, and
  // shape then says which ("nothing", "a map", "a list") for messages.
  Scalar(std::string where, std::optional<std::string> text, std::string shape);

  const std::string& where() const { return where_; }
  bool has_text() const { return text_.has_value(); }
  [[noreturn]] void fail(const std::string& what) const;

  // The text, or fails with "expected <expected>, got <shape>".
  const std::string& text(std::string_view expected) const;

  // Any text; no value is "" (a map or a list is refused).
  std::string string() const;
  // Digits only (no sign, decimals, exponent or '_'), within [min, max].
  std::uint64_t whole(std::uint64_t min = 0,
                      std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) const;
  std::uint32_t whole32(std::uint32_t min = 0,
                        std::uint32_t max = std::numeric_limits<std::uint32_t>::max()) const;
  // A finite decimal number: optional '-', digits, optional fraction and exponent (2, 0.05, 1e3);
  // no '+', hex, inf or nan. expected completes "expected ..., got" for a value that is not one.
  double number(std::string_view expected = "a number") const;
  double number_in(double low, double high) const;
  // true or false (also True/TRUE, False/FALSE); not yes/no/on/off.
  bool boolean() const;
  // A whole number and one unit: "250ms", "30s", "5m", "1h". example is the key's default, the
  // "such as" of the message.
  std::chrono::milliseconds duration(std::chrono::milliseconds example, bool allow_zero) const;
  // "" or [A-Za-z_][A-Za-z0-9_]*.
  std::string env_name() const;
  // host:port, port 0 allowed ("127.0.0.1:8080", "[::1]:9090").
  net::HostPort host_port(std::string_view example) const;
  // An http(s) URL as net::parse_url takes it.
  net::Url url(std::string_view example) const;
  // One of choices, exactly.
  std::string one_of(const std::vector<std::string>& choices) const;

 private:
  std::string where_;
  std::optional<std::string> text_;
  std::string shape_;
};

// How a duration is spelled in messages and docs: whole seconds as "600s", else the shortest
// exact form ("1500ms").
std::string duration_example(std::chrono::milliseconds d);

}  // namespace fg::yaml
