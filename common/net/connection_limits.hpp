#pragma once

// Caps on open client connections, a throttle for the log lines a flood causes, and the file
// descriptor budget the caps must fit in. Pure: no sockets, time passed in.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>

namespace fg::net {

struct ConnectionCaps {
  std::uint32_t total = 10000;
  std::uint32_t per_address = 1000;  // 0 = no per-address cap
};

enum class Admission { admitted, over_total, over_per_address };

// Counts a listener's open connections, in total and per client address, from accept to close.
class ConnectionLimiter {
 public:
  explicit ConnectionLimiter(ConnectionCaps caps) : caps_(caps) {}

  // New caps apply to connections accepted from now on; open ones stay.
  void set_caps(ConnectionCaps caps) { caps_ = caps; }
  const ConnectionCaps& caps() const { return caps_; }

  // Counts the connection when admitted; every admitted one must be released once.
  Admission admit(const std::string& address);
  void release(const std::string& address);

  std::uint32_t open() const { return open_; }
  std::uint32_t open_from(const std::string& address) const;

 private:
  ConnectionCaps caps_;
  std::uint32_t open_ = 0;
  std::unordered_map<std::string, std::uint32_t> by_address_;
};

const char* to_string(Admission admission);

// Lets one log line through per interval and counts the events it held back meanwhile, so that a
// flood is reported (with how many) without flooding the log.
class LogThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogThrottle(Clock::duration interval) : interval_(interval) {}

  // Whether to log this event now; when true, *held_back is the number of events not logged
  // since the last line.
  bool allow(Clock::time_point now, std::uint64_t* held_back);

 private:
  Clock::duration interval_;
  std::optional<Clock::time_point> last_;
  std::uint64_t held_back_ = 0;
};

// File descriptors the process needs: every client connection the caps allow, plus a reserve
// for connections to phones, probes, log and configuration files and child processes.
struct DescriptorBudget {
  std::uint64_t public_connections = 0;  // server.max_connections
  std::uint64_t admin_connections = 0;   // the admin listener's fixed cap
  std::uint64_t reserve = 0;
  std::uint64_t needed() const { return public_connections + admin_connections + reserve; }
};

// nullopt when the budget fits in limit (RLIMIT_NOFILE); otherwise why not, naming
// cap_key (the setting to lower) and the largest value that fits.
std::optional<std::string> check_descriptor_budget(const DescriptorBudget& budget,
                                                   std::uint64_t limit, const char* cap_key);

}  // namespace fg::net
