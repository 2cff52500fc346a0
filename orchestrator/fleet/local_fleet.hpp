#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <sys/types.h>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "orchestrator/config/config.hpp"

namespace fg::fleet {

class FleetManager;

// Starts the simulated phones of `models[i].local` as fleetgate-agent child processes on free
// 127.0.0.1 ports, adds them to the fleet (they join like any replica: probes prove them), restarts
// any that die (with back-off), and stops them when the gateway stops. Children run in their own
// process group (a terminal's Ctrl-C reaches only the gateway, which then stops them in order) and
// die with the gateway if it is killed.
class LocalFleet {
 public:
  LocalFleet(boost::asio::any_io_executor executor, const config::ConfigSource* configs,
             FleetManager& fleet);
  ~LocalFleet();

  // Throws std::runtime_error when the agent binary is missing or a port cannot be found.
  void start();
  // SIGTERM to every agent, then waits for them (SIGKILL after a few seconds).
  void stop();
  std::size_t size() const { return agents_.size(); }

 private:
  struct Agent {
    std::string model;
    config::LocalFleetConfig settings;
    std::uint32_t index = 0;
    std::uint16_t port = 0;
    pid_t pid = -1;
    std::uint32_t restarts = 0;
    std::unique_ptr<boost::asio::steady_timer> restart_timer;
  };

  void spawn(Agent& agent);
  void wait_for_children();
  void reap();

  boost::asio::any_io_executor executor_;
  const config::ConfigSource* configs_;
  FleetManager& fleet_;
  std::string agent_binary_;
  std::vector<std::unique_ptr<Agent>> agents_;
  boost::asio::signal_set child_signals_;
  bool stopping_ = false;
};

// The agent binary: $FLEETGATE_AGENT_BIN, else fleetgate-agent beside the running executable.
std::string find_agent_binary();

}  // namespace fg::fleet
