#pragma once

#include <sys/types.h>

#include <cstdint>
#include <random>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "replica-agent/agent/context.hpp"

namespace fg::agent {

// Watches a proxied engine (llama-server or openai) and keeps ctx->engine_ready current: probes
// llama-server's GET /health (200 = ready; 503 "Loading model" = loading) or, for the openai
// engine, GET /v1/models. On llama-server's first success it reads the slot count from
// GET /props (total_slots) unless slots are configured. With engine.command it also starts the
// engine as a child process (its own process group, killed if the agent dies) and restarts it
// with back-off (1 s doubling to 30 s) when it exits.
class EngineMonitor {
 public:
  EngineMonitor(boost::asio::any_io_executor executor, AgentContext* ctx);
  ~EngineMonitor();

  void start();
  // Stops probing and terminates the child (SIGTERM to its group, SIGKILL after 5 s). Idempotent.
  void stop();

 private:
  static boost::asio::awaitable<void> probe_loop(EngineMonitor* self);
  static boost::asio::awaitable<bool> probe_once(EngineMonitor* self);
  void spawn_child();
  void wait_for_child();
  void reap();

  boost::asio::any_io_executor executor_;
  AgentContext* ctx_;
  boost::asio::signal_set child_signals_;
  boost::asio::steady_timer restart_timer_;
  boost::asio::cancellation_signal stop_probe_;
  pid_t pid_ = -1;
  std::uint32_t restarts_ = 0;
  bool slots_known_;
  bool stopped_ = false;
  std::mt19937_64 rng_;
};

}  // namespace fg::agent
