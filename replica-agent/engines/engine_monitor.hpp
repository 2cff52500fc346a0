#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/net/child_watcher.hpp"
#include "replica-agent/core/context.hpp"
#include "replica-agent/engines/autotune.hpp"

namespace fg::agent {

// Watches a proxied engine (llama-server or openai) and keeps ctx->engine_ready current: probes
// llama-server's GET /health (200 = ready; 503 "Loading model" = loading) or, for the openai
// engine, GET /v1/models. On llama-server's first success it reads the slot count from
// GET /props (total_slots) unless slots are configured. With engine.command it also starts the
// engine as a child process (its own process group, killed if the agent dies) and restarts it
// with back-off (1 s doubling to 30 s) when it exits. Exits arrive through a net::ChildWatcher:
// nothing waits on the io thread.
//
// With engine.autotune, before that: it starts the command once per candidate setting (--threads,
// --batch-size), one at a time, waits for its /health, runs the reference job on POST /completion,
// reads the speeds from llama.cpp's timings and stops it; then it runs the engine with the fastest
// setting (or the command as given when every candidate failed). Progress and results go to
// ctx->autotune (/health) and the metrics; the agent stays "loading" meanwhile.
class EngineMonitor {
 public:
  EngineMonitor(boost::asio::any_io_executor executor, AgentContext* ctx);
  ~EngineMonitor();

  void start();
  // Stops probing and terminates the child (SIGTERM to its group, SIGKILL after 5 s); done runs
  // on the io thread once it has exited (at once when none runs). Idempotent.
  void stop(std::function<void()> done);
  // SIGKILL to the child's group, without waiting (a second signal; the io loop has ended).
  void kill_now();

 private:
  // Autotune (when configured), then the supervised child and the probe loop.
  static boost::asio::awaitable<void> run(EngineMonitor* self);
  static boost::asio::awaitable<void> tune(EngineMonitor* self);
  static boost::asio::awaitable<autotune::Result> try_candidate(EngineMonitor* self,
                                                                autotune::Candidate candidate);
  // Waits for the candidate's GET /health 200; false (with *why) when it exited or timed out.
  static boost::asio::awaitable<bool> wait_until_loaded(EngineMonitor* self, std::string* why);
  // Stops the candidate in pid_ (SIGTERM to its group, SIGKILL after 5 s) and waits for its exit.
  static boost::asio::awaitable<void> stop_candidate(EngineMonitor* self);
  static boost::asio::awaitable<void> probe_loop(EngineMonitor* self);
  static boost::asio::awaitable<bool> probe_once(EngineMonitor* self);
  void spawn_child();
  void on_child_exit(int wait_status);
  void on_candidate_exit(pid_t pid, int wait_status);
  void finish_stop();

  boost::asio::any_io_executor executor_;
  AgentContext* ctx_;
  net::ChildWatcher watcher_;
  boost::asio::steady_timer restart_timer_;
  // Wakes a coroutine waiting for the autotune candidate's exit.
  boost::asio::steady_timer candidate_exit_;
  bool candidate_exited_ = false;
  int candidate_status_ = 0;
  std::function<void()> on_stopped_;
  boost::asio::cancellation_signal stop_probe_;
  pid_t pid_ = -1;  // the supervised child, or the autotune candidate running now
  std::uint32_t restarts_ = 0;
  bool slots_known_;
  std::vector<std::string> command_;  // what the child runs: the command, tuned when autotuned
  bool stopped_ = false;
  std::mt19937_64 rng_;
};

}  // namespace fg::agent
