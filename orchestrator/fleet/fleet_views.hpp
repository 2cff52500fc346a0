#pragma once

// What the FleetManager answers: typed results and plain views of replicas and models. admin/
// alone turns them into HTTP statuses and JSON. Pure.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "orchestrator/fleet/registrations.hpp"
#include "orchestrator/health/health_tracker.hpp"
#include "orchestrator/health/probe_body.hpp"
#include "orchestrator/scheduling/speed_model.hpp"

namespace fg::fleet {

struct ReplicaView {
  std::string id;
  std::string model;
  std::string url;
  health::State state = health::State::joining;
  std::string state_reason;  // why it is in that state ("" before the first change)
  double state_seconds = 0;  // how long it has been in it
  Source source = Source::config;
  std::uint32_t slots = 0;
  std::uint32_t in_flight = 0;
  std::uint32_t consecutive_failures = 0;
  std::uint64_t requests = 0;
  std::uint64_t failures = 0;
  double tokens_per_second = 0;
  // The scheduler's speeds for it, when measured by its agent or learned from its answers (not
  // the configured defaults).
  std::optional<scheduling::SpeedSnapshot> speeds;
  std::optional<std::chrono::system_clock::time_point> last_probe;
  double last_probe_seconds = 0;
  std::string last_probe_error;
  health::ModelCheck model_check = health::ModelCheck::unverified;
  std::optional<std::uint32_t> reported_slots_idle;
  bool removing = false;
  // An agent's registration (registered replicas, and static endpoints an agent registered on).
  bool registered = false;
  std::string agent_version;
  nlohmann::json device = nlohmann::json::object();
  double heartbeat_age_seconds = 0;
  std::string deployment_id;  // "" when the agent named none
  std::optional<std::chrono::system_clock::time_point> ends_at;
};

struct ModelView {
  std::string model;
  std::uint32_t desired = 0;
  std::size_t registered = 0;  // replicas known for it, whatever their state
  std::size_t healthy = 0;
  // Healthy replicas whose deployment ends within the next hour (deployment.hpp).
  std::size_t ending_within_hour = 0;
  std::uint32_t busy_slots = 0;
  std::uint32_t free_slots = 0;
  std::size_t queue_depth = 0;
  double oldest_queued_seconds = 0;
  bool degraded = false;             // healthy < desired
  bool short_after_endings = false;  // healthy - ending_within_hour < desired
};

struct RegisterResult {
  Refusal refusal = Refusal::none;
  std::string message;  // for a refusal
  std::string id;
  std::string secret;
  std::chrono::milliseconds heartbeat_interval{0};
  std::uint32_t slots = 0;
  bool slots_capped = false;
  bool ok() const { return refusal == Refusal::none; }
};

// Heartbeats and deregistrations: which registration, and whether its secret matched.
struct IdentityResult {
  SecretCheck check = SecretCheck::unknown;  // unknown: no registration with this id
  std::optional<ReplicaView> replica;
  bool removing = false;  // deregistered: drained, removed once idle
};

// drain, undrain, DELETE.
struct ReplicaOpResult {
  enum class Status { ok, not_found, removing };
  Status status = Status::ok;
  std::optional<ReplicaView> replica;
};

}  // namespace fg::fleet
