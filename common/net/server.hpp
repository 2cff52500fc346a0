#pragma once

#include <functional>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>

#include "common/net/conn.hpp"
#include "common/net/url.hpp"

namespace fg::net {

// Accepts connections on one address and hands each, TLS handshake done, to the handler in its
// own coroutine. Binding happens in the constructor so that start-up errors (address in use) are
// reported before anything runs.
class Listener {
 public:
  using Handler = std::function<asio::awaitable<void>(std::unique_ptr<Conn>)>;

  // Throws std::runtime_error naming the address when it cannot bind.
  Listener(asio::any_io_executor executor, const HostPort& address,
           std::shared_ptr<asio::ssl::context> tls, Handler handler, std::string name);

  std::uint16_t port() const { return port_; }
  const std::string& name() const { return name_; }
  void start();
  // Stops accepting; open connections are not touched.
  void stop();

 private:
  static asio::awaitable<void> accept_loop(Listener* self);
  static asio::awaitable<void> serve(Listener* self, tcp::socket socket);

  tcp::acceptor acceptor_;
  std::shared_ptr<asio::ssl::context> tls_;
  Handler handler_;
  std::string name_;
  std::uint16_t port_ = 0;
};

// Runs a detached coroutine, logging (rather than losing) any exception that escapes it.
void spawn_logged(asio::any_io_executor executor, asio::awaitable<void> task, const char* what);

}  // namespace fg::net
