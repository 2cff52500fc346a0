#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/unordered/unordered_flat_map.hpp>

#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/health/probe.hpp"
#include "orchestrator/health/probe_flight.hpp"
#include "orchestrator/health/probe_schedule.hpp"
#include "orchestrator/health/probe_socket.hpp"

namespace fg::fleet {

// The active probes: GET {url}{health.path} on a keep-alive connection per replica, at the times
// the manager's hooks say. One tick loop (one timer) does all the work at its wake-ups, in this
// order: read the answers that arrived (sockets outside the event loop, so answers wake nobody;
// health::ProbePoller; https ones through their OpenSSL connection), fail the probes whose
// deadline passed, send every probe due (batched by health::ProbeSchedule). One schedule holds
// every replica's next moment: its next probe, or while a probe is in flight the next look for
// its answer (health::ProbeFlight). A coroutine runs only to connect (and for https, to
// handshake). The checker decides nothing: each outcome goes to on_outcome. A replica
// is forgotten when it is removed (Registry::remove calls Replica::stop_probe) or at stop().
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
  // Ends the tick loop; probes in flight report nothing.
  void stop();

 private:
  struct Probed {
    std::shared_ptr<Replica> replica;
    health::ProbeSchedule::Slot slot = 0;  // its place in schedule_
    health::ProbeSocket socket;            // kept alive, read at the checker's wake-ups
    std::string request;                   // the probe's bytes, built for request_path
    std::string request_path;
    std::optional<health::ProbeFlight> flight;  // sent on socket, answer not read yet
    std::string partial;              // an answer's first bytes, when it arrives in pieces
    health::ProbeBodyMemo body_memo;  // the last body and what it said
    bool busy = false;                // its connect's coroutine has it
  };

  static boost::asio::awaitable<void> tick_loop(HealthChecker* self);
  static boost::asio::awaitable<void> connect_and_send(HealthChecker* self, ReplicaId id);
  void on_wake(Clock::time_point now);
  void read_answers(Clock::time_point now);
  void read_answer(ReplicaId id, Probed& probed, Clock::time_point now);
  void on_due(ReplicaId id, Clock::time_point now);
  // Sends the probe on its connected socket; started (and started_unix_ns, the same moment on the
  // wall clock) is when the probe began, its connect included; now is the wake-up's time.
  void send(ReplicaId id, Probed& probed, Clock::time_point started, std::int64_t started_unix_ns,
            Clock::time_point now);
  // Ends the probe in flight (if any) with outcome; the connection is closed unless keep.
  void finish(ReplicaId id, health::ProbeOutcome outcome, Clock::time_point last, bool keep);
  const config::HealthConfig& health_of(const Replica& replica) const;
  void schedule_next(Probed& probed, Clock::time_point last);
  void forget(ReplicaId id);
  // Wakes the tick loop when something is now due before the time it sleeps until.
  void wake_if_before(Clock::time_point due);

  boost::asio::any_io_executor executor_;
  const config::ConfigSource* configs_;
  boost::asio::ssl::context* tls_;
  std::string authorization_;
  Hooks hooks_;
  boost::asio::steady_timer timer_;
  Clock::time_point sleeping_until_ = Clock::time_point::max();
  health::ProbeSchedule schedule_;
  health::ProbePoller poller_;
  // Open addressing, as the health tracker's map (4% of the https probing CPU was this map's
  // find with std::unordered_map). Entries move when it grows (watch()): a Probed& is never held
  // past a call that may reach watch(), and each step of a probe looks its replica up anew.
  boost::unordered_flat_map<ReplicaId, Probed> probed_;
  // The configuration in force during one wake-up (read once per wake-up, not per probe).
  std::shared_ptr<const config::Config> config_;
  // One read buffer for every answer, and one body (answers are read one at a time).
  std::vector<char> read_buffer_ = std::vector<char>(16 * 1024);
  std::string body_;
  bool started_ = false;
  bool stopped_ = false;
};

}  // namespace fg::fleet
