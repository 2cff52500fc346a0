#pragma once

#include <memory>

#include <boost/asio/awaitable.hpp>

#include "common/net/conn.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/metrics/metrics.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::admin {

struct AdminContext {
  const config::Config* config = nullptr;
  fleet::Registry* registry = nullptr;
  scheduling::Scheduler* scheduler = nullptr;
  metrics::Metrics* metrics = nullptr;
};

// Serves the admin listener: GET /healthz (alive), GET /readyz (some replica can take traffic),
// GET /metrics (Prometheus text format).
boost::asio::awaitable<void> run_admin_session(AdminContext* ctx, std::unique_ptr<net::Conn> conn);

}  // namespace fg::admin
