#include "replica-agent/tunnel/tunnel.hpp"

#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstring>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "common/log/log.hpp"
#include "common/net/server.hpp"
#include "replica-agent/core/backoff.hpp"
#include "replica-agent/tunnel/bridge_rpc.hpp"

namespace fg::agent {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;
using local = asio::local::stream_protocol;

namespace {

constexpr auto kCallTimeout = std::chrono::seconds(10);
constexpr auto kStopTimeout = std::chrono::seconds(5);
constexpr std::size_t kMaxAnswer = 64 * 1024;

asio::awaitable<bool> sleep_for(std::chrono::milliseconds d) {
  asio::steady_timer timer(co_await asio::this_coro::executor, d);
  auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
  co_return !ec;
}

double unit_draw(std::mt19937_64& rng) {
  return static_cast<double>(rng() >> 11) * 0x1.0p-53;
}

// Connects to the abstract Unix socket name: a NUL, then the name, no file on disk. Two
// conventions exist for its length: exactly the name (most programs), or the whole sun_path with
// NUL padding (Node's net module, for one); the exact one is tried first. A Unix socket connects
// at once or fails, so the plain connect(2) does not block.
boost::system::error_code connect_abstract(local::socket& socket, const std::string& name) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (name.size() + 1 > sizeof address.sun_path) {
    return boost::system::error_code(ENAMETOOLONG, boost::system::system_category());
  }
  std::memcpy(address.sun_path + 1, name.data(), name.size());
  const auto exact = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  int error = 0;
  for (socklen_t length : {exact, static_cast<socklen_t>(sizeof address)}) {
    boost::system::error_code ec;
    if (socket.is_open()) {
      socket.close(ec);
    }
    socket.open(local(), ec);
    if (ec) {
      return ec;
    }
    if (::connect(socket.native_handle(), reinterpret_cast<const sockaddr*>(&address), length) ==
        0) {
      return {};
    }
    error = errno;
    if (error != ECONNREFUSED && error != ENOENT) {
      break;
    }
  }
  socket.close();
  return boost::system::error_code(error, boost::system::system_category());
}

// One call: connect to the abstract socket, write the request line, read the answer line.
asio::awaitable<bridge::Answer> exchange(std::string socket_name, std::string line,
                                         std::uint64_t id) {
  bridge::Answer answer;
  local::socket socket(co_await asio::this_coro::executor);
  if (auto ec = connect_abstract(socket, socket_name)) {
    answer.error = "cannot connect to the bridge (BRIDGE_SOCKET): " + ec.message();
    co_return answer;
  }
  auto [wec, wn] =
      co_await asio::async_write(socket, asio::buffer(line), asio::as_tuple(asio::use_awaitable));
  if (wec) {
    answer.error = "bridge write failed: " + wec.message();
    co_return answer;
  }
  std::string buffer;
  auto [rec, rn] = co_await asio::async_read_until(socket, asio::dynamic_buffer(buffer, kMaxAnswer),
                                                   '\n', asio::as_tuple(asio::use_awaitable));
  if (rec && !(rec == asio::error::eof && !buffer.empty())) {
    answer.error = "bridge read failed: " + rec.message();
    co_return answer;
  }
  const auto newline = buffer.find('\n');
  co_return bridge::parse_answer(std::string_view(buffer).substr(0, newline), id);
}

asio::awaitable<bridge::Answer> call(std::string socket_name, std::uint64_t id, std::string method,
                                     nlohmann::json params, std::chrono::milliseconds timeout) {
  asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
  std::string line = bridge::request_line(id, method, params);
  auto done = co_await (exchange(std::move(socket_name), std::move(line), id) ||
                        timer.async_wait(asio::use_awaitable));
  if (done.index() == 1) {
    bridge::Answer answer;
    answer.error =
        "the bridge did not answer " + method + " in " + std::to_string(timeout.count()) + " ms";
    co_return answer;
  }
  co_return std::get<0>(std::move(done));
}

class NoTunnel final : public Tunnel {
 public:
  void start(std::uint16_t, std::function<void()> on_ready) override { on_ready(); }
  void stop(std::function<void()> done) override { done(); }
};

// The Shell runtime's tunnel: deployment_id, then tunnel_start with the key (so the URL is the
// same on every start), tunnel_status every poll_interval and tunnel_start again when it is
// down, tunnel_stop at the end. Bridge failures are retried with back-off.
class AcurastTunnel final : public Tunnel {
 public:
  AcurastTunnel(asio::any_io_executor executor, AgentContext* ctx, std::string key,
                std::string socket)
      : executor_(std::move(executor)),
        ctx_(ctx),
        key_(std::move(key)),
        socket_(std::move(socket)),
        rng_(std::random_device{}()) {}
  ~AcurastTunnel() override { stop_.emit(asio::cancellation_type::terminal); }

  void start(std::uint16_t local_port, std::function<void()> on_ready) override {
    local_port_ = local_port;
    on_ready_ = std::move(on_ready);
    running_ = true;
    asio::co_spawn(executor_, run(this),
                   asio::bind_cancellation_slot(stop_.slot(), [](std::exception_ptr e) {
                     if (!e) {
                       return;
                     }
                     try {
                       std::rethrow_exception(e);
                     } catch (const std::exception& ex) {
                       log::error("task failed", {{"task", "tunnel"}, {"error", ex.what()}});
                     }
                   }));
  }

  void stop(std::function<void()> done) override {
    if (running_) {
      stop_.emit(asio::cancellation_type::terminal);
      running_ = false;
    }
    if (!opened_) {
      done();
      return;
    }
    net::spawn_logged(executor_, close(this, std::move(done)), "tunnel_stop");
  }

 private:
  asio::awaitable<bridge::Answer> rpc(std::string method, nlohmann::json params,
                                      std::chrono::milliseconds timeout = kCallTimeout) {
    return call(socket_, ++next_id_, std::move(method), std::move(params), timeout);
  }

  // Waits out the back-off after a failed call; false when stopped.
  static asio::awaitable<bool> back_off(AcurastTunnel* self) {
    return sleep_for(backoff_delay(self->failures_++, unit_draw(self->rng_)));
  }

  static asio::awaitable<bool> open(AcurastTunnel* self) {
    bridge::TunnelParams params;
    params.relays = self->ctx_->config.tunnel.relays;
    params.domain_suffix = self->ctx_->config.tunnel.domain_suffix;
    params.local_addr = "127.0.0.1:" + std::to_string(self->local_port_);
    params.key = self->key_;
    auto answer = co_await self->rpc("tunnel_start", bridge::tunnel_start_params(params));
    if (!self->running_) {
      co_return false;
    }
    std::optional<std::string> url;
    if (answer.result) {
      url = bridge::tunnel_url(*answer.result);
      if (!url) {
        answer.error = "tunnel_start answered without a url";
      }
    }
    if (!url) {
      log::warn("tunnel_start failed", {{"error", answer.error}, {"attempt", self->failures_ + 1}});
      co_return false;
    }
    self->opened_ = true;
    self->failures_ = 0;
    if (!self->ctx_->public_url.empty() && self->ctx_->public_url != *url) {
      log::warn("the tunnel's URL changed (another key?)",
                {{"was", self->ctx_->public_url}, {"url", *url}});
    }
    self->ctx_->public_url = *url;
    ++self->opens_;
    log::info("tunnel open",
              {{"url", *url}, {"local_addr", params.local_addr}, {"opens", self->opens_}});
    co_return true;
  }

  static asio::awaitable<void> run(AcurastTunnel* self) {
    co_await asio::this_coro::throw_if_cancelled(false);
    for (;;) {
      auto answer = co_await self->rpc("deployment_id", nullptr);
      if (!self->running_) {
        co_return;
      }
      std::optional<std::string> id;
      if (answer.result) {
        id = bridge::deployment_id(*answer.result);
      }
      if (id) {
        self->ctx_->deployment_id = *id;
        break;
      }
      log::warn("deployment_id failed",
                {{"error", answer.error.empty() ? "not a string" : answer.error}});
      if (!self->running_ || !co_await back_off(self)) {
        co_return;
      }
    }
    self->failures_ = 0;
    auto version = co_await self->rpc("processor_version", nullptr);
    log::info("acurast bridge",
              {{"deployment_id", self->ctx_->deployment_id},
               {"processor_version", version.result ? *version.result : nlohmann::json(nullptr)}});
    while (!co_await open(self)) {
      if (!self->running_ || !co_await back_off(self)) {
        co_return;
      }
    }
    if (self->on_ready_) {
      auto ready = std::move(self->on_ready_);
      self->on_ready_ = nullptr;
      ready();
    }
    for (;;) {
      if (!co_await sleep_for(self->ctx_->config.tunnel.poll_interval)) {
        co_return;
      }
      auto status = co_await self->rpc("tunnel_status", nullptr);
      if (!self->running_) {
        co_return;
      }
      std::optional<int> state;
      if (status.result) {
        state = bridge::tunnel_state(*status.result);
      }
      if (!state) {
        log::warn("tunnel_status failed",
                  {{"error", status.error.empty() ? "no state" : status.error}});
        continue;
      }
      if (!bridge::tunnel_down(*state)) {
        continue;
      }
      log::warn("tunnel down: opening it again", {{"state", *state}});
      while (!co_await open(self)) {
        if (!self->running_ || !co_await back_off(self)) {
          co_return;
        }
      }
    }
  }

  static asio::awaitable<void> close(AcurastTunnel* self, std::function<void()> done) {
    auto answer = co_await self->rpc("tunnel_stop", nullptr, kStopTimeout);
    if (answer.result) {
      log::info("tunnel stopped", {{"url", self->ctx_->public_url}});
    } else {
      log::warn("tunnel_stop failed", {{"error", answer.error}});
    }
    self->opened_ = false;
    done();
  }

  asio::any_io_executor executor_;
  AgentContext* ctx_;
  std::string key_;  // never logged
  std::string socket_;
  std::uint16_t local_port_ = 0;
  std::function<void()> on_ready_;
  asio::cancellation_signal stop_;
  std::mt19937_64 rng_;
  std::uint64_t next_id_ = 0;
  std::uint32_t failures_ = 0;
  std::uint64_t opens_ = 0;
  bool running_ = false;
  bool opened_ = false;
};

}  // namespace

std::unique_ptr<Tunnel> make_tunnel(asio::any_io_executor executor, AgentContext* ctx,
                                    std::string key, std::string bridge_socket) {
  if (ctx->config.tunnel.kind == TunnelKind::acurast) {
    return std::make_unique<AcurastTunnel>(std::move(executor), ctx, std::move(key),
                                           std::move(bridge_socket));
  }
  return std::make_unique<NoTunnel>();
}

}  // namespace fg::agent
