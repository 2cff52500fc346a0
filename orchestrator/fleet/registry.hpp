#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/net/conn.hpp"
#include "common/net/url.hpp"
#include "orchestrator/fleet/registrations.hpp"
#include "orchestrator/health/probe_body.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace prometheus {
class Histogram;
}

namespace fg::fleet {

using scheduling::ReplicaId;
using Clock = std::chrono::steady_clock;

// An idle keep-alive connection to a replica, kept for reuse.
struct IdleConn {
  std::unique_ptr<net::Conn> conn;
  Clock::time_point since;
};

// One phone. Slot accounting is not here (the scheduler owns in-flight counts) and neither is
// its health state (the HealthTracker owns it); this is what the gateway knows about it.
struct Replica {
  ReplicaId id = 0;
  std::string name;  // "r<id>": what logs, metrics and the admin API show
  std::string model;
  net::Url url;
  std::uint32_t slots = 1;
  Source source = Source::config;
  // A static endpoint's slots in the YAML (0 for the others): a registration on its URL may ask
  // for fewer, never more. (Its own /health's slots_total is the phone's word and counts.)
  std::uint32_t configured_slots = 0;
  bool removed = false;  // out of the registry; in-flight work may still hold it
  std::deque<IdleConn> idle;

  // Observations for the admin API and metrics.
  std::uint64_t requests = 0;
  std::uint64_t failures = 0;
  std::optional<std::chrono::system_clock::time_point> last_probe;
  double last_probe_seconds = 0;
  std::string last_probe_error;  // "" after a passing probe
  health::ModelCheck model_check = health::ModelCheck::unverified;
  std::optional<std::uint32_t> reported_slots_idle;
  double tokens_per_second = 0;  // completion tokens per second of recent requests
  // The agent's engine start count from /health: when it grows, its KV cache is gone.
  std::optional<std::uint64_t> engine_starts;
  // Why it is in its state now (the health tracker's reason of the last change; "" before one),
  // and since when.
  std::string state_reason;
  Clock::time_point state_since = Clock::now();

  // Its probe-duration histogram, looked up once (Metrics::health_check_series).
  prometheus::Histogram* health_check_series = nullptr;

  // The probe loop's timer, so that removal can wake it (and so end it) at once.
  std::function<void()> stop_probe;

  // Proof of URL control (url_challenge.hpp): a registered replica is not routable, and its probes
  // are not counted, until its URL answered the challenge. The loop's timer, as stop_probe.
  bool challenge_pending = false;
  std::uint32_t challenge_failures = 0;
  std::function<void()> stop_challenge;
};

class Registry {
 public:
  std::shared_ptr<Replica> add(const std::string& model, const net::Url& url, std::uint32_t slots);
  std::shared_ptr<Replica> find(ReplicaId id) const;
  // Forgets the replica; holders of the shared_ptr (in-flight requests) keep it alive.
  void remove(ReplicaId id);
  std::vector<std::shared_ptr<Replica>> all() const;

  // Takes a pooled connection younger than max_idle with nothing unread on it (neither bytes
  // nor the replica's close), or nullptr. Older or unclean ones are dropped on the way.
  std::unique_ptr<net::Conn> take_idle(Replica& replica, Clock::duration max_idle,
                                       Clock::time_point now);
  // Returns a connection for reuse; the oldest is dropped beyond max_per_replica.
  void give_back(Replica& replica, std::unique_ptr<net::Conn> conn, std::size_t max_per_replica,
                 Clock::time_point now);

 private:
  ReplicaId next_id_ = 1;
  std::map<ReplicaId, std::shared_ptr<Replica>> replicas_;
};

}  // namespace fg::fleet
