#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <nlohmann/json.hpp>

#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/health/health_tracker.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::metrics {
class Metrics;
}

namespace fg::fleet {

// The replica lifecycle: static endpoints and agent registrations in one registry, active probe
// loops, passive ejection from traffic, heartbeats and expiry, drain and removal, and reloads.
// Decisions come from the pure HealthTracker; this class applies them: only healthy replicas are
// routable in the scheduler.
class FleetManager {
 public:
  using Deliver = std::function<void(const std::vector<scheduling::Grant>&)>;
  using Abandon = std::function<void(const std::vector<scheduling::WaiterId>&)>;

  FleetManager(boost::asio::any_io_executor executor, const config::ConfigSource* configs,
               Registry& registry, scheduling::Scheduler& scheduler, metrics::Metrics& metrics,
               boost::asio::ssl::context* tls, std::string upstream_authorization, Deliver deliver,
               Abandon abandon);

  // Adds the YAML's models and static endpoints and starts the probe and heartbeat loops.
  void start();
  void stop();

  // A simulated phone started by LocalFleet: joins like a registered replica (probes prove it).
  void add_local_replica(const std::string& model, const net::Url& url, std::uint32_t slots);

  // Traffic outcomes, for passive ejection.
  void traffic_failure(ReplicaId id);
  void traffic_success(ReplicaId id);

  struct Answer {
    unsigned status = 200;
    nlohmann::json body;
  };
  // POST /admin/v1/replicas/register (token already checked).
  Answer register_replica(const nlohmann::json& request);
  Answer heartbeat(const std::string& name);
  // An agent leaving: only replicas that registered may deregister.
  Answer deregister(const std::string& name);
  Answer drain(const std::string& name);
  Answer undrain(const std::string& name);
  Answer remove(const std::string& name);
  nlohmann::json replicas_json() const;
  nlohmann::json fleet_json() const;
  std::size_t healthy_count(const std::string& model) const {
    return tracker_.healthy_count(model);
  }
  health::State state(ReplicaId id) const { return tracker_.state(id); }

  // Applies a reloaded configuration's models and static endpoints. The caller has already
  // put it into the ConfigSource this manager reads.
  void reload();

  void update_metrics();

 private:
  enum class Source { config, registration, local };
  std::shared_ptr<Replica> add_replica(const std::string& model, const net::Url& url,
                                       std::uint32_t slots, Source source, health::State initial);
  void apply(const std::optional<health::Transition>& transition);
  void set_slots(Replica& replica, std::uint32_t slots);
  void finish_removal(ReplicaId id);
  void write_sd_file() const;
  bool pending_removal(ReplicaId id) const;
  std::shared_ptr<Replica> live_by_url(const std::string& normalised_url) const;
  bool heartbeat_stale(const Replica& replica, Clock::time_point now) const;
  std::shared_ptr<Replica> by_name(const std::string& name) const;
  health::Thresholds thresholds_for(const std::string& model) const;
  nlohmann::json replica_json(const Replica& replica) const;
  // The configuration in force now (reloads replace it).
  const config::Config& config() const { return configs_->current(); }

  static boost::asio::awaitable<void> probe_loop(FleetManager* self,
                                                 std::shared_ptr<Replica> replica);
  static boost::asio::awaitable<void> sweep_loop(FleetManager* self);

  boost::asio::any_io_executor executor_;
  const config::ConfigSource* configs_;
  Registry& registry_;
  scheduling::Scheduler& scheduler_;
  metrics::Metrics& metrics_;
  boost::asio::ssl::context* tls_;
  std::string upstream_authorization_;
  Deliver deliver_;
  Abandon abandon_;
  health::HealthTracker tracker_;
  std::set<std::string> models_;     // the models the scheduler knows
  std::vector<ReplicaId> removing_;  // drained, removed once idle
  std::mt19937_64 rng_{std::random_device{}()};
  boost::asio::steady_timer sweep_timer_;
  bool stopped_ = false;
};

}  // namespace fg::fleet
