#include "replica-agent/registration/registrar.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/log/log.hpp"
#include "common/net/server.hpp"
#include "common/util/json.hpp"
#include "replica-agent/core/backoff.hpp"

namespace fg::agent {

namespace asio = boost::asio;

namespace {

constexpr auto kCallTimeout = std::chrono::seconds(10);
constexpr auto kDeregisterTimeout = std::chrono::seconds(5);
constexpr std::chrono::milliseconds kMinInterval{200};
constexpr std::string_view kSecretHeader = "Fleetgate-Replica-Secret";
constexpr std::size_t kMaxSecret = 256;

// A secret goes into a header of our own requests: printable ASCII, no spaces, bounded.
bool usable_secret(const std::string& s) {
  if (s.empty() || s.size() > kMaxSecret) {
    return false;
  }
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return false;
    }
  }
  return true;
}

double unit_draw(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Waits d; false when cancelled.
asio::awaitable<bool> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return !ec;
}

std::string describe(const HttpResult& r) {
  return r.answered ? "HTTP " + std::to_string(r.status) : r.error;
}

}  // namespace

Registrar::Registrar(asio::any_io_executor executor, AgentContext* ctx, std::string token)
    : executor_(std::move(executor)),
      ctx_(ctx),
      token_(std::move(token)),
      gateway_(*net::parse_url(ctx->config.gateway.url)),
      rng_(std::random_device{}()) {}

Registrar::~Registrar() {
  stop_.emit(asio::cancellation_type::terminal);
}

void Registrar::start() {
  running_ = true;
  asio::co_spawn(executor_, loop(this),
                 asio::bind_cancellation_slot(stop_.slot(), [](std::exception_ptr e) {
                   if (!e) {
                     return;
                   }
                   try {
                     std::rethrow_exception(e);
                   } catch (const std::exception& ex) {
                     log::error("task failed", {{"task", "registration"}, {"error", ex.what()}});
                   }
                 }));
}

std::string Registrar::registration_body() const {
  nlohmann::ordered_json body{
      {"url", ctx_->public_url},
      {"model", ctx_->config.model},
      {"slots", ctx_->admission.total()},
      {"agent_version", FLEETGATE_VERSION},
      {"device", device_json(ctx_->device)},
  };
  // Acurast phones: which deployment, and when it ends (the gateway plans renewals on it).
  if (!ctx_->deployment_id.empty()) {
    body["deployment_id"] = ctx_->deployment_id;
  }
  if (!ctx_->ends_at.empty()) {
    body["ends_at"] = ctx_->ends_at;
  }
  return body.dump();
}

HttpHeaders Registrar::identity() const {
  if (secret_.empty()) {
    return {};
  }
  return {{std::string(kSecretHeader), secret_}};
}

void Registrar::forget_registration() {
  id_.clear();
  secret_.clear();
}

asio::awaitable<bool> Registrar::register_once(Registrar* self) {
  const auto slots = static_cast<std::uint32_t>(self->ctx_->admission.total());
  const std::string url = self->ctx_->public_url;
  std::string body = self->registration_body();
  std::string path = "/admin/v1/replicas/register";
  // An update of the registration this agent holds (same id) needs its secret.
  auto r = co_await http_call(self->gateway_, "POST", path, self->token_, body,
                              self->ctx_->client_tls.get(), kCallTimeout, self->identity());
  if (r.answered && r.status == 200) {
    auto doc = parse_network_json(r.body);
    auto id = doc.is_object() ? doc.find("id") : doc.end();
    if (doc.is_object() && id != doc.end() && id->is_string() && !id->get<std::string>().empty()) {
      self->id_ = id->get<std::string>();
      self->secret_.clear();
      if (auto secret = doc.find("secret"); secret != doc.end() && secret->is_string()) {
        if (usable_secret(secret->get<std::string>())) {
          self->secret_ = secret->get<std::string>();
        } else {
          log::error("the gateway sent an unusable replica secret; heartbeats will be refused",
                     {{"gateway", self->gateway_.to_string()}});
        }
      }
      self->registered_slots_ = slots;
      self->registered_url_ = url;
      if (auto s = doc.find("heartbeat_interval_s"); s != doc.end() && s->is_number()) {
        auto ms = std::chrono::milliseconds(static_cast<std::int64_t>(s->get<double>() * 1000));
        self->interval_ = std::max(ms, kMinInterval);
      }
      self->failures_ = 0;
      log::info("registered with the gateway",
                {{"gateway", self->gateway_.to_string()},
                 {"id", self->id_},
                 {"url", self->ctx_->public_url},
                 {"slots", slots},
                 {"heartbeat_interval_ms", self->interval_.count()}});
      co_return true;
    }
  }
  // 4xx: the gateway refused (token, URL, model); retrying with back-off lets an operator fix
  // the gateway's configuration without restarting the phone. 409 is expected after a restart:
  // this agent's previous registration holds the URL until it misses its heartbeats.
  const bool refused = r.answered && r.status >= 400 && r.status < 500 && r.status != 409;
  const auto level = refused ? log::Level::error : log::Level::warn;
  nlohmann::json reason = r.answered ? nlohmann::json(r.body.substr(0, 300)) : nullptr;
  log::write(level, "registration failed",
             {{"gateway", self->gateway_.to_string()},
              {"error", describe(r)},
              {"answer", reason},
              {"attempt", self->failures_ + 1}});
  co_return false;
}

asio::awaitable<void> Registrar::loop(Registrar* self) {
  // Stopping cancels whatever the loop awaits; it then returns quietly rather than throwing.
  co_await asio::this_coro::throw_if_cancelled(false);
  for (;;) {
    if (self->id_.empty()) {
      if (!co_await register_once(self)) {
        auto delay = backoff_delay(self->failures_++, unit_draw(self->rng_));
        if (!co_await sleep_for(delay)) {
          co_return;
        }
        continue;
      }
    }
    // After failed heartbeats the next one follows the back-off, not the interval.
    const auto wait = self->failures_ == 0
                          ? self->interval_
                          : backoff_delay(self->failures_ - 1, unit_draw(self->rng_));
    if (!co_await sleep_for(wait)) {
      co_return;
    }
    if (self->ctx_->admission.total() != self->registered_slots_) {
      // Registering again with the secret updates the same entry.
      log::info("slot count changed: registering again",
                {{"slots", self->ctx_->admission.total()}});
      if (!co_await register_once(self)) {
        ++self->failures_;
      }
      continue;
    }
    if (self->ctx_->public_url != self->registered_url_) {
      // The tunnel came back with another URL. The old one died with the old tunnel: end its
      // registration, then register the new URL afresh (the gateway looks replicas up by URL, so
      // it is a new replica, challenged before it gets traffic).
      log::info("the public URL changed: registering again",
                {{"was", self->registered_url_}, {"url", self->ctx_->public_url}});
      co_await deregister_once(self);  // when it fails, the old entry misses its heartbeats
      continue;
    }
    std::string path = "/admin/v1/replicas/" + self->id_ + "/heartbeat";
    std::string no_body;
    auto r = co_await http_call(self->gateway_, "POST", path, self->token_, no_body,
                                self->ctx_->client_tls.get(), kCallTimeout, self->identity());
    if (r.answered && r.status == 200) {
      if (self->failures_ != 0) {
        log::info("gateway reachable again", {{"gateway", self->gateway_.to_string()}});
      }
      self->failures_ = 0;
      continue;
    }
    if (r.answered && r.status == 404) {
      log::warn("the gateway does not know this replica (restarted?): registering again",
                {{"id", self->id_}});
      self->forget_registration();
      self->failures_ = 0;
      continue;
    }
    if (r.answered && r.status == 403) {
      log::error(
          "the gateway refused this replica's secret (its registration was taken over?): "
          "registering again",
          {{"id", self->id_}});
      self->forget_registration();
      continue;
    }
    ++self->failures_;
    log::warn("heartbeat failed", {{"gateway", self->gateway_.to_string()},
                                   {"id", self->id_},
                                   {"error", describe(r)},
                                   {"failures", self->failures_}});
  }
}

void Registrar::stop_and_deregister(std::function<void()> done) {
  if (running_) {
    stop_.emit(asio::cancellation_type::terminal);
    running_ = false;
  }
  if (id_.empty()) {
    done();
    return;
  }
  net::spawn_logged(executor_, deregister(this, std::move(done)), "deregister");
}

asio::awaitable<void> Registrar::deregister(Registrar* self, std::function<void()> done) {
  co_await deregister_once(self);
  done();
}

asio::awaitable<void> Registrar::deregister_once(Registrar* self) {
  std::string path = "/admin/v1/replicas/" + self->id_ + "/deregister";
  std::string no_body;
  auto r = co_await http_call(self->gateway_, "POST", path, self->token_, no_body,
                              self->ctx_->client_tls.get(), kDeregisterTimeout, self->identity());
  if (r.answered && (r.status == 200 || r.status == 202 || r.status == 404)) {
    log::info("deregistered from the gateway", {{"id", self->id_}, {"status", r.status}});
  } else {
    log::warn("deregistration failed", {{"id", self->id_}, {"error", describe(r)}});
  }
  self->forget_registration();
}

}  // namespace fg::agent
