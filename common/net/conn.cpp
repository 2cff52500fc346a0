#include "common/net/conn.hpp"

#include <poll.h>

#include <array>
#include <cstdint>
#include <memory>
#include <stdexcept>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/host_name_verification.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/ssl/ssl_stream.hpp>

#include "common/net/resolver.hpp"

namespace fg::net {

namespace {

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);

// Readable (bytes or end of stream), hung up or in error, asked without waiting. A failed poll
// counts as pending too: the connection is then not reused, which costs one new connection.
bool socket_input_pending(tcp::socket& socket) {
  pollfd p{socket.native_handle(), POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) != 0;
}

// Waits for readability with a plain handler; a timer cancels the socket when timeout passes.
// Its handler only touches the connection when it really fired; the connection's destruction
// cancels it first. The user's handler runs last: it may destroy the connection.
class ReadableWait {
 public:
  explicit ReadableWait(const asio::any_io_executor& executor) : timer_(executor) {}

  void start(tcp::socket& socket, std::chrono::steady_clock::duration timeout,
             Conn::WaitHandler handler) {
    if (timeout == std::chrono::steady_clock::duration::max()) {
      socket.async_wait(tcp::socket::wait_read, std::move(handler));
      return;
    }
    timed_out_ = false;
    timer_.expires_after(timeout);
    timer_.async_wait([this, &socket](error_code ec) {
      if (!ec) {
        timed_out_ = true;
        error_code ignored;
        socket.cancel(ignored);
      }
    });
    auto slot = asio::get_associated_cancellation_slot(handler);
    socket.async_wait(tcp::socket::wait_read,
                      asio::bind_cancellation_slot(
                          slot, [this, handler = std::move(handler)](error_code ec) mutable {
                            timer_.cancel();
                            std::move(handler)(timed_out_ ? error_code(beast::error::timeout) : ec);
                          }));
  }

 private:
  asio::steady_timer timer_;
  bool timed_out_ = false;
};

// Plain TCP with one timer for every deadline: a read or a write still pending at the deadline
// set with expires_after ends with beast::error::timeout and closes the socket, as with
// beast::tcp_stream; a wait for input past its timeout just ends. beast::tcp_stream kept a read
// and a write timer and a rate policy in a 536-byte block, and a timed wait needed a third
// timer: ~0.7 KiB per connection, two connections per held stream; this is ~0.3 KiB. A timed
// wait and a timed read or write are never pending at once on one connection (the deadline
// armed last would apply to both).
class PlainConn final : public Conn {
 public:
  explicit PlainConn(tcp::socket socket) : io_(std::make_shared<Io>(std::move(socket))) {}
  PlainConn(const PlainConn&) = delete;
  PlainConn& operator=(const PlainConn&) = delete;
  // A pending wait's handler keeps the socket alive: close it, so that operations end.
  ~PlainConn() override { close(); }

  asio::awaitable<IoResult> read_some(asio::mutable_buffer buffer) override {
    const auto armed = arm(deadline_, Expiry::close);
    auto [ec, n] = co_await io_->socket.async_read_some(buffer, kUseTuple);
    co_return IoResult{io_->disarm(armed, ec), n};
  }
  asio::awaitable<IoResult> write(asio::const_buffer first, asio::const_buffer second) override {
    std::array<asio::const_buffer, 2> buffers{first, second};
    const auto armed = arm(deadline_, Expiry::close);
    auto [ec, n] = co_await asio::async_write(io_->socket, buffers, kUseTuple);
    co_return IoResult{io_->disarm(armed, ec), n};
  }
  asio::awaitable<void> shutdown() override {
    error_code ec;
    io_->socket.shutdown(tcp::socket::shutdown_send, ec);
    co_return;
  }
  void close() override {
    error_code ec;
    io_->socket.close(ec);
    io_->disarm(io_->armed, {});
  }
  bool is_open() const override { return io_->socket.is_open(); }
  bool input_pending() override { return socket_input_pending(io_->socket); }
  void async_read_some(asio::mutable_buffer buffer, ReadHandler handler) override {
    const auto armed = arm(deadline_, Expiry::close);
    io_->socket.async_read_some(
        buffer, [io = io_, armed, handler = std::move(handler)](error_code ec, std::size_t n) {
          handler(io->disarm(armed, ec), n);
        });
  }
  bool can_read_now() const override { return true; }
  IoResult read_now(asio::mutable_buffer buffer) override {
    auto& socket = io_->socket;
    error_code ec;
    if (!socket.non_blocking()) {
      socket.non_blocking(true, ec);  // only synchronous calls notice; async ones never block
    }
    const std::size_t n = socket.read_some(buffer, ec);
    return IoResult{ec, n};
  }
  void expires_after(std::chrono::steady_clock::duration d) override {
    const auto now = std::chrono::steady_clock::now();
    deadline_ = d >= Clock::time_point::max() - now ? Clock::time_point::max() : now + d;
  }
  void expires_never() override { deadline_ = Clock::time_point::max(); }
  asio::any_io_executor get_executor() override { return io_->socket.get_executor(); }
  tcp::socket& socket() override { return io_->socket; }

 protected:
  void start_wait_readable(std::chrono::steady_clock::duration timeout,
                           WaitHandler handler) override {
    if (timeout == std::chrono::steady_clock::duration::max()) {
      io_->socket.async_wait(tcp::socket::wait_read, std::move(handler));
      return;
    }
    const auto armed = arm(std::chrono::steady_clock::now() + timeout, Expiry::cancel);
    auto slot = asio::get_associated_cancellation_slot(handler);
    io_->socket.async_wait(
        tcp::socket::wait_read,
        asio::bind_cancellation_slot(
            slot, [io = io_, armed, handler = std::move(handler)](error_code ec) mutable {
              // The handler may destroy the connection: it runs last.
              std::move(handler)(io->disarm(armed, ec));
            }));
  }

 private:
  using Clock = std::chrono::steady_clock;
  enum class Expiry { close, cancel };

  // What the timer's handler and the handler-based operations share: they may run after the
  // connection is gone.
  struct Io {
    explicit Io(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
    tcp::socket socket;
    asio::steady_timer timer;
    std::uint64_t armed = 0;  // the arming the timer's pending wait belongs to; 0: none
    std::uint64_t fired = 0;  // the last arming whose time passed
    std::uint64_t count = 0;

    // Ends an arming (0: none): the operation it timed is over. Its result becomes
    // beast::error::timeout when the time passed first.
    error_code disarm(std::uint64_t arming, error_code ec) {
      if (arming == 0) {
        return ec;
      }
      if (armed == arming) {
        armed = 0;
        timer.cancel();
      }
      return fired == arming ? error_code(beast::error::timeout) : ec;
    }
  };

  // Starts the timer for an operation that must end by `at` (max: none); what arm returns goes
  // to Io::disarm when it ends.
  std::uint64_t arm(Clock::time_point at, Expiry expiry) {
    if (at == Clock::time_point::max()) {
      return 0;
    }
    Io& io = *io_;
    const std::uint64_t arming = ++io.count;
    io.armed = arming;
    io.timer.expires_at(at);
    io.timer.async_wait([weak = std::weak_ptr<Io>(io_), arming, expiry](error_code ec) {
      auto io = weak.lock();
      if (ec || io == nullptr || io->armed != arming) {
        return;  // cancelled, the connection is gone, or a stale wake-up
      }
      io->fired = arming;
      error_code ignored;
      if (expiry == Expiry::close) {
        io->socket.close(ignored);
      } else {
        io->socket.cancel(ignored);
      }
    });
    return arming;
  }

  std::shared_ptr<Io> io_;
  Clock::time_point deadline_ = Clock::time_point::max();
};

class TlsConn final : public Conn {
 public:
  TlsConn(beast::tcp_stream stream, asio::ssl::context& ctx)
      : stream_(std::move(stream), ctx), wait_(stream_.get_executor()) {}

  asio::awaitable<IoResult> read_some(asio::mutable_buffer buffer) override {
    auto [ec, n] = co_await stream_.async_read_some(buffer, kUseTuple);
    co_return IoResult{ec, n};
  }
  asio::awaitable<IoResult> write(asio::const_buffer first, asio::const_buffer second) override {
    std::array<asio::const_buffer, 2> buffers{first, second};
    auto [ec, n] = co_await asio::async_write(stream_, buffers, kUseTuple);
    co_return IoResult{ec, n};
  }
  asio::awaitable<void> shutdown() override {
    // Bounded: a peer that never answers close_notify must not hold the connection.
    beast::get_lowest_layer(stream_).expires_after(std::chrono::seconds(2));
    co_await stream_.async_shutdown(kUseTuple);
    close();
  }
  void close() override {
    error_code ec;
    beast::get_lowest_layer(stream_).socket().close(ec);
  }
  bool is_open() const override { return beast::get_lowest_layer(stream_).socket().is_open(); }
  bool input_pending() override {
    return input_buffered() || socket_input_pending(beast::get_lowest_layer(stream_).socket());
  }
  // Records OpenSSL holds (decrypted or not) and bytes waiting in its input BIO were read from
  // the socket already, so the socket alone cannot tell.
  bool input_buffered() const override {
    SSL* ssl = const_cast<beast::ssl_stream<beast::tcp_stream>&>(stream_).native_handle();
    return SSL_has_pending(ssl) != 0 || BIO_ctrl_pending(SSL_get_rbio(ssl)) > 0;
  }
  void async_read_some(asio::mutable_buffer buffer, ReadHandler handler) override {
    stream_.async_read_some(buffer, std::move(handler));
  }
  bool can_read_now() const override { return false; }
  IoResult read_now(asio::mutable_buffer) override {
    return IoResult{asio::error::operation_not_supported, 0};
  }
  void expires_after(std::chrono::steady_clock::duration d) override {
    beast::get_lowest_layer(stream_).expires_after(d);
  }
  void expires_never() override { beast::get_lowest_layer(stream_).expires_never(); }
  asio::any_io_executor get_executor() override { return stream_.get_executor(); }
  tcp::socket& socket() override { return beast::get_lowest_layer(stream_).socket(); }

  beast::ssl_stream<beast::tcp_stream>& stream() { return stream_; }

 protected:
  void start_wait_readable(std::chrono::steady_clock::duration timeout,
                           WaitHandler handler) override {
    if (input_buffered()) {
      asio::post(stream_.get_executor(),
                 [handler = std::move(handler)]() mutable { std::move(handler)(error_code{}); });
      return;
    }
    wait_.start(beast::get_lowest_layer(stream_).socket(), timeout, std::move(handler));
  }

 private:
  beast::ssl_stream<beast::tcp_stream> stream_;
  ReadableWait wait_;
};

bool is_ip_literal(const std::string& host) {
  error_code ec;
  asio::ip::make_address(host, ec);
  return !ec;
}

}  // namespace

asio::awaitable<error_code> Conn::wait_readable(std::chrono::steady_clock::duration timeout) {
  auto [ec] = co_await async_wait_readable(timeout, kUseTuple);
  co_return ec;
}

void Conn::start_wait_readable(std::chrono::steady_clock::duration, WaitHandler handler) {
  asio::post(get_executor(), [handler = std::move(handler)]() mutable {
    std::move(handler)(asio::error::operation_not_supported);
  });
}

void Conn::async_read_some(asio::mutable_buffer, ReadHandler handler) {
  asio::post(get_executor(),
             [handler = std::move(handler)] { handler(asio::error::operation_not_supported, 0); });
}

std::unique_ptr<Conn> make_plain_conn(tcp::socket socket) {
  socket.set_option(tcp::no_delay(true));
  return std::make_unique<PlainConn>(std::move(socket));
}

std::unique_ptr<Conn> make_tls_server_conn(tcp::socket socket, asio::ssl::context& ctx) {
  socket.set_option(tcp::no_delay(true));
  return std::make_unique<TlsConn>(beast::tcp_stream(std::move(socket)), ctx);
}

asio::awaitable<error_code> tls_server_handshake(Conn& conn) {
  auto& tls = static_cast<TlsConn&>(conn);
  auto [ec] = co_await tls.stream().async_handshake(asio::ssl::stream_base::server, kUseTuple);
  co_return ec;
}

std::shared_ptr<asio::ssl::context> make_server_tls_context(const std::string& cert_file,
                                                            const std::string& key_file) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_server);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1 | asio::ssl::context::single_dh_use);
  error_code ec;
  ctx->use_certificate_chain_file(cert_file, ec);
  if (ec) {
    throw std::runtime_error("cannot load TLS certificate " + cert_file + ": " + ec.message());
  }
  ctx->use_private_key_file(key_file, asio::ssl::context::pem, ec);
  if (ec) {
    throw std::runtime_error("cannot load TLS key " + key_file + ": " + ec.message());
  }
  return ctx;
}

std::shared_ptr<asio::ssl::context> make_client_tls_context(const std::string& ca_file) {
  auto ctx = std::make_shared<asio::ssl::context>(asio::ssl::context::tls_client);
  ctx->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                   asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                   asio::ssl::context::no_tlsv1_1);
  ctx->set_default_verify_paths();
  if (!ca_file.empty()) {
    error_code ec;
    ctx->load_verify_file(ca_file, ec);
    if (ec) {
      throw std::runtime_error("cannot load CA file " + ca_file + ": " + ec.message());
    }
  }
  ctx->set_verify_mode(asio::ssl::verify_peer);
  return ctx;
}

asio::awaitable<ConnectResult> connect_to(const Url& url, asio::ssl::context* tls_ctx,
                                          std::chrono::steady_clock::duration timeout) {
  auto executor = co_await asio::this_coro::executor;
  ConnectResult result;
  const auto deadline = std::chrono::steady_clock::now() + timeout;

  // Off the io thread and bounded by the same deadline as the connect (common/net/resolver.hpp).
  auto resolved = co_await resolver_for(executor).resolve(url.host, url.port, deadline);
  switch (resolved.outcome) {
    case ResolveResult::Outcome::ok:
      break;
    case ResolveResult::Outcome::timeout:
      result.failure = ConnectFailure::timeout;
      result.ec = beast::error::timeout;
      co_return result;
    case ResolveResult::Outcome::cancelled:
      result.failure = ConnectFailure::resolve;
      result.ec = asio::error::operation_aborted;
      co_return result;
    case ResolveResult::Outcome::failed:
      result.failure = ConnectFailure::resolve;
      result.ec = resolved.error == LookupResult::Error::not_found ? asio::error::host_not_found
                  : resolved.error == LookupResult::Error::try_again
                      ? asio::error::host_not_found_try_again
                      : asio::error::no_recovery;
      co_return result;
  }
  const auto& endpoints = resolved.endpoints;

  beast::tcp_stream stream(executor);
  stream.expires_at(deadline);
  auto [connect_ec, endpoint] = co_await stream.async_connect(endpoints, kUseTuple);
  if (connect_ec) {
    result.failure =
        connect_ec == beast::error::timeout ? ConnectFailure::timeout : ConnectFailure::connect;
    result.ec = connect_ec;
    co_return result;
  }
  stream.socket().set_option(tcp::no_delay(true));

  if (!url.tls()) {
    stream.expires_never();
    result.conn = std::make_unique<PlainConn>(stream.release_socket());
    co_return result;
  }

  auto tls = std::make_unique<TlsConn>(std::move(stream), *tls_ctx);
  auto& ssl = tls->stream();
  if (!is_ip_literal(url.host)) {
    SSL_set_tlsext_host_name(ssl.native_handle(), url.host.c_str());
  }
  ssl.set_verify_mode(asio::ssl::verify_peer);
  ssl.set_verify_callback(asio::ssl::host_name_verification(url.host));
  auto [hs_ec] = co_await ssl.async_handshake(asio::ssl::stream_base::client, kUseTuple);
  if (hs_ec) {
    result.failure = hs_ec == beast::error::timeout ? ConnectFailure::timeout : ConnectFailure::tls;
    result.ec = hs_ec;
    co_return result;
  }
  tls->expires_never();
  result.conn = std::move(tls);
  co_return result;
}

}  // namespace fg::net
