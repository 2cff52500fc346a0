#include "orchestrator/fleet/local_fleet.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <thread>

#include <boost/asio/ip/tcp.hpp>

#include "common/log/log.hpp"
#include "common/net/url.hpp"
#include "common/sim/profiles.hpp"
#include "common/util/process.hpp"
#include "orchestrator/fleet/fleet_manager.hpp"

namespace fg::fleet {

namespace asio = boost::asio;

namespace {

constexpr auto kMaxRestartDelay = std::chrono::seconds(30);
constexpr auto kStopGrace = std::chrono::seconds(5);

// A free loopback port: bind to port 0 and give it back. The agent binds it a moment later.
std::uint16_t free_port(asio::any_io_executor executor) {
  asio::ip::tcp::acceptor probe(executor);
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), 0);
  probe.open(endpoint.protocol());
  probe.bind(endpoint);
  return probe.local_endpoint().port();
}

std::string format_scale(double v) {
  char out[32];
  std::snprintf(out, sizeof out, "%g", v);
  return out;
}

}  // namespace

std::string find_agent_binary() {
  if (const char* env = std::getenv("FLEETGATE_AGENT_BIN"); env && *env) {
    return env;
  }
  std::error_code ec;
  auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) {
    return "fleetgate-agent";
  }
  return (self.parent_path() / "fleetgate-agent").string();
}

LocalFleet::LocalFleet(asio::any_io_executor executor, const config::ConfigSource* configs,
                       FleetManager& fleet)
    : executor_(executor),
      configs_(configs),
      fleet_(fleet),
      agent_binary_(find_agent_binary()),
      child_signals_(executor, SIGCHLD) {}

LocalFleet::~LocalFleet() {
  stop();
}

void LocalFleet::start() {
  for (const auto& model : configs_->current().models) {
    if (!model.local) {
      continue;
    }
    if (::access(agent_binary_.c_str(), X_OK) != 0) {
      throw std::runtime_error("models: " + model.name + ": local fleet needs the agent binary " +
                               agent_binary_ + " (set FLEETGATE_AGENT_BIN to its path)");
    }
    for (std::uint32_t i = 0; i < model.local->count; ++i) {
      auto agent = std::make_unique<Agent>();
      agent->model = model.name;
      agent->settings = *model.local;
      agent->index = i;
      agent->port = free_port(executor_);
      agent->restart_timer = std::make_unique<asio::steady_timer>(executor_);
      const auto* profile = sim::find_profile(model.local->profile);
      std::uint32_t slots = model.local->slots != 0 ? model.local->slots
                            : profile               ? static_cast<std::uint32_t>(profile->slots)
                                                    : model.slots;
      spawn(*agent);
      net::Url url;
      url.scheme = "http";
      url.host = "127.0.0.1";
      url.port = agent->port;
      fleet_.add_local_replica(model.name, url, slots);
      agents_.push_back(std::move(agent));
    }
  }
  if (!agents_.empty()) {
    wait_for_children();
  }
}

void LocalFleet::spawn(Agent& agent) {
  std::vector<std::string> args = {agent_binary_,
                                   "--listen",
                                   "127.0.0.1:" + std::to_string(agent.port),
                                   "--model",
                                   agent.model,
                                   "--profile",
                                   agent.settings.profile,
                                   "--time-scale",
                                   format_scale(agent.settings.time_scale),
                                   "--seed",
                                   std::to_string(agent.index + 1),
                                   "--log-level",
                                   "warn"};
  if (agent.settings.slots != 0) {
    args.push_back("--slots");
    args.push_back(std::to_string(agent.settings.slots));
  }
  const pid_t pid = spawn_child_process(std::move(args));
  if (pid < 0) {
    log::error("cannot start a local agent", {{"model", agent.model}, {"error", "fork failed"}});
    return;
  }
  agent.pid = pid;
  log::info("local agent started", {{"model", agent.model},
                                    {"address", "127.0.0.1:" + std::to_string(agent.port)},
                                    {"pid", pid},
                                    {"profile", agent.settings.profile}});
}

void LocalFleet::wait_for_children() {
  child_signals_.async_wait([this](boost::system::error_code ec, int) {
    if (ec) {
      return;
    }
    reap();
    if (!stopping_) {
      wait_for_children();
    }
  });
}

void LocalFleet::reap() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      return;
    }
    auto it = std::find_if(agents_.begin(), agents_.end(),
                           [pid](const auto& a) { return a->pid == pid; });
    if (it == agents_.end()) {
      continue;
    }
    Agent& agent = **it;
    agent.pid = -1;
    if (stopping_) {
      continue;
    }
    const auto delay = std::min<std::chrono::seconds>(
        std::chrono::seconds(1) * (1u << std::min<std::uint32_t>(agent.restarts, 5)),
        kMaxRestartDelay);
    ++agent.restarts;
    log::warn("local agent exited; restarting",
              {{"model", agent.model},
               {"address", "127.0.0.1:" + std::to_string(agent.port)},
               {"status", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status)},
               {"restart_in_s", delay.count()}});
    agent.restart_timer->expires_after(delay);
    agent.restart_timer->async_wait([this, &agent](boost::system::error_code ec) {
      if (!ec && !stopping_) {
        spawn(agent);
      }
    });
  }
}

void LocalFleet::stop() {
  if (stopping_) {
    return;
  }
  stopping_ = true;
  child_signals_.cancel();
  for (auto& agent : agents_) {
    agent->restart_timer->cancel();
    if (agent->pid > 0) {
      ::kill(agent->pid, SIGTERM);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
  for (auto& agent : agents_) {
    while (agent->pid > 0) {
      int status = 0;
      pid_t r = ::waitpid(agent->pid, &status, WNOHANG);
      if (r == agent->pid || (r < 0 && errno == ECHILD)) {
        agent->pid = -1;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(agent->pid, SIGKILL);
        ::waitpid(agent->pid, &status, 0);
        agent->pid = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

}  // namespace fg::fleet
