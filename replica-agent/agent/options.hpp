#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "common/log/log.hpp"
#include "common/net/url.hpp"

namespace fg::agent {

// Everything the command line sets. Validated by parse_args: a value here is always usable.
struct AgentOptions {
  net::HostPort listen{"127.0.0.1", 8081};
  std::string model;                  // the model id this phone serves (required)
  std::string profile = "fast-test";  // a built-in sim profile name
  std::optional<std::size_t> slots;   // unset: the profile's
  double time_scale = 1.0;
  std::uint64_t seed = 0;
  double jitter = 0.0;
  double fail_rate = 0.0;
  log::Level log_level = log::Level::info;
  std::chrono::milliseconds drain_timeout{30'000};
};

// What main should do instead of serving: print text (to stdout for --help/--version, to stderr
// for errors) and exit with code.
struct CliExit {
  int code = 0;
  std::string text;
};

// Parses argv[1..]. Accepts "--flag value" and "--flag=value". Errors name the flag and the value
// and exit with code 2.
std::variant<AgentOptions, CliExit> parse_args(const std::vector<std::string>& args);

void print_usage(std::ostream& out);

}  // namespace fg::agent
