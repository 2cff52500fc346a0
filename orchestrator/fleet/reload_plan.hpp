#pragma once

// What a reload (SIGHUP) changes in the running fleet: the pure planner. It compares what runs
// now with the new configuration and lists actions; the FleetManager and the LocalFleet apply
// them. Unit-tested without sockets or processes.

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/net/url.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::fleet {

// The running fleet as the planner sees it.
struct RunningFleet {
  std::set<std::string> models;  // the models the scheduler knows
  struct Static {
    scheduling::ReplicaId id = 0;
    std::string model;
    std::string url;  // normalised
    std::uint32_t slots = 0;
    bool removing = false;  // drained, goes once idle
  };
  std::vector<Static> statics;
  // URLs of live registered and local replicas: a static endpoint is not added over them.
  std::set<std::string> other_urls;
  struct Local {
    std::string model;
    std::uint32_t index = 0;  // 0 .. count - 1 within its model
    config::LocalFleetConfig settings;
  };
  std::vector<Local> locals;
};

struct ReloadPlan {
  std::vector<std::string> add_models;
  // Their replicas go at once and their queued requests are answered.
  std::vector<std::string> remove_models;
  std::vector<scheduling::ReplicaId> remove_statics;  // drained, removed once idle
  struct KeepStatic {
    scheduling::ReplicaId id = 0;
    std::uint32_t slots = 0;
    bool restore = false;  // it was being removed: it stays, proven again by probes
  };
  std::vector<KeepStatic> keep_statics;
  struct AddStatic {
    std::string model;
    net::Url url;
    std::uint32_t slots = 0;
  };
  std::vector<AddStatic> add_statics;
  // A URL the new file lists as a static endpoint while a registered or local replica serves
  // it: the agent keeps it (logged).
  std::vector<std::string> shadowed_statics;
  struct LocalAction {
    enum class Kind {
      start,    // a new agent
      stop,     // drained, then stopped (its in-flight requests finish)
      restart,  // stop the running one, start one with the new settings
    };
    Kind kind = Kind::start;
    std::string model;
    std::uint32_t index = 0;
    config::LocalFleetConfig settings;  // start, restart: what the agent runs
  };
  std::vector<LocalAction> locals;

  bool empty() const {
    return add_models.empty() && remove_models.empty() && remove_statics.empty() &&
           add_statics.empty() && locals.empty();
  }
};

// Whether two local-fleet settings run the same agents (profile, engine, time scale, slots).
bool same_agent_settings(const config::LocalFleetConfig& a, const config::LocalFleetConfig& b);

ReloadPlan plan_reload(const RunningFleet& old, const config::Config& next);

}  // namespace fg::fleet
