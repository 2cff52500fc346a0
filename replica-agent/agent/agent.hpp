#pragma once

#include <memory>

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/net/http_session.hpp"
#include "common/net/off_thread.hpp"
#include "common/net/server.hpp"
#include "common/net/work_pool.hpp"
#include "replica-agent/config/agent_config.hpp"
#include "replica-agent/core/context.hpp"

namespace fg::agent {

class Registrar;
class Engine;
class ModelFetcher;
class Tunnel;

// The whole agent: owns the io_context (one thread), the listener, the shared state, the engine
// monitor and the registration with a gateway; handles SIGTERM/SIGINT with a drain.
class Agent {
 public:
  // Binds the listener and checks the environment (TLS files, key variables, the file
  // descriptor limit). Throws std::runtime_error naming the problem when it cannot start.
  explicit Agent(AgentConfig config);
  ~Agent();

  // Serves until a signal's drain completes; returns the exit code (0).
  int run();

 private:
  void begin_shutdown(int signal_number);
  void wait_for_signal();
  // After the drain: stop the engine, the tunnel, deregister, stop the io_context.
  void finish();
  // Registers once the public URL is known (tunnel) and the model is in place (model_file).
  void maybe_register();

  // Order matters: io_context's destructor destroys suspended connection coroutines, which still
  // touch ctx_ (so it is destroyed after io_), while I/O objects go before io_.
  std::unique_ptr<AgentContext> ctx_;
  net::SessionHooks hooks_;
  boost::asio::io_context io_;
  // Large request bodies are examined on work_pool_ (AgentServices::off_thread), as in the
  // gateway (orchestrator/app/gateway.hpp, which says why this order): the pool is destroyed
  // first, then off_thread_, then io_.
  net::OffThread off_thread_{io_.get_executor(), &work_pool_};
  // Two threads under SCHED_IDLE: the io thread, which relays the other slots' streams, takes a
  // core from them as soon as it wakes.
  net::WorkPool work_pool_{2, net::WorkPool::Priority::idle, 10};
  std::unique_ptr<net::Listener> listener_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Registrar> registrar_;
  std::unique_ptr<ModelFetcher> model_;
  std::unique_ptr<Tunnel> tunnel_;
  bool tunnel_ready_ = false;
  bool model_ready_ = false;
  bool registering_ = false;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer drain_timer_;
  bool shutting_down_ = false;
  bool finishing_ = false;
};

}  // namespace fg::agent
