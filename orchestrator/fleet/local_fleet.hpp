#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/net/child_watcher.hpp"
#include "orchestrator/config/config.hpp"
#include "orchestrator/fleet/reload_plan.hpp"

namespace fg::fleet {

class FleetManager;

// Starts the simulated phones of `models[i].local` as fleetgate-agent child processes on free
// 127.0.0.1 ports, adds them to the fleet (they join like any replica: probes prove them),
// restarts any that dies (with back-off), applies reloads (starts, stops and restarts agents as
// plan_reload says) and stops them when the gateway stops. An agent is stopped only once its
// replica is idle: drained in the fleet first, then SIGTERM. Children run in their own process
// group (a terminal's Ctrl-C reaches only the gateway, which then stops them in order) and die
// with the gateway if it is killed. Nothing here blocks the io thread (net::ChildWatcher).
class LocalFleet {
 public:
  LocalFleet(boost::asio::any_io_executor executor, const config::ConfigSource* configs,
             FleetManager& fleet);
  ~LocalFleet();

  // Throws std::runtime_error when the agent binary is missing or a port cannot be found.
  void start();
  // A reload's local actions (FleetManager::reload calls it).
  void apply(const std::vector<ReloadPlan::LocalAction>& actions);
  // The agents that run (or restart) now, for plan_reload; agents being stopped are not listed.
  std::vector<RunningFleet::Local> running() const;
  // The fleet removed this agent's replica (a reload, a removed model, DELETE): it stops.
  void replica_removed(scheduling::ReplicaId id);

  // SIGTERM to every agent (SIGKILL after their drain time); done runs on the io thread once
  // all have exited (at once when none runs).
  void stop(std::function<void()> done);
  // SIGKILL to every agent, without waiting (a second signal, a failed start).
  void kill_now();
  std::size_t size() const { return agents_.size(); }

 private:
  struct Agent {
    std::uint64_t serial = 0;  // identifies it in callbacks (indexes and pids are reused)
    std::string model;
    config::LocalFleetConfig settings;
    std::uint32_t index = 0;
    std::uint16_t port = 0;
    pid_t pid = -1;
    scheduling::ReplicaId replica = 0;
    std::uint32_t restarts = 0;
    bool retiring = false;  // being stopped for good: no restart
    std::unique_ptr<boost::asio::steady_timer> restart_timer;
  };

  void launch(const std::string& model, std::uint32_t index,
              const config::LocalFleetConfig& settings);
  void spawn(Agent& agent);
  void on_exit(std::uint64_t serial, int wait_status);
  void schedule_restart(Agent& agent);
  // Drains its replica; the process stops when the replica is removed (replica_removed).
  void retire(Agent& agent);
  void terminate(Agent& agent);
  Agent* find_serial(std::uint64_t serial);
  Agent* find_running(const std::string& model, std::uint32_t index);
  void erase(std::uint64_t serial);
  void finish_stop_if_done();
  std::chrono::steady_clock::duration stop_grace() const;

  boost::asio::any_io_executor executor_;
  const config::ConfigSource* configs_;
  FleetManager& fleet_;
  std::string agent_binary_;
  net::ChildWatcher watcher_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::uint64_t next_serial_ = 1;
  bool stopping_ = false;
  std::function<void()> on_stopped_;
};

// The agent binary: $FLEETGATE_AGENT_BIN, else fleetgate-agent beside the running executable.
std::string find_agent_binary();

}  // namespace fg::fleet
