#include "orchestrator/fleet/local_fleet.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>

#include "common/log/log.hpp"
#include "common/net/url.hpp"
#include "common/sim/profiles.hpp"
#include "common/util/process.hpp"
#include "orchestrator/fleet/fleet_manager.hpp"

namespace fg::fleet {

namespace asio = boost::asio;

namespace {

constexpr auto kMaxRestartDelay = std::chrono::seconds(30);
// Beyond an agent's own drain time (it finishes its requests after SIGTERM), before SIGKILL.
constexpr auto kKillMargin = std::chrono::seconds(5);

// A free loopback port: bind to port 0 and give it back. The agent binds it a moment later.
std::uint16_t free_port(asio::any_io_executor executor) {
  asio::ip::tcp::acceptor probe(executor);
  asio::ip::tcp::endpoint endpoint(asio::ip::make_address("127.0.0.1"), 0);
  probe.open(endpoint.protocol());
  probe.bind(endpoint);
  return probe.local_endpoint().port();
}

std::string format_number(double v) {
  char out[32];
  std::snprintf(out, sizeof out, "%g", v);
  return out;
}

std::uint32_t agent_slots(const config::ModelConfig* model,
                          const config::LocalFleetConfig& settings) {
  if (settings.slots != 0) {
    return settings.slots;
  }
  if (const auto* profile = sim::find_profile(settings.profile)) {
    return static_cast<std::uint32_t>(profile->slots);
  }
  return model != nullptr ? model->slots : 1;
}

std::string address_of(std::uint16_t port) {
  return "127.0.0.1:" + std::to_string(port);
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
      watcher_(executor) {
  fleet_.attach_local_fleet(this);
}

LocalFleet::~LocalFleet() {
  fleet_.attach_local_fleet(nullptr);
  // Normally stop() ran and nothing is left; otherwise they drain by themselves (PDEATHSIG).
  for (const auto& agent : agents_) {
    if (agent->pid > 0) {
      ::kill(-agent->pid, SIGTERM);
    }
  }
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
      launch(model.name, i, *model.local);
    }
  }
}

void LocalFleet::apply(const std::vector<ReloadPlan::LocalAction>& actions) {
  using Kind = ReloadPlan::LocalAction::Kind;
  for (const auto& action : actions) {
    if (action.kind != Kind::start) {
      if (Agent* agent = find_running(action.model, action.index)) {
        log::info(action.kind == Kind::stop ? "local agent stopping (reload)"
                                            : "local agent restarting with new settings (reload)",
                  {{"model", agent->model}, {"address", address_of(agent->port)}});
        retire(*agent);
      }
    }
    if (action.kind == Kind::stop || stopping_) {
      continue;
    }
    if (::access(agent_binary_.c_str(), X_OK) != 0) {
      log::error("cannot start a local agent: the agent binary is missing",
                 {{"model", action.model}, {"binary", agent_binary_}});
      continue;
    }
    try {
      launch(action.model, action.index, action.settings);
    } catch (const std::exception& e) {
      log::error("cannot start a local agent", {{"model", action.model}, {"error", e.what()}});
    }
  }
}

std::vector<RunningFleet::Local> LocalFleet::running() const {
  std::vector<RunningFleet::Local> out;
  for (const auto& agent : agents_) {
    if (!agent->retiring) {
      out.push_back({agent->model, agent->index, agent->settings});
    }
  }
  return out;
}

void LocalFleet::launch(const std::string& model, std::uint32_t index,
                        const config::LocalFleetConfig& settings) {
  auto agent = std::make_unique<Agent>();
  agent->serial = next_serial_++;
  agent->model = model;
  agent->settings = settings;
  agent->index = index;
  agent->port = free_port(executor_);
  agent->restart_timer = std::make_unique<asio::steady_timer>(executor_);
  Agent& a = *agent;
  agents_.push_back(std::move(agent));
  spawn(a);
  net::Url url;
  url.scheme = "http";
  url.host = "127.0.0.1";
  url.port = a.port;
  a.replica = fleet_.add_local_replica(
      model, url, agent_slots(configs_->current().find_model(model), settings));
}

void LocalFleet::spawn(Agent& agent) {
  const double drain_s =
      std::chrono::duration<double>(configs_->current().server.drain_timeout).count();
  std::vector<std::string> args = {agent_binary_, "--listen", address_of(agent.port), "--model",
                                   agent.model, "--profile", agent.settings.profile, "--time-scale",
                                   format_number(agent.settings.time_scale), "--seed",
                                   std::to_string(agent.index + 1), "--drain-timeout",
                                   format_number(drain_s), "--log-level", "warn",
                                   // The agents write to the gateway's stderr: same format.
                                   "--log-format", std::string(log::to_string(log::format()))};
  if (agent.settings.slots != 0) {
    args.push_back("--slots");
    args.push_back(std::to_string(agent.settings.slots));
  }
  const pid_t pid = spawn_child_process(std::move(args));
  if (pid < 0) {
    log::error("cannot start a local agent", {{"model", agent.model}, {"error", "fork failed"}});
    schedule_restart(agent);
    return;
  }
  agent.pid = pid;
  const auto serial = agent.serial;
  watcher_.watch(pid, [this, serial](int status) { on_exit(serial, status); });
  log::info("local agent started", {{"model", agent.model},
                                    {"address", address_of(agent.port)},
                                    {"pid", pid},
                                    {"profile", agent.settings.profile}});
}

void LocalFleet::on_exit(std::uint64_t serial, int wait_status) {
  Agent* agent = find_serial(serial);
  if (agent == nullptr) {
    return;
  }
  agent->pid = -1;
  if (agent->retiring || stopping_) {
    log::info("local agent stopped",
              {{"model", agent->model}, {"address", address_of(agent->port)}});
    erase(serial);
    finish_stop_if_done();
    return;
  }
  log::warn("local agent exited; restarting", {{"model", agent->model},
                                               {"address", address_of(agent->port)},
                                               {"status", net::exit_code(wait_status)}});
  schedule_restart(*agent);
}

void LocalFleet::schedule_restart(Agent& agent) {
  const auto delay = std::min<std::chrono::seconds>(
      std::chrono::seconds(1) * (1u << std::min<std::uint32_t>(agent.restarts, 5)),
      kMaxRestartDelay);
  ++agent.restarts;
  log::info("local agent restart scheduled",
            {{"model", agent.model}, {"restart_in_s", delay.count()}});
  agent.restart_timer->expires_after(delay);
  const auto serial = agent.serial;
  agent.restart_timer->async_wait([this, serial](boost::system::error_code ec) {
    Agent* a = ec ? nullptr : find_serial(serial);
    if (a != nullptr && !a->retiring && !stopping_) {
      spawn(*a);
    }
  });
}

void LocalFleet::retire(Agent& agent) {
  agent.retiring = true;
  agent.restart_timer->cancel();
  // The fleet drains the replica and calls replica_removed once it is idle.
  fleet_.remove_local_replica(agent.replica);
}

void LocalFleet::replica_removed(scheduling::ReplicaId id) {
  auto it = std::find_if(agents_.begin(), agents_.end(),
                         [id](const auto& a) { return a->replica == id; });
  if (it == agents_.end()) {
    return;
  }
  Agent& agent = **it;
  agent.retiring = true;
  agent.restart_timer->cancel();
  if (agent.pid > 0) {
    terminate(agent);
  } else {
    erase(agent.serial);
  }
}

void LocalFleet::terminate(Agent& agent) {
  watcher_.terminate(agent.pid, stop_grace());
}

std::chrono::steady_clock::duration LocalFleet::stop_grace() const {
  return configs_->current().server.drain_timeout + kKillMargin;
}

LocalFleet::Agent* LocalFleet::find_serial(std::uint64_t serial) {
  for (const auto& agent : agents_) {
    if (agent->serial == serial) {
      return agent.get();
    }
  }
  return nullptr;
}

LocalFleet::Agent* LocalFleet::find_running(const std::string& model, std::uint32_t index) {
  for (const auto& agent : agents_) {
    if (!agent->retiring && agent->model == model && agent->index == index) {
      return agent.get();
    }
  }
  return nullptr;
}

void LocalFleet::erase(std::uint64_t serial) {
  agents_.erase(std::remove_if(agents_.begin(), agents_.end(),
                               [serial](const auto& a) { return a->serial == serial; }),
                agents_.end());
}

void LocalFleet::stop(std::function<void()> done) {
  if (done) {
    // A second caller (the drain deadline, then the drain's end) is told too.
    on_stopped_ = [first = std::move(on_stopped_), then = std::move(done)] {
      if (first) {
        first();
      }
      then();
    };
  }
  if (stopping_) {
    finish_stop_if_done();
    return;
  }
  stopping_ = true;
  for (auto& agent : agents_) {
    agent->restart_timer->cancel();
  }
  // Agents without a process (waiting for a restart) are done already.
  agents_.erase(
      std::remove_if(agents_.begin(), agents_.end(), [](const auto& a) { return a->pid <= 0; }),
      agents_.end());
  for (auto& agent : agents_) {
    terminate(*agent);
  }
  finish_stop_if_done();
}

void LocalFleet::finish_stop_if_done() {
  if (!stopping_ || !agents_.empty() || !on_stopped_) {
    return;
  }
  auto done = std::move(on_stopped_);
  on_stopped_ = nullptr;
  done();
}

void LocalFleet::kill_now() {
  stopping_ = true;
  for (auto& agent : agents_) {
    agent->restart_timer->cancel();
  }
  watcher_.kill_all();
}

}  // namespace fg::fleet
