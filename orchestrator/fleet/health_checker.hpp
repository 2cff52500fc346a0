#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/health/probe.hpp"
#include "orchestrator/health/probe_schedule.hpp"

namespace fg::fleet {

// The active probes: GET {url}{health.path} on a keep-alive connection per replica, at the times
// the manager's hooks say. One tick loop (one timer) sends every probe that is due, batched by
// health::ProbeSchedule; each probe then runs as a short coroutine of its own. The checker
// decides nothing: each outcome goes to on_outcome. A replica is forgotten when it is removed
// (Registry::remove calls Replica::stop_probe) or at stop().
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
  ~HealthChecker();

  // Starts probing the replica; its first probe goes out at the next tick (at once).
  void watch(std::shared_ptr<Replica> replica);
  // Ends the tick loop; probes in flight finish and report nothing.
  void stop();

 private:
  struct Probed {
    std::shared_ptr<Replica> replica;
    std::unique_ptr<net::Conn> conn;  // kept alive between probes, reset on failure
    bool in_flight = false;
  };

  static boost::asio::awaitable<void> tick_loop(HealthChecker* self);
  static boost::asio::awaitable<void> probe(HealthChecker* self, ReplicaId id);
  void start_due(Clock::time_point now);
  void schedule_next(Probed& probed, Clock::time_point last);
  void forget(ReplicaId id);
  // Wakes the tick loop when a probe is now due before the time it sleeps until.
  void wake_if_before(Clock::time_point due);

  boost::asio::any_io_executor executor_;
  const config::ConfigSource* configs_;
  boost::asio::ssl::context* tls_;
  std::string authorization_;
  Hooks hooks_;
  boost::asio::steady_timer timer_;
  Clock::time_point sleeping_until_ = Clock::time_point::max();
  health::ProbeSchedule schedule_;
  std::unordered_map<ReplicaId, Probed> probed_;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace fg::fleet
