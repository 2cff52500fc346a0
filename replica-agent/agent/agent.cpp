#include "replica-agent/agent/agent.hpp"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <stdexcept>

#include "common/log/log.hpp"
#include "common/util/text.hpp"
#include "replica-agent/agent/session.hpp"
#include "replica-agent/engines/engine.hpp"
#include "replica-agent/model/fetcher.hpp"
#include "replica-agent/registration/ends_at.hpp"
#include "replica-agent/registration/registrar.hpp"
#include "replica-agent/tunnel/tunnel.hpp"
#include "replica-agent/tunnel/tunnel_key.hpp"

namespace fg::agent {

namespace asio = boost::asio;

namespace {

// A plain function (not a capturing coroutine lambda, which GCC 12 can miscompile).
asio::awaitable<void> serve_connection(const net::SessionHooks* hooks,
                                       std::unique_ptr<net::Conn> conn) {
  return net::serve_session(hooks, std::move(conn));
}

// The value of a variable a key names; empty or unset is a start-up error naming the key, and so
// is a control character (CR or LF in a header value would add header lines).
// The value of a secret's variable; unset or empty is an error when required, else "".
std::string env_secret(const std::string& variable, const char* key, bool required = true) {
  const char* value = std::getenv(variable.c_str());
  if (value == nullptr || *value == '\0') {
    if (!required) {
      return "";
    }
    throw std::runtime_error(std::string(key) + ": the environment variable " + variable +
                             " is not set or empty");
  }
  if (has_control_character(value)) {
    throw std::runtime_error(std::string(key) + ": the environment variable " + variable +
                             " contains a control character (CR, LF, tab or another below 0x20, "
                             "or DEL); a secret must be printable text");
  }
  return value;
}

// Open connections the agent takes: its clients are a gateway or two (at most a connection per
// slot, a few pooled ones and a probe each), so one address may hold half, and a flood from
// elsewhere cannot take every descriptor.
constexpr net::ConnectionCaps kAgentCaps{1024, 512};
// Descriptors kept for engine connections (one per slot), the engine child and files.
constexpr std::uint64_t kAgentReserve = kMaxAgentSlots + 64;

// The caps, lowered (with a warning) when the descriptor limit cannot hold them.
net::ConnectionCaps agent_caps(std::uint64_t descriptor_limit) {
  net::ConnectionCaps caps = kAgentCaps;
  if (descriptor_limit >= caps.total + kAgentReserve) {
    return caps;
  }
  const std::uint64_t fits =
      descriptor_limit > kAgentReserve + 16 ? descriptor_limit - kAgentReserve : 16;
  caps.total = static_cast<std::uint32_t>(fits);
  caps.per_address = std::min(caps.per_address, caps.total);
  log::warn("few file descriptors: fewer client connections are allowed",
            {{"descriptor_limit", descriptor_limit},
             {"max_connections", caps.total},
             {"max_connections_per_ip", caps.per_address}});
  return caps;
}

// When this phone's deployment ends: FLEETGATE_DEPLOYMENT_ENDS_AT (RFC 3339) when set, else
// deployment.window from now. A malformed variable stops the start.
std::string deployment_ends_at(const AgentConfig& config) {
  const char* value = std::getenv(kDeploymentEndsAtEnv);
  if (value != nullptr && *value != '\0') {
    auto at = parse_rfc3339(value);
    if (!at) {
      throw std::runtime_error(std::string("the environment variable ") + kDeploymentEndsAtEnv +
                               " must be an RFC 3339 time such as 2026-12-04T18:00:00Z");
    }
    return format_rfc3339_utc(*at);
  }
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
  return format_rfc3339_utc(
      now + std::chrono::duration_cast<std::chrono::seconds>(config.deployment.window).count());
}

std::size_t initial_slots(const AgentConfig& config, const sim::SimProfile* profile) {
  if (config.slots) {
    return *config.slots;
  }
  // A proxied engine's slots come from its /props once it answers; 1 until then.
  return profile != nullptr ? profile->slots : 1;
}

}  // namespace

Agent::Agent(AgentConfig config) : signals_(io_, SIGTERM, SIGINT), drain_timer_(io_) {
  const sim::SimProfile* profile = nullptr;
  if (config.engine.kind == EngineKind::sim) {
    profile = sim::find_profile(config.engine.profile);
    if (profile == nullptr) {
      throw std::runtime_error("unknown sim profile '" + config.engine.profile + "'");
    }
  }
  const std::size_t slots = initial_slots(config, profile);
  if (config.model_file.enabled()) {
    config.engine.command = expand_model_path(config.engine.command, config.model_file.path);
  }
  ctx_ = std::make_unique<AgentContext>(std::move(config), profile, slots);
  AgentContext* ctx = ctx_.get();
  const AgentConfig& cfg = ctx->config;
  if (!cfg.api_key_env.empty()) {
    ctx->api_key = BearerKeys({env_secret(cfg.api_key_env, "api_key_env")});
  }
  std::string registration_token;
  if (cfg.gateway.enabled()) {
    registration_token = env_secret(cfg.gateway.token_env, "gateway.token_env");
  }
  std::string tunnel_key;
  std::string bridge_socket;
  if (cfg.tunnel.kind == TunnelKind::acurast) {
    // Unset: a deployment of several phones (one environment for all) cannot share a key, so
    // each phone makes its own; its URL is then new at each start.
    tunnel_key = env_secret(cfg.tunnel.key_env, "tunnel.key_env", false);
    if (tunnel_key.empty()) {
      tunnel_key = make_tunnel_key();
      log::info("tunnel key: the variable is not set, made a new one (a new URL at each start)",
                {{"variable", cfg.tunnel.key_env}});
    }
    bridge_socket = env_secret("BRIDGE_SOCKET", "tunnel.kind acurast");
  }
  ctx->ends_at = deployment_ends_at(cfg);
  ctx->device = read_device_facts();
  const bool engine_https = cfg.engine.kind != EngineKind::sim && cfg.engine.url.tls();
  if (engine_https || cfg.gateway.url.rfind("https:", 0) == 0 ||
      cfg.model_file.url.rfind("https:", 0) == 0) {
    ctx->client_tls = net::make_client_tls_context("");
  }
  std::shared_ptr<asio::ssl::context> server_tls;
  if (cfg.tls.enabled()) {
    server_tls = net::make_server_tls_context(cfg.tls.cert, cfg.tls.key);
  }
  engine_ = make_engine(io_.get_executor(), ctx);
  if (cfg.gateway.enabled()) {
    registrar_ =
        std::make_unique<Registrar>(io_.get_executor(), ctx, std::move(registration_token));
  }
  if (cfg.model_file.enabled()) {
    model_ = std::make_unique<ModelFetcher>(io_.get_executor(), ctx);
  }
  tunnel_ = make_tunnel(io_.get_executor(), ctx, std::move(tunnel_key), std::move(bridge_socket));
  hooks_ = agent_session_hooks(
      ctx, AgentServices{engine_.get(), registrar_.get(), model_.get(), &off_thread_});
  listener_ = std::make_unique<net::Listener>(
      io_.get_executor(), cfg.listen, server_tls,
      [this](std::unique_ptr<net::Conn> conn) {
        return serve_connection(&hooks_, std::move(conn));
      },
      "agent", agent_caps(net::raise_descriptor_limit()));
}

Agent::~Agent() = default;

void Agent::wait_for_signal() {
  signals_.async_wait([this](boost::system::error_code ec, int sig) {
    if (!ec) {
      begin_shutdown(sig);
    }
  });
}

void Agent::begin_shutdown(int signal_number) {
  if (shutting_down_) {
    log::warn("second signal: stopping now", {{"signal", signal_number}});
    ctx_->sessions.close_all();
    if (engine_) {
      engine_->kill_now();
    }
    io_.stop();
    return;
  }
  shutting_down_ = true;
  // The listener stays open: a request arriving now gets a clear 503 (retry elsewhere) rather
  // than a refused connection.
  log::info("shutting down: finishing in-flight requests",
            {{"signal", signal_number},
             {"in_flight", ctx_->sessions.busy()},
             {"drain_timeout_ms", ctx_->config.drain_timeout.count()}});
  drain_timer_.expires_after(ctx_->config.drain_timeout);
  drain_timer_.async_wait([this](boost::system::error_code ec) {
    if (ec) {
      return;
    }
    log::warn("drain deadline passed: closing the remaining connections",
              {{"in_flight", ctx_->sessions.busy()}});
    ctx_->sessions.close_all();
    finish();
  });
  wait_for_signal();
  ctx_->sessions.begin_drain([this] {
    log::info("drained: every request finished");
    finish();
  });
}

void Agent::finish() {
  if (finishing_) {
    return;
  }
  finishing_ = true;
  listener_->stop();
  drain_timer_.cancel();
  if (model_) {
    model_->stop();
  }
  // The tunnel is closed first (no new traffic can arrive through it), then the gateway told.
  auto deregister_and_stop = [this] {
    tunnel_->stop([this] {
      if (registrar_) {
        registrar_->stop_and_deregister([this] { io_.stop(); });
      } else {
        io_.stop();
      }
    });
  };
  // The engine's exit is awaited on the io thread (it may take its SIGKILL grace).
  engine_->stop(deregister_and_stop);
}

void Agent::maybe_register() {
  if (registrar_ && tunnel_ready_ && model_ready_ && !registering_ && !finishing_) {
    registering_ = true;
    registrar_->start();
  }
}

int Agent::run() {
  listener_->start();
  const auto& cfg = ctx_->config;
  nlohmann::json profile = ctx_->profile ? nlohmann::json(ctx_->profile->name) : nullptr;
  nlohmann::json time_scale = ctx_->profile ? nlohmann::json(cfg.engine.time_scale) : nullptr;
  nlohmann::json engine_url =
      ctx_->profile ? nlohmann::json(nullptr) : nlohmann::json(cfg.engine.url.to_string());
  log::write_always(log::Level::info, "listening",
                    {{"listener", "agent"},
                     {"address", net::HostPort{cfg.listen.host, listener_->port()}.to_string()},
                     {"tls", cfg.tls.enabled()},
                     {"model", cfg.model},
                     {"engine", to_string(cfg.engine.kind)},
                     {"profile", profile},
                     {"time_scale", time_scale},
                     {"engine_url", engine_url},
                     {"slots", ctx_->admission.total()},
                     {"api_key", !ctx_->api_key.empty()},
                     {"gateway", cfg.gateway.enabled() ? cfg.gateway.url : ""},
                     {"tunnel", to_string(cfg.tunnel.kind)},
                     {"model_file", cfg.model_file.enabled() ? cfg.model_file.path : ""}});
  if (model_) {
    model_->start([this](bool ok) {
      if (!ok || finishing_) {
        return;  // stays "loading" with the reason in /health; never registers
      }
      model_ready_ = true;
      engine_->start();
      maybe_register();
    });
  } else {
    model_ready_ = true;
    engine_->start();
  }
  tunnel_->start(listener_->port(), [this] {
    tunnel_ready_ = true;
    maybe_register();
  });
  wait_for_signal();
  io_.run();
  // Connections still open (drain deadline, second signal) are destroyed with io_; they must not
  // call back into the listener then.
  ctx_->sessions.forget_drain_callback();
  if (engine_) {
    engine_->kill_now();
  }
  log::info("stopped");
  return 0;
}

}  // namespace fg::agent
