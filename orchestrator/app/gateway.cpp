#include "orchestrator/app/gateway.hpp"

#include <unistd.h>
#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>

#include "common/log/log.hpp"
#include "common/util/text.hpp"
#include "orchestrator/proxy/client_session.hpp"
#include "orchestrator/storage/open_storage.hpp"

namespace fg::app {

namespace asio = boost::asio;

namespace {

// This gateway's name in batch line leases: host, process and a random part (a restarted
// process is another instance).
std::string instance_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::random_device rd;
  return std::string(host) + "/" + std::to_string(::getpid()) + "/" + std::to_string(rd() % 100000);
}

std::vector<std::string> split_keys(const std::string& value) {
  std::vector<std::string> keys;
  std::stringstream in(value);
  std::string key;
  while (std::getline(in, key, ',')) {
    auto first = key.find_first_not_of(" \t");
    auto last = key.find_last_not_of(" \t");
    if (first != std::string::npos) {
      keys.push_back(key.substr(first, last - first + 1));
    }
  }
  return keys;
}

// The secret in the variable a key names ("" when unset). One with a control character is a
// start-up error naming the variable: CR or LF in a header value would add header lines.
std::string secret_from_env(const std::string& variable, const char* key) {
  const char* value = variable.empty() ? nullptr : std::getenv(variable.c_str());
  if (value == nullptr) {
    return {};
  }
  if (has_control_character(value)) {
    throw std::runtime_error(std::string(key) + ": the environment variable " + variable +
                             " contains a control character (CR, LF, tab or another below 0x20, "
                             "or DEL); a secret must be printable text");
  }
  return value;
}

// The admin listener's own cap, independent of server.max_connections: a flood of the public
// listener never starves registrations, probes of readiness or /metrics.
constexpr net::ConnectionCaps kAdminCaps{256, 64};
// Descriptors kept besides client connections: listeners, log and configuration files, the
// resolver, child processes' pipes, and connections to phones and their probes.
constexpr std::uint64_t kBaseReserve = 256;
constexpr std::uint64_t kPerLocalAgent = 4;

net::ConnectionCaps public_caps(const config::Config& config) {
  return {config.server.max_connections, config.server.max_connections_per_ip};
}

// Every client connection the caps allow, plus the reserve: for each replica the configuration
// asks for, one connection per slot, its pooled idle ones and a probe.
net::DescriptorBudget descriptor_budget(const config::Config& config) {
  net::DescriptorBudget budget;
  budget.public_connections = config.server.max_connections;
  budget.admin_connections = kAdminCaps.total;
  budget.reserve = kBaseReserve;
  for (const auto& model : config.models) {
    std::uint64_t slots = model.slots;
    for (const auto& endpoint : model.endpoints) {
      slots = std::max<std::uint64_t>(slots, endpoint.slots);
    }
    budget.reserve += model.desired_replicas() * (slots + config.upstream.max_idle_per_replica + 1);
    if (model.local) {
      budget.reserve += model.local->count * kPerLocalAgent;
    }
  }
  return budget;
}

// Serves a public connection; a plain function (not a capturing coroutine lambda).
asio::awaitable<void> serve_public(const net::SessionHooks* hooks,
                                   std::unique_ptr<net::Conn> conn) {
  return net::serve_session(hooks, std::move(conn));
}

}  // namespace

Gateway::Gateway(config::Config config, std::string config_path)
    : configs_(std::move(config)),
      config_path_(std::move(config_path)),
      scheduler_(configs_.current().routing.queue_max,
                 scheduling::routing_options(configs_.current().routing,
                                             configs_.current().server.api_keys),
                 std::random_device{}()),
      broker_(scheduler_),
      signals_(io_, SIGTERM, SIGINT),
      hangup_(io_, SIGHUP),
      drain_timer_(io_),
      rate_timer_(io_) {
  const config::Config& current = configs_.current();
  descriptor_limit_ = net::raise_descriptor_limit();
  if (auto problem = net::check_descriptor_budget(descriptor_budget(current), descriptor_limit_,
                                                  "server.max_connections")) {
    throw std::runtime_error(*problem);
  }
  upstream_tls_ = net::make_client_tls_context(current.upstream.ca_file);
  if (current.server.tls.enabled()) {
    public_tls_ = net::make_server_tls_context(current.server.tls.cert, current.server.tls.key);
  }
  if (current.admin.tls.enabled()) {
    admin_tls_ = net::make_server_tls_context(current.admin.tls.cert, current.admin.tls.key);
  }

  proxy_ctx_.configs = &configs_;
  proxy_ctx_.broker = &broker_;
  proxy_ctx_.registry = &registry_;
  proxy_ctx_.upstream_tls = upstream_tls_.get();
  proxy_ctx_.sessions = &sessions_;
  proxy_ctx_.body_budget = &body_budget_;
  proxy_ctx_.metrics = &metrics_;
  proxy_ctx_.off_thread = &off_thread_;
  proxy_ctx_.watch_starter = &watch_starter_;
  {
    // Named keys first, then the anonymous ones of api_keys_env; key_info follows the same order.
    std::vector<std::string> keys;
    for (std::size_t i = 0; i < current.server.api_keys.size(); ++i) {
      const auto& named = current.server.api_keys[i];
      const std::string where = "server.api_keys[" + std::to_string(i) + "].key_env";
      std::string key = secret_from_env(named.key_env, where.c_str());
      if (key.empty()) {
        throw std::runtime_error(where + ": the environment variable " + named.key_env +
                                 " is unset or empty; it must hold the key of '" + named.name +
                                 "'");
      }
      keys.push_back(std::move(key));
      proxy_ctx_.key_info.push_back({named.name, named.priority});
    }
    std::size_t anonymous = 0;
    for (auto& key :
         split_keys(secret_from_env(current.server.api_keys_env, "server.api_keys_env"))) {
      keys.push_back(std::move(key));
      proxy_ctx_.key_info.push_back({"api_keys_env#" + std::to_string(++anonymous), std::nullopt});
    }
    proxy_ctx_.api_keys = BearerKeys(keys);
  }
  proxy_ctx_.prompt_key =
      (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  if (proxy_ctx_.api_keys.empty()) {
    log::warn("the public listener is open: no API keys are configured",
              {{"key", "server.api_keys_env"}, {"env", current.server.api_keys_env}});
  }
  if (auto key = secret_from_env(current.upstream.api_key_env, "upstream.api_key_env");
      !key.empty()) {
    proxy_ctx_.upstream_authorization = "Bearer " + key;
  }
  public_hooks_ = proxy::public_session_hooks(&proxy_ctx_);
  if (current.batch.enabled) {
    // A start-up problem: fatal, naming storage.path (or the backend's key).
    batch_ = std::make_unique<batch::BatchService>(
        io_.get_executor(), &proxy_ctx_, storage::open_storage(current.storage), instance_name());
    proxy_ctx_.batch = batch_.get();
  }

  admin_ctx_.configs = &configs_;
  admin_ctx_.registry = &registry_;
  admin_ctx_.scheduler = &scheduler_;
  admin_ctx_.metrics = &metrics_;
  admin_ctx_.rates = &rates_;
  fleet_ = std::make_unique<fleet::FleetManager>(
      io_.get_executor(), &configs_, registry_, scheduler_, metrics_, upstream_tls_.get(),
      proxy_ctx_.upstream_authorization,
      [this](const std::vector<scheduling::Grant>& grants) { broker_.deliver(grants); },
      [this](const std::vector<scheduling::WaiterId>& waiters) { broker_.abandon(waiters); });
  proxy_ctx_.fleet = fleet_.get();
  local_fleet_ = std::make_unique<fleet::LocalFleet>(io_.get_executor(), &configs_, *fleet_);
  admin_ctx_.fleet = fleet_.get();
  admin_ctx_.admin_token = secret_from_env(current.admin.token_env, "admin.token_env");
  admin_ctx_.registration_token =
      secret_from_env(current.registration.token_env, "registration.token_env");
  if (admin_ctx_.registration_token.empty() && !current.registration.token_env.empty()) {
    log::warn("registration is off: its token variable is empty or unset",
              {{"key", "registration.token_env"}, {"env", current.registration.token_env}});
  }
  if (admin_ctx_.admin_token.empty()) {
    log::warn("the admin API (/admin/v1) is open: no admin token is configured",
              {{"key", "admin.token_env"}});
  }
  metrics_.before_scrape = [this] {
    for (const auto& model : configs_.current().models) {
      metrics_.set_queue_depth(model.name, static_cast<double>(scheduler_.queue_depth(model.name)));
      metrics_.set_slots(model.name, scheduler_.busy_slots(model.name),
                         scheduler_.free_slots(model.name));
    }
    metrics_.set_open_connections("public", public_listener_->open_connections());
    metrics_.set_open_connections("admin", admin_listener_->open_connections());
    fleet_->update_metrics();
    if (batch_) {
      batch_->update_metrics();
    }
  };

  public_listener_ = std::make_unique<net::Listener>(
      io_.get_executor(), current.server.listen, public_tls_,
      [this](std::unique_ptr<net::Conn> conn) {
        return serve_public(&public_hooks_, std::move(conn));
      },
      "public", public_caps(current));
  public_listener_->on_refused = [this](net::Admission why) {
    metrics_.connection_rejected("public", net::to_string(why));
  };
  admin_listener_ = std::make_unique<net::Listener>(
      io_.get_executor(), current.admin.listen, admin_tls_,
      [this](std::unique_ptr<net::Conn> conn) {
        return admin::run_admin_session(&admin_ctx_, std::move(conn));
      },
      "admin", kAdminCaps);
  admin_listener_->on_refused = [this](net::Admission why) {
    metrics_.connection_rejected("admin", net::to_string(why));
  };
}

Gateway::~Gateway() {
  sessions_.forget_drain_callback();
  if (batch_) {
    batch_->close_timer();
  }
  // Pooled replica connections are sockets: close them while the io_context still exists.
  for (const auto& replica : registry_.all()) {
    replica->idle.clear();
  }
}

void Gateway::reload() {
  if (config_path_.empty()) {
    log::warn("SIGHUP ignored: the gateway runs on the embedded configuration (no file to reread)");
    return;
  }
  config::Config next;
  try {
    next = config::load_config_file(config_path_);
  } catch (const config::ConfigError& e) {
    log::error("reload refused: the new configuration is invalid; keeping the old one",
               {{"error", e.what()}});
    return;
  }
  const config::Config& current = configs_.current();
  if (next.server.listen.to_string() != current.server.listen.to_string() ||
      next.admin.listen.to_string() != current.admin.listen.to_string() ||
      next.server.tls.cert != current.server.tls.cert ||
      next.server.tls.key != current.server.tls.key ||
      next.admin.tls.cert != current.admin.tls.cert ||
      next.admin.tls.key != current.admin.tls.key) {
    log::warn("listen addresses and TLS files change only on restart; the rest is applied");
    next.server.listen = current.server.listen;
    next.admin.listen = current.admin.listen;
    next.server.tls = current.server.tls;
    next.admin.tls = current.admin.tls;
  }
  // Keys read from the environment at start stay as they were.
  next.server.api_keys_env = current.server.api_keys_env;
  next.server.api_keys = current.server.api_keys;
  next.upstream.api_key_env = current.upstream.api_key_env;
  next.upstream.ca_file = current.upstream.ca_file;
  next.admin.token_env = current.admin.token_env;
  next.registration.token_env = current.registration.token_env;
  if (auto problem = net::check_descriptor_budget(descriptor_budget(next), descriptor_limit_,
                                                  "server.max_connections")) {
    log::error("reload refused: the new connection caps do not fit; keeping the old configuration",
               {{"error", *problem}});
    return;
  }
  const std::size_t models = next.models.size();
  configs_.replace(std::move(next));
  public_listener_->set_caps(public_caps(configs_.current()));
  // Named keys are read at start only (their priority too); routing.* applies at once.
  broker_.set_options(
      scheduling::routing_options(configs_.current().routing, configs_.current().server.api_keys));
  fleet_->reload();
  log::info("configuration reloaded", {{"file", config_path_}, {"models", models}});
}

void Gateway::wait_for_hangup() {
  hangup_.async_wait([this](boost::system::error_code ec, int) {
    if (ec || shutting_down_) {
      return;
    }
    reload();
    wait_for_hangup();
  });
}

void Gateway::sample_rates() {
  std::map<std::string, admin::Totals> totals;
  const auto& counted = metrics_.totals();
  for (const auto& model : configs_.current().models) {
    auto it = counted.find(model.name);
    totals[model.name] = it == counted.end()
                             ? admin::Totals{}
                             : admin::Totals{it->second.requests, it->second.tokens};
  }
  rates_.sample(std::chrono::steady_clock::now(), totals);
  rate_timer_.expires_after(admin::kRateInterval);
  rate_timer_.async_wait([this](boost::system::error_code ec) {
    if (!ec) {
      sample_rates();
    }
  });
}

void Gateway::begin_shutdown(int signal_number) {
  if (shutting_down_) {
    log::warn("second signal: stopping now", {{"signal", signal_number}});
    sessions_.close_all();
    local_fleet_->kill_now();
    io_.stop();
    return;
  }
  shutting_down_ = true;
  const auto drain_timeout = configs_.current().server.drain_timeout;
  // Close the public listener before saying so: whoever reads the log line (an operator, a
  // test) may connect at once and must be refused, not queued in a backlog nobody accepts.
  public_listener_->stop();
  log::info("shutting down: draining in-flight requests",
            {{"signal", signal_number},
             {"open_connections", sessions_.size()},
             {"drain_timeout_ms", drain_timeout.count()}});
  if (batch_) {
    batch_->stop();  // lines still running are run again by the next start
  }
  fleet_->stop();
  hangup_.cancel();
  drain_timer_.expires_after(drain_timeout);
  drain_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) {
      return;
    }
    log::warn("drain deadline passed: closing the remaining connections",
              {{"open_connections", sessions_.size()}});
    sessions_.close_all();
    local_fleet_->stop([this] { io_.stop(); });
  });
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) {
      begin_shutdown(sig);
    }
  });
  // Last: it may call back at once (nothing in flight).
  sessions_.begin_drain([this] {
    log::info("drained: every request finished");
    admin_listener_->stop();
    drain_timer_.cancel();
    local_fleet_->stop([this] { io_.stop(); });
  });
}

int Gateway::run() {
  broker_.start(io_.get_executor());
  fleet_->start();
  try {
    local_fleet_->start();
  } catch (const std::exception& e) {
    log::error("cannot start the local fleet", {{"error", e.what()}});
    local_fleet_->kill_now();
    return 1;
  }
  public_listener_->start();
  admin_listener_->start();
  if (batch_) {
    batch_->start();
  }
  const config::Config& current = configs_.current();
  log::write_always(
      log::Level::info, "listening",
      {{"listener", "public"},
       {"address", current.server.listen.host + ":" + std::to_string(public_listener_->port())},
       {"tls", current.server.tls.enabled()}});
  log::write_always(
      log::Level::info, "listening",
      {{"listener", "admin"},
       {"address", current.admin.listen.host + ":" + std::to_string(admin_listener_->port())},
       {"tls", current.admin.tls.enabled()}});
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) {
      begin_shutdown(sig);
    }
  });
  wait_for_hangup();
  sample_rates();
  io_.run();
  local_fleet_->kill_now();
  log::info("stopped");
  return 0;
}

}  // namespace fg::app
