#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "common/net/conn.hpp"
#include "orchestrator/admin/rate_history.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/metrics/metrics.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::fleet {
class FleetManager;
}

namespace fg::admin {

// The status page's rate history: one sample every kRateInterval, kRateSamples kept (5 minutes),
// current rates averaged over kRateWindow.
inline constexpr std::chrono::seconds kRateInterval{2};
inline constexpr std::size_t kRateSamples = 150;
inline constexpr std::chrono::seconds kRateWindow{10};

struct AdminContext {
  const config::ConfigSource* configs = nullptr;
  fleet::Registry* registry = nullptr;
  scheduling::Scheduler* scheduler = nullptr;
  metrics::Metrics* metrics = nullptr;
  fleet::FleetManager* fleet = nullptr;
  const RateHistory* rates = nullptr;  // sampled by the Gateway every kRateInterval
  std::string admin_token;             // empty: the /admin/v1 API is open
  std::string registration_token;      // empty: registration is off
};

// Serves the admin listener: GET /healthz (alive), GET /readyz (some replica can take traffic),
// GET /metrics (Prometheus text format), the status page (GET / or /status, and its files under
// /static/; the page itself holds no data and needs no token), and the /admin/v1 API: agent
// registration and heartbeats (registration token), replica listing, drain, undrain, delete,
// the fleet summary and the status page's data (admin token).
boost::asio::awaitable<void> run_admin_session(AdminContext* ctx, std::unique_ptr<net::Conn> conn);

}  // namespace fg::admin
