#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "common/net/conn.hpp"
#include "common/net/connection_limits.hpp"
#include "common/net/url.hpp"

namespace fg::net {

// Accepts connections on one address and hands each, TLS handshake done, to the handler in its
// own coroutine. Binding happens in the constructor so that start-up errors (address in use) are
// reported before anything runs. Open connections are capped in total and per client address
// (from accept to close, TLS handshake included): over a cap a new connection is closed at once,
// without a word, so that a flood costs one accept and one close per connection.
class Listener {
 public:
  using Handler = std::function<asio::awaitable<void>(std::unique_ptr<Conn>)>;

  // Throws std::runtime_error naming the address when it cannot bind.
  Listener(asio::any_io_executor executor, const HostPort& address,
           std::shared_ptr<asio::ssl::context> tls, Handler handler, std::string name,
           ConnectionCaps caps);

  std::uint16_t port() const { return port_; }
  const std::string& name() const { return name_; }
  // Applies to connections accepted from now on.
  void set_caps(ConnectionCaps caps) { limiter_->set_caps(caps); }
  std::uint32_t open_connections() const { return limiter_->open(); }
  // Told of every connection a cap refused.
  std::function<void(Admission)> on_refused;
  void start();
  // Stops accepting; open connections are not touched.
  void stop();

 private:
  static asio::awaitable<void> accept_loop(Listener* self);
  // The TLS handshake (kTlsHandshakeTimeout), then the handler.
  static asio::awaitable<void> serve_tls(Listener* self, std::unique_ptr<Conn> conn);
  void refuse(Admission why);

  tcp::acceptor acceptor_;
  std::shared_ptr<asio::ssl::context> tls_;
  Handler handler_;
  std::string name_;
  std::uint16_t port_ = 0;
  // Shared with each connection's coroutine, which may outlive the listener at shutdown.
  std::shared_ptr<ConnectionLimiter> limiter_;
  LogThrottle refused_log_{std::chrono::seconds(10)};
  LogThrottle accept_error_log_{std::chrono::seconds(10)};
};

// Raises this process's soft limit of open file descriptors (RLIMIT_NOFILE) to its hard limit
// and returns the limit then in force.
std::uint64_t raise_descriptor_limit();

// Runs a detached coroutine, logging (rather than losing) any exception that escapes it.
void spawn_logged(asio::any_io_executor executor, asio::awaitable<void> task, const char* what);

}  // namespace fg::net
