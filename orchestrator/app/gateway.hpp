#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/net/http_io.hpp"
#include "common/net/http_session.hpp"
#include "common/net/off_thread.hpp"
#include "common/net/server.hpp"
#include "common/net/session_tracker.hpp"
#include "common/net/work_pool.hpp"
#include "orchestrator/admin/admin.hpp"
#include "orchestrator/batch/batch_service.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/fleet_manager.hpp"
#include "orchestrator/fleet/local_fleet.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/metrics/metrics.hpp"
#include "orchestrator/proxy/context.hpp"
#include "orchestrator/proxy/slot_broker.hpp"
#include "orchestrator/scheduling/scheduler.hpp"

namespace fg::app {

// Owns the io_context and every part of the gateway; wires them and sets start and stop order.
// One thread runs everything, so no state here needs a lock; the work pool's jobs touch only
// what their caller hands them.
class Gateway {
 public:
  // Throws std::runtime_error for start-up problems (cannot bind, bad TLS files, a secret with a
  // control character, connection caps that do not fit the file descriptor limit).
  // config_path is reread on SIGHUP (empty: the embedded default, not reloadable).
  Gateway(config::Config config, std::string config_path);
  // Runs until SIGTERM/SIGINT and the drain that follows. Returns the process exit code.
  int run();
  ~Gateway();

 private:
  void begin_shutdown(int signal_number);
  void reload();
  void wait_for_hangup();
  // Samples every model's request and token totals for the status page's rates.
  void sample_rates();

  // Order matters. State that suspended coroutines touch when they are destroyed (sessions,
  // scheduler, broker) is declared before io_, so it outlives it: the io_context destroys the
  // coroutines it still holds. I/O objects (timers, signal sets, listeners) come after io_, so
  // they go first, while its services still exist.
  config::ConfigSource configs_;
  std::string config_path_;
  scheduling::Scheduler scheduler_;
  proxy::SlotBroker broker_;
  fleet::Registry registry_;
  net::SessionTracker sessions_;
  // Request bodies the public listener holds (server.max_buffered_bytes); sessions suspended in
  // io_ hold reservations, so it is declared before io_.
  net::BodyBudget body_budget_;
  metrics::Metrics metrics_;
  std::shared_ptr<boost::asio::ssl::context> upstream_tls_;
  std::shared_ptr<boost::asio::ssl::context> public_tls_;
  std::shared_ptr<boost::asio::ssl::context> admin_tls_;
  proxy::ProxyContext proxy_ctx_;
  net::SessionHooks public_hooks_;
  admin::AdminContext admin_ctx_;
  admin::RateHistory rates_{admin::kRateSamples};
  // RLIMIT_NOFILE after raising it at start; the connection caps must fit in it.
  std::uint64_t descriptor_limit_ = 0;

  // batch.enabled. Before io_: its suspended line coroutines touch it when io_ destroys them
  // (its one timer is closed in ~Gateway, while io_ still exists).
  std::unique_ptr<batch::BatchService> batch_;

  boost::asio::io_context io_{1};
  // Large request bodies are inspected on work_pool_ (proxy::ProxyContext::off_thread), whose
  // jobs hand their results to off_thread_ and from there to io_. Destroyed in reverse: the pool
  // first (closed, its running jobs joined; a job it drops unrun destroys the suspended coroutine
  // that waited for it, which needs the state declared before io_), then off_thread_ (results
  // not taken), then io_. off_thread_ is given the pool's address before the pool is built; it
  // uses it only once io_ runs.
  net::OffThread off_thread_{io_.get_executor(), &work_pool_};
  // Two threads under SCHED_IDLE: the io thread takes a core from them as soon as it wakes.
  net::WorkPool work_pool_{2, net::WorkPool::Priority::idle, 10};
  // A request is watched for its client leaving from 100 ms on (net::WatchStarter): one answered
  // sooner makes no system call for it, and a phone's answer takes seconds to minutes.
  net::WatchStarter watch_starter_{io_.get_executor(), std::chrono::milliseconds(100)};

  std::unique_ptr<fleet::FleetManager> fleet_;
  std::unique_ptr<fleet::LocalFleet> local_fleet_;
  std::unique_ptr<net::Listener> public_listener_;
  std::unique_ptr<net::Listener> admin_listener_;
  boost::asio::signal_set signals_;
  boost::asio::signal_set hangup_;
  boost::asio::steady_timer drain_timer_;
  boost::asio::steady_timer rate_timer_;
  bool shutting_down_ = false;
};

}  // namespace fg::app
