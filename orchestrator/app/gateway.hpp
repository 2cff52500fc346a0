#pragma once

#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/net/server.hpp"
#include "orchestrator/admin/admin.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/metrics/metrics.hpp"
#include "orchestrator/proxy/context.hpp"
#include "orchestrator/proxy/slot_broker.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::app {

// Owns the io_context and every part of the gateway; wires them and sets start and stop order.
// One thread runs everything, so no state here needs a lock.
class Gateway {
 public:
  // Throws std::runtime_error for start-up problems (cannot bind, bad TLS files).
  explicit Gateway(config::Config config);
  // Runs until SIGTERM/SIGINT and the drain that follows. Returns the process exit code.
  int run();

 private:
  void build_fleet();
  void begin_shutdown(int signal_number);

  boost::asio::io_context io_{1};
  config::Config config_;
  scheduling::Scheduler scheduler_;
  proxy::SlotBroker broker_;
  fleet::Registry registry_;
  proxy::SessionTracker sessions_;
  metrics::Metrics metrics_;
  std::shared_ptr<boost::asio::ssl::context> upstream_tls_;
  std::shared_ptr<boost::asio::ssl::context> public_tls_;
  proxy::ProxyContext proxy_ctx_;
  admin::AdminContext admin_ctx_;
  std::unique_ptr<net::Listener> public_listener_;
  std::unique_ptr<net::Listener> admin_listener_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer drain_timer_;
  bool shutting_down_ = false;
};

}  // namespace fg::app
