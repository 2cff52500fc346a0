#include "orchestrator/app/gateway.hpp"

#include <csignal>
#include <cstdlib>
#include <sstream>

#include "common/log/log.hpp"
#include "orchestrator/proxy/client_session.hpp"

namespace fg::app {

namespace asio = boost::asio;

namespace {

std::vector<std::string> split_keys(const char* value) {
  std::vector<std::string> keys;
  std::stringstream in(value ? value : "");
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

const char* env_or_null(const std::string& name) {
  return name.empty() ? nullptr : std::getenv(name.c_str());
}

// Serves a public connection; a plain function (not a capturing coroutine lambda).
asio::awaitable<void> serve_public(proxy::ProxyContext* ctx, std::unique_ptr<net::Conn> conn) {
  return proxy::run_client_session(ctx, std::move(conn));
}

}  // namespace

Gateway::Gateway(config::Config config)
    : config_(std::move(config)),
      scheduler_(config_.routing.queue_max),
      broker_(io_.get_executor(), scheduler_),
      signals_(io_, SIGTERM, SIGINT),
      drain_timer_(io_) {
  upstream_tls_ = net::make_client_tls_context(config_.upstream.ca_file);
  if (config_.server.tls.enabled()) {
    public_tls_ = net::make_server_tls_context(config_.server.tls.cert, config_.server.tls.key);
  }

  proxy_ctx_.config = &config_;
  proxy_ctx_.broker = &broker_;
  proxy_ctx_.registry = &registry_;
  proxy_ctx_.upstream_tls = upstream_tls_.get();
  proxy_ctx_.sessions = &sessions_;
  proxy_ctx_.metrics = &metrics_;
  if (!config_.server.api_keys_env.empty()) {
    proxy_ctx_.api_keys = split_keys(env_or_null(config_.server.api_keys_env));
  }
  if (proxy_ctx_.api_keys.empty()) {
    log::warn("the public listener is open: no API keys are configured",
              {{"key", "server.api_keys_env"}, {"env", config_.server.api_keys_env}});
  }
  if (const char* key = env_or_null(config_.upstream.api_key_env); key && *key) {
    proxy_ctx_.upstream_authorization = std::string("Bearer ") + key;
  }

  admin_ctx_.config = &config_;
  admin_ctx_.registry = &registry_;
  admin_ctx_.scheduler = &scheduler_;
  admin_ctx_.metrics = &metrics_;
  metrics_.before_scrape = [this] {
    for (const auto& model : config_.models) {
      metrics_.set_queue_depth(model.name, static_cast<double>(scheduler_.queue_depth(model.name)));
      metrics_.set_slots(model.name, scheduler_.busy_slots(model.name),
                         scheduler_.free_slots(model.name));
      double known = 0;
      for (auto* replica : registry_.all()) {
        known += replica->model == model.name ? 1 : 0;
      }
      metrics_.set_replicas(model.name, known, model.desired_replicas());
    }
  };

  build_fleet();

  public_listener_ = std::make_unique<net::Listener>(
      io_.get_executor(), config_.server.listen, public_tls_,
      [this](std::unique_ptr<net::Conn> conn) {
        return serve_public(&proxy_ctx_, std::move(conn));
      },
      "public");
  admin_listener_ = std::make_unique<net::Listener>(
      io_.get_executor(), config_.admin.listen, nullptr,
      [this](std::unique_ptr<net::Conn> conn) {
        return admin::run_admin_session(&admin_ctx_, std::move(conn));
      },
      "admin");
}

void Gateway::build_fleet() {
  for (const auto& model : config_.models) {
    scheduler_.add_model(model.name);
    for (const auto& endpoint : model.endpoints) {
      auto& replica = registry_.add(model.name, endpoint.url, endpoint.slots);
      broker_.deliver(scheduler_.add_replica(replica.id, model.name, endpoint.slots));
      log::info("replica added", {{"replica", replica.name},
                                  {"model", model.name},
                                  {"url", endpoint.url.to_string()},
                                  {"slots", endpoint.slots}});
    }
  }
}

void Gateway::begin_shutdown(int signal_number) {
  if (shutting_down_) {
    log::warn("second signal: stopping now", {{"signal", signal_number}});
    sessions_.close_all();
    io_.stop();
    return;
  }
  shutting_down_ = true;
  log::info("shutting down: draining in-flight requests",
            {{"signal", signal_number},
             {"open_connections", sessions_.size()},
             {"drain_timeout_ms", config_.server.drain_timeout.count()}});
  public_listener_->stop();
  sessions_.on_drained = [this] {
    log::info("drained: every request finished");
    admin_listener_->stop();
    drain_timer_.cancel();
    io_.stop();
  };
  sessions_.begin_drain();
  drain_timer_.expires_after(config_.server.drain_timeout);
  drain_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) {
      return;
    }
    log::warn("drain deadline passed: closing the remaining connections",
              {{"open_connections", sessions_.size()}});
    sessions_.close_all();
    io_.stop();
  });
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) {
      begin_shutdown(sig);
    }
  });
}

int Gateway::run() {
  public_listener_->start();
  admin_listener_->start();
  log::info("listening", {{"listener", "public"},
                          {"address", config_.server.listen.host + ":" +
                                          std::to_string(public_listener_->port())},
                          {"tls", config_.server.tls.enabled()}});
  log::info("listening", {{"listener", "admin"},
                          {"address", config_.admin.listen.host + ":" +
                                          std::to_string(admin_listener_->port())}});
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) {
      begin_shutdown(sig);
    }
  });
  io_.run();
  log::info("stopped");
  return 0;
}

}  // namespace fg::app
