#pragma once

// Agent registrations: parsing a registration request, the identity rules (who may update, move
// or take over a URL) and the per-replica secrets. Pure: no sockets, time is passed in, the
// secret source is injectable. The FleetManager applies the decisions; admin/ turns the typed
// results into HTTP.

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/net/url.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/deployment.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::fleet {

using scheduling::ReplicaId;

// Where a replica came from.
enum class Source {
  config,        // a static endpoint of the YAML (the operator vouched for it)
  registration,  // an agent registered it
  local,         // a simulated phone the gateway started itself
};
std::string_view to_string(Source source);

// The header that carries a replica's secret on heartbeats, deregistrations and updates.
inline constexpr std::string_view kSecretHeader = "Fleetgate-Replica-Secret";
// A registration silent for this many heartbeat intervals is unhealthy, and its URL may be
// registered again without its secret.
inline constexpr int kMissedHeartbeats = 3;
// Device facts above this size (as compact JSON) are dropped: they are shown, never used.
inline constexpr std::size_t kMaxDeviceBytes = 4096;

// A validated POST /admin/v1/replicas/register body.
struct RegistrationRequest {
  net::Url url;  // normalised by parsing
  std::string model;
  std::optional<std::uint32_t> slots;  // none: the model's default
  std::string agent_version;           // at most 64 characters
  nlohmann::json device = nlohmann::json::object();
  // The Acurast deployment the phone belongs to and when it ends (both optional).
  std::string deployment_id;  // at most kMaxDeploymentId characters
  std::optional<SystemTime> ends_at;
};

enum class RequestError {
  none,
  not_json,
  too_deep,
  not_object,
  missing_url,
  bad_url,
  missing_model,
  bad_slots,
  bad_deployment,  // deployment_id not a short string, or ends_at not an RFC 3339 time
};

struct ParsedRegistration {
  std::optional<RegistrationRequest> request;
  RequestError error = RequestError::none;
  std::string message;  // why it was refused; never echoes more than a short excerpt
};

// Parses and validates a registration body from the network (fg::parse_network_json: nothing
// recursive runs over a document nested deeper than kMaxJsonDepth). Total: any input gives a
// request or an error, never an exception. The fuzz target for registration JSON.
ParsedRegistration parse_registration(std::string_view body);

// Why a registration was refused after parsing.
enum class Refusal {
  none,
  unknown_model,    // the model is not configured
  url_not_allowed,  // no registration.allowed_urls pattern matches
  static_endpoint,  // the URL is a static endpoint of another model
  url_in_use,       // the URL is a local agent of this gateway
  url_registered,   // registered by someone else: its secret is needed
};

// The entry that serves a URL now (none being removed), as the rules need to see it.
struct UrlHolder {
  ReplicaId id = 0;
  std::string model;
  Source source = Source::registration;
};

struct RegistrationPlan {
  enum class Action {
    create,   // a new registered replica with a new secret
    update,   // the same entry and secret: new slots and facts (the secret was presented)
    replace,  // the holder goes (drained), a new registered replica takes the URL
    attach,   // a static endpoint gets a registration (a new secret); the entry stays
    refuse,
  };
  Action action = Action::refuse;
  Refusal refusal = Refusal::none;
  std::string message;        // for a refusal
  std::uint32_t slots = 1;    // what the replica gets
  bool slots_capped = false;  // asked for more than its static endpoint's slots
  bool keep_secret = false;   // replace: the holder's secret was presented and stays valid
  bool took_over = false;     // the holder's secret was not presented (it missed heartbeats)
};

// What a registration holds besides the replica entry itself.
struct Registration {
  std::string secret;
  std::chrono::steady_clock::time_point last_heartbeat;
  std::string agent_version;
  nlohmann::json device = nlohmann::json::object();
  std::string deployment_id;
  std::optional<SystemTime> ends_at;
};

enum class SecretCheck { ok, unknown, wrong_secret };

// The registrations the gateway knows, by replica id, and the rules that govern them.
class RegistrationBook {
 public:
  using Clock = std::chrono::steady_clock;
  using SecretSource = std::function<std::string()>;

  // make_secret: fg::random_secret by default; tests inject a deterministic source.
  explicit RegistrationBook(SecretSource make_secret = {});

  // The rules, in order: the model must be configured; the URL must match allowed_urls; a static
  // endpoint's URL stays with its model and its slots are a ceiling; a local agent's URL is the
  // gateway's; a URL registered before may be updated or moved only with its secret, or taken
  // over once its registration missed kMissedHeartbeats heartbeats.
  RegistrationPlan plan(const RegistrationRequest& request, std::string_view presented_secret,
                        const std::optional<UrlHolder>& holder, const config::Config& config,
                        Clock::time_point now) const;

  // Records replica `id`'s registration (replacing any); returns the secret it must present
  // from now on: `keep` when given, else a new one.
  const std::string& record(ReplicaId id, const RegistrationRequest& request, Clock::time_point now,
                            std::optional<std::string> keep = std::nullopt);
  const Registration* find(ReplicaId id) const;
  SecretCheck check(ReplicaId id, std::string_view presented_secret) const;
  void heartbeat(ReplicaId id, Clock::time_point now);
  void forget(ReplicaId id);

  // Silent for kMissedHeartbeats intervals: unhealthy, and its URL open to a new registration.
  bool missed_heartbeats(ReplicaId id, Clock::duration heartbeat_interval,
                         Clock::time_point now) const;
  // Registrations silent for longer than `silence`, in id order. Walks them only when the oldest
  // heartbeat may be that old: the sweep asks every second, and at 5,000 registrations each walk
  // (a cache miss per map node) was ~4% of the gateway's CPU (perf).
  std::vector<ReplicaId> silent_for(Clock::duration silence, Clock::time_point now);

 private:
  void heard_at(Clock::time_point t);

  SecretSource make_secret_;
  std::map<ReplicaId, Registration> registrations_;
  // No registration's last heartbeat is older than this (exact after a walk, lowered by every
  // record and heartbeat since; nullopt: none recorded yet).
  std::optional<Clock::time_point> heard_since_;
};

}  // namespace fg::fleet
