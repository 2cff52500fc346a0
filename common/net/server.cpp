#include "common/net/server.hpp"

#include <sys/resource.h>

#include <stdexcept>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/log/log.hpp"

namespace fg::net {

namespace {
constexpr auto kTlsHandshakeTimeout = std::chrono::seconds(10);
}

namespace {

void log_failure(const char* what, const std::exception_ptr& e) {
  if (!e) {
    return;
  }
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    log::error("task failed", {{"task", what}, {"error", ex.what()}});
  }
}

// What one accepted connection holds until its coroutine has ended: its place under the caps, and
// the signal that cancels what that coroutine awaits (Conn::session_cancel). It belongs to the
// coroutine's completion handler, so it outlives every operation of the coroutine; one heap block
// per connection instead of a coroutine frame around the session (~0.4 KiB).
struct Admitted {
  std::shared_ptr<ConnectionLimiter> limiter;
  std::string address;
  asio::cancellation_signal cancel;
  Admitted(std::shared_ptr<ConnectionLimiter> l, std::string a)
      : limiter(std::move(l)), address(std::move(a)) {}
  Admitted(const Admitted&) = delete;
  Admitted& operator=(const Admitted&) = delete;
  ~Admitted() { limiter->release(address); }
};

}  // namespace

void spawn_logged(asio::any_io_executor executor, asio::awaitable<void> task, const char* what) {
  asio::co_spawn(executor, std::move(task), [what](std::exception_ptr e) { log_failure(what, e); });
}

Listener::Listener(asio::any_io_executor executor, const HostPort& address,
                   std::shared_ptr<asio::ssl::context> tls, Handler handler, std::string name,
                   ConnectionCaps caps)
    : acceptor_(executor),
      tls_(std::move(tls)),
      handler_(std::move(handler)),
      name_(std::move(name)),
      limiter_(std::make_shared<ConnectionLimiter>(caps)) {
  error_code ec;
  auto ip = asio::ip::make_address(address.host, ec);
  if (ec) {
    throw std::runtime_error(name_ + " listener: '" + address.host + "' is not an IP address");
  }
  tcp::endpoint endpoint(ip, address.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) {
    acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  }
  if (!ec) {
    acceptor_.bind(endpoint, ec);
  }
  if (!ec) {
    acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  }
  if (ec) {
    throw std::runtime_error(name_ + " listener: cannot listen on " + address.to_string() + ": " +
                             ec.message());
  }
  port_ = acceptor_.local_endpoint().port();
}

void Listener::start() {
  spawn_logged(acceptor_.get_executor(), accept_loop(this), "accept");
}

void Listener::stop() {
  error_code ec;
  acceptor_.close(ec);
}

void Listener::refuse(Admission why) {
  if (on_refused) {
    on_refused(why);
  }
  std::uint64_t held_back = 0;
  if (refused_log_.allow(std::chrono::steady_clock::now(), &held_back)) {
    const auto& caps = limiter_->caps();
    log::warn("connection refused: too many open connections",
              {{"listener", name_},
               {"reason", to_string(why)},
               {"limit", why == Admission::over_total ? caps.total : caps.per_address},
               {"refused_unlogged_before", held_back}});
  }
}

asio::awaitable<void> Listener::accept_loop(Listener* self) {
  for (;;) {
    auto [ec, socket] = co_await self->acceptor_.async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec) {
      if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) {
        co_return;
      }
      // Out of file descriptors and similar: note it, pause briefly, keep serving.
      std::uint64_t held_back = 0;
      if (self->accept_error_log_.allow(std::chrono::steady_clock::now(), &held_back)) {
        log::warn("accept failed", {{"listener", self->name_},
                                    {"error", ec.message()},
                                    {"failed_unlogged_before", held_back}});
      }
      asio::steady_timer pause(self->acceptor_.get_executor(), std::chrono::milliseconds(50));
      co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
      continue;
    }
    error_code peer_ec;
    const auto peer = socket.remote_endpoint(peer_ec);
    if (peer_ec) {
      continue;  // already gone (reset before we got to it); the socket closes here
    }
    std::string address = peer.address().to_string();
    const Admission admission = self->limiter_->admit(address);
    if (admission != Admission::admitted) {
      socket.close(peer_ec);
      self->refuse(admission);
      continue;
    }
    auto admitted = std::make_unique<Admitted>(self->limiter_, std::move(address));
    std::unique_ptr<Conn> conn;
    try {
      conn = self->tls_ ? make_tls_server_conn(std::move(socket), *self->tls_)
                        : make_plain_conn(std::move(socket));
    } catch (const boost::system::system_error&) {
      continue;  // reset before its options could be set; admitted releases its place
    }
    conn->set_session_cancel(&admitted->cancel);
    asio::awaitable<void> task =
        self->tls_ ? serve_tls(self, std::move(conn)) : self->handler_(std::move(conn));
    auto slot = admitted->cancel.slot();
    asio::co_spawn(
        self->acceptor_.get_executor(), std::move(task),
        asio::bind_cancellation_slot(slot, [admitted = std::move(admitted)](std::exception_ptr e) {
          log_failure("connection", e);
        }));
  }
}

asio::awaitable<void> Listener::serve_tls(Listener* self, std::unique_ptr<Conn> conn) {
  conn->expires_after(kTlsHandshakeTimeout);
  auto ec = co_await tls_server_handshake(*conn);
  if (ec) {
    log::debug("tls handshake failed", {{"listener", self->name_}, {"error", ec.message()}});
    co_return;
  }
  conn->expires_never();
  co_await self->handler_(std::move(conn));
}

std::uint64_t raise_descriptor_limit() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return 0;
  }
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
    }
  }
  return limit.rlim_cur == RLIM_INFINITY ? UINT64_MAX : static_cast<std::uint64_t>(limit.rlim_cur);
}

}  // namespace fg::net
