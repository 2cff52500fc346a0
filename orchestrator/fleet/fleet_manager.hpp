#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/fleet_views.hpp"
#include "orchestrator/fleet/health_checker.hpp"
#include "orchestrator/fleet/registrations.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/fleet/reload_plan.hpp"
#include "orchestrator/health/health_tracker.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::net {
class TlsSessions;
}

namespace fg::metrics {
class Metrics;
}

namespace fg::fleet {

class LocalFleet;

// The replica lifecycle: static endpoints, agent registrations and local agents in one registry;
// probe outcomes, traffic outcomes, heartbeats, expiry, drain, removal and reloads. It applies
// decisions made elsewhere (HealthTracker: states; RegistrationBook: identities; plan_reload:
// reloads) and keeps the scheduler in step: only healthy replicas are routable. The probe loops
// run in the HealthChecker. Every answer is a typed result; admin/ makes HTTP of it.
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

  // The local fleet, whose agents reloads start and stop (LocalFleet attaches itself).
  void attach_local_fleet(LocalFleet* local) { local_ = local; }
  // A simulated phone started by LocalFleet: joins like a registered replica (probes prove it).
  ReplicaId add_local_replica(const std::string& model, const net::Url& url, std::uint32_t slots);
  // A local agent being stopped: drained, removed once its in-flight requests are done.
  void remove_local_replica(ReplicaId id);

  // Traffic outcomes, for passive ejection.
  void traffic_failure(ReplicaId id);
  void traffic_success(ReplicaId id);

  // POST /admin/v1/replicas/register (the registration token already checked). secret: the
  // Fleetgate-Replica-Secret header ("" when absent).
  RegisterResult register_replica(const RegistrationRequest& request, std::string_view secret);
  IdentityResult heartbeat(std::string_view name, std::string_view secret);
  // An agent leaving. A registered replica is drained and removed; a static endpoint only loses
  // its registration.
  IdentityResult deregister(std::string_view name, std::string_view secret);
  ReplicaOpResult drain(std::string_view name);
  ReplicaOpResult undrain(std::string_view name);
  ReplicaOpResult remove(std::string_view name);

  std::vector<ReplicaView> replicas() const;
  std::vector<ModelView> models() const;
  std::size_t healthy_count(const std::string& model) const {
    return tracker_.healthy_count(model);
  }
  health::State state(ReplicaId id) const { return tracker_.state(id); }

  // Applies a reloaded configuration (plan_reload against what runs now). The caller has
  // already put it into the ConfigSource this manager reads.
  void reload();

  void update_metrics();

 private:
  // The sessions the upstream TLS context keeps (null without one).
  net::TlsSessions* tls_sessions() const;
  std::shared_ptr<Replica> add_replica(const std::string& model, const net::Url& url,
                                       std::uint32_t slots, Source source, health::State initial);
  void apply(const std::optional<health::Transition>& transition);
  void set_slots(Replica& replica, std::uint32_t slots);
  // Drained now, removed by the sweep once idle.
  void begin_removal(Replica& replica);
  void finish_removal(ReplicaId id);
  void write_sd_file() const;
  bool pending_removal(ReplicaId id) const;
  std::shared_ptr<Replica> live_by_url(const std::string& normalised_url) const;
  std::shared_ptr<Replica> by_name(std::string_view name) const;
  health::Thresholds thresholds_for(const std::string& model) const;
  ReplicaView view_of(const Replica& replica) const;
  // Per replica of a model: healthy, and when its deployment ends (when its agent said).
  std::vector<EndingFacts> ending_facts(const std::string& model) const;
  RunningFleet running() const;
  void apply_plan(const ReloadPlan& plan);

  // HealthChecker hooks.
  Clock::time_point next_probe_at(const Replica& replica, Clock::time_point last);
  bool probe_paused(const Replica& replica) const;
  void on_probe(Replica& replica, const health::ProbeOutcome& outcome);
  void pass_on_routing_facts(Replica& replica, const health::ProbeOutcome& outcome);

  void sweep();
  static boost::asio::awaitable<void> sweep_loop(FleetManager* self);

  // Proof of URL control: fetches the challenge through the replica's URL until it passes (with
  // back-off), the replica is removed or its registration ends.
  void start_challenge(const std::shared_ptr<Replica>& replica);
  static boost::asio::awaitable<void> challenge_loop(FleetManager* self,
                                                     std::shared_ptr<Replica> replica);

  // The configuration in force now (reloads replace it).
  const config::Config& config() const { return configs_->current(); }

  boost::asio::any_io_executor executor_;
  const config::ConfigSource* configs_;
  boost::asio::ssl::context* tls_;
  std::string upstream_authorization_;
  Registry& registry_;
  scheduling::Scheduler& scheduler_;
  metrics::Metrics& metrics_;
  Deliver deliver_;
  Abandon abandon_;
  health::HealthTracker tracker_;
  RegistrationBook book_;
  HealthChecker checker_;
  LocalFleet* local_ = nullptr;
  std::set<std::string> models_;     // the models the scheduler knows
  std::vector<ReplicaId> removing_;  // drained, removed once idle
  std::mt19937_64 rng_{std::random_device{}()};
  boost::asio::steady_timer sweep_timer_;
  bool stopped_ = false;
};

}  // namespace fg::fleet
