#pragma once

#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "common/net/conn.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/metrics/metrics.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::fleet {
class FleetManager;
}

namespace fg::admin {

struct AdminContext {
  const config::ConfigSource* configs = nullptr;
  fleet::Registry* registry = nullptr;
  scheduling::Scheduler* scheduler = nullptr;
  metrics::Metrics* metrics = nullptr;
  fleet::FleetManager* fleet = nullptr;
  std::string admin_token;         // empty: the /admin/v1 API is open
  std::string registration_token;  // empty: registration is off
};

// Serves the admin listener: GET /healthz (alive), GET /readyz (some replica can take traffic),
// GET /metrics (Prometheus text format), and the /admin/v1 API: agent registration and
// heartbeats (registration token), replica listing, drain, undrain, delete and the fleet summary
// (admin token).
boost::asio::awaitable<void> run_admin_session(AdminContext* ctx, std::unique_ptr<net::Conn> conn);

}  // namespace fg::admin
