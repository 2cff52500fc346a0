#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>

#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/health/probe.hpp"

namespace fg::fleet {

// The active probe loops: one per replica, GET {url}{health.path} on a keep-alive connection of
// its own, at the times the manager's hooks say. The loops decide nothing: each outcome goes to
// on_outcome. A loop ends when its replica is removed (Registry::remove wakes it) or stop().
class HealthChecker {
 public:
  struct Hooks {
    // When the next probe is due, given when the last one ended.
    std::function<Clock::time_point(const Replica&, Clock::time_point last)> next_probe_at;
    // Whether to skip probing for now (draining: an operator's decision, not the probes').
    std::function<bool(const Replica&)> paused;
    std::function<void(Replica&, const health::ProbeOutcome&)> on_outcome;
  };

  HealthChecker(boost::asio::any_io_executor executor, const config::ConfigSource* configs,
                boost::asio::ssl::context* tls, std::string authorization, Hooks hooks);

  // Starts the replica's loop; its first probe goes out at once.
  void watch(std::shared_ptr<Replica> replica);
  // Ends every loop (each at its next wake-up; Replica::stop_probe wakes one at once).
  void stop() { stopped_ = true; }

 private:
  static boost::asio::awaitable<void> loop(HealthChecker* self, std::shared_ptr<Replica> replica);
  bool done(const Replica& replica) const { return stopped_ || replica.removed; }

  boost::asio::any_io_executor executor_;
  const config::ConfigSource* configs_;
  boost::asio::ssl::context* tls_;
  std::string authorization_;
  Hooks hooks_;
  bool stopped_ = false;
};

}  // namespace fg::fleet
