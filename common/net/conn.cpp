#include "common/net/conn.hpp"

#include <fcntl.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <poll.h>

#include <array>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/associated_cancellation_slot.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/tcp_stream.hpp>

#include "common/net/resolver.hpp"
#include "common/net/tls_sessions.hpp"

namespace fg::net {

namespace {

constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);

// Readable (bytes or end of stream), hung up or in error, asked without waiting. A failed poll
// counts as pending too: the connection is then not reused, which costs one new connection.
bool socket_input_pending(tcp::socket& socket) {
  pollfd p{socket.native_handle(), POLLIN | POLLRDHUP, 0};
  return ::poll(&p, 1, 0) != 0;
}

using Clock = std::chrono::steady_clock;

// What a connection's timer handler and its handler-based operations share: they may run after
// the connection is gone.
struct SocketIo {
  explicit SocketIo(tcp::socket s) : socket(std::move(s)), timer(socket.get_executor()) {}
  ~SocketIo() {
    if (ssl != nullptr) {
      SSL_free(ssl);  // the socket is not OpenSSL's (BIO_NOCLOSE): closed by its own destructor
    }
  }
  SocketIo(const SocketIo&) = delete;
  SocketIo& operator=(const SocketIo&) = delete;

  tcp::socket socket;
  asio::steady_timer timer;
  SSL* ssl = nullptr;       // TLS connections only
  bool failed = false;      // TLS: a fatal error happened; no close_notify may follow
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

// A socket with one timer for every deadline: a read or a write still pending at the deadline
// set with expires_after ends with beast::error::timeout and closes the socket, as with
// beast::tcp_stream; a wait for input past its timeout just ends. beast::tcp_stream kept a read
// and a write timer and a rate policy in a 536-byte block, and a timed wait needed a third
// timer: ~0.7 KiB per connection, two connections per held stream; this is ~0.3 KiB. A timed
// wait and a timed read or write are never pending at once on one connection (the deadline
// armed last would apply to both).
class TimedConn : public Conn {
 public:
  TimedConn(const TimedConn&) = delete;
  TimedConn& operator=(const TimedConn&) = delete;
  // A pending wait's handler keeps the socket alive: close it, so that operations end.
  ~TimedConn() override { close(); }

  void close() override {
    error_code ec;
    io_->socket.close(ec);
    io_->disarm(io_->armed, {});
  }
  bool is_open() const override { return io_->socket.is_open(); }
  void expires_after(std::chrono::steady_clock::duration d) override {
    const auto now = Clock::now();
    deadline_ = d >= Clock::time_point::max() - now ? Clock::time_point::max() : now + d;
  }
  void expires_never() override { deadline_ = Clock::time_point::max(); }
  asio::any_io_executor get_executor() override { return io_->socket.get_executor(); }
  tcp::socket& socket() override { return io_->socket; }

 protected:
  explicit TimedConn(tcp::socket socket) : io_(std::make_shared<SocketIo>(std::move(socket))) {}

  enum class Expiry { close, cancel };

  void start_wait_readable(std::chrono::steady_clock::duration timeout,
                           WaitHandler handler) override {
    if (timeout == std::chrono::steady_clock::duration::max()) {
      io_->socket.async_wait(tcp::socket::wait_read, std::move(handler));
      return;
    }
    const auto armed = arm(Clock::now() + timeout, Expiry::cancel);
    auto slot = asio::get_associated_cancellation_slot(handler);
    io_->socket.async_wait(
        tcp::socket::wait_read,
        asio::bind_cancellation_slot(
            slot, [io = io_, armed, handler = std::move(handler)](error_code ec) mutable {
              // The handler may destroy the connection: it runs last.
              std::move(handler)(io->disarm(armed, ec));
            }));
  }

  // Starts the timer for an operation that must end by `at` (max: none); what arm returns goes
  // to SocketIo::disarm when it ends.
  std::uint64_t arm(Clock::time_point at, Expiry expiry) {
    if (at == Clock::time_point::max()) {
      return 0;
    }
    SocketIo& io = *io_;
    const std::uint64_t arming = ++io.count;
    io.armed = arming;
    io.timer.expires_at(at);
    io.timer.async_wait([weak = std::weak_ptr<SocketIo>(io_), arming, expiry](error_code ec) {
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

  std::shared_ptr<SocketIo> io_;
  Clock::time_point deadline_ = Clock::time_point::max();
};

class PlainConn final : public TimedConn {
 public:
  explicit PlainConn(tcp::socket socket) : TimedConn(std::move(socket)) {}

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
};

// What an OpenSSL call's failure means, as Asio's TLS stream reported it (callers compare with
// asio::error::eof and asio::ssl::error::stream_truncated). Call right after the call, before
// anything else touches errno or OpenSSL's error queue.
error_code tls_error(SocketIo& io, int ssl_error) {
  const int saved_errno = errno;
  if (ssl_error == SSL_ERROR_ZERO_RETURN) {
    return asio::error::eof;  // the peer's close_notify
  }
  io.failed = true;
  const unsigned long queued = ERR_get_error();
  ERR_clear_error();
  if (ssl_error == SSL_ERROR_SSL && ERR_GET_REASON(queued) == SSL_R_UNEXPECTED_EOF_WHILE_READING) {
    return asio::ssl::error::stream_truncated;  // closed without close_notify
  }
  if (queued != 0) {
    return error_code(static_cast<int>(queued), asio::error::get_ssl_category());
  }
  if (ssl_error == SSL_ERROR_SYSCALL && saved_errno != 0) {
    return error_code(saved_errno, asio::error::get_system_category());
  }
  return asio::ssl::error::stream_truncated;
}

// OpenSSL writes to the socket with write(2), which raises SIGPIPE when the peer is gone (Asio's
// own sends pass MSG_NOSIGNAL); its default action ends the process. Ignored once, process-wide,
// before the first TLS connection. Child processes get every signal reset to its default
// (util/process.cpp).
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] { ::signal(SIGPIPE, SIG_IGN); });
}

// TLS over OpenSSL on the socket itself (SSL_set_fd, non-blocking), waiting for the socket as
// plain connections do. Asio's ssl::stream kept two 17 KiB buffers of its own and a BIO pair with
// two more beside OpenSSL's state: ~74 KiB per connection (5,000 https replicas' probe
// connections took 396 MiB; docs/benchmarks.md). Here a connection holds OpenSSL's state only,
// and with SSL_MODE_RELEASE_BUFFERS its record buffers only while a record is in flight.
class TlsConn final : public TimedConn {
 public:
  TlsConn(tcp::socket socket, asio::ssl::context& ctx) : TimedConn(std::move(socket)) {
    ignore_sigpipe();
    io_->ssl = SSL_new(ctx.native_handle());
    if (io_->ssl == nullptr) {
      throw std::runtime_error("cannot create a TLS connection (SSL_new)");
    }
    error_code ec;
    io_->socket.non_blocking(true, ec);
    SSL_set_mode(io_->ssl, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_set_fd(io_->ssl, static_cast<int>(io_->socket.native_handle()));
  }

  // Client side, before the handshake: the name (or address) the certificate must be for, and
  // SNI for a name.
  bool expect_host(const std::string& host, bool ip_literal) {
    SSL_set_verify(io_->ssl, SSL_VERIFY_PEER, nullptr);
    if (ip_literal) {
      return X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(io_->ssl), host.c_str()) == 1;
    }
    return SSL_set_tlsext_host_name(io_->ssl, host.c_str()) == 1 &&
           SSL_set1_host(io_->ssl, host.c_str()) == 1;
  }

  // The sessions the connection's context keeps (make_client_tls_context), or null.
  TlsSessions* sessions() const { return TlsSessions::of(SSL_get_SSL_CTX(io_->ssl)); }
  // Whether the (client) handshake resumed a session.
  bool session_reused() const { return SSL_session_reused(io_->ssl) == 1; }
  SSL* native() const { return io_->ssl; }

  asio::awaitable<error_code> handshake(bool client) {
    SSL* ssl = io_->ssl;
    const IoResult r = co_await drive(
        [ssl, client](std::size_t* n) {
          *n = 0;
          return client ? SSL_connect(ssl) : SSL_accept(ssl);
        },
        deadline_);
    co_return r.ec;
  }

  asio::awaitable<IoResult> read_some(asio::mutable_buffer buffer) override {
    if (buffer.size() == 0) {
      co_return IoResult{};
    }
    SSL* ssl = io_->ssl;
    co_return co_await drive(
        [ssl, buffer](std::size_t* n) { return SSL_read_ex(ssl, buffer.data(), buffer.size(), n); },
        deadline_);
  }
  asio::awaitable<IoResult> write(asio::const_buffer first, asio::const_buffer second) override {
    SSL* ssl = io_->ssl;
    std::size_t total = 0;
    for (const asio::const_buffer& b : {first, second}) {
      if (b.size() == 0) {
        continue;
      }
      // Not partial: SSL_write_ex succeeds once every byte of b is written.
      const IoResult r = co_await drive(
          [ssl, b](std::size_t* n) { return SSL_write_ex(ssl, b.data(), b.size(), n); }, deadline_);
      total += r.bytes;
      if (r.ec) {
        co_return IoResult{r.ec, total};
      }
    }
    co_return IoResult{{}, total};
  }
  asio::awaitable<void> shutdown() override {
    // Our close_notify, within 2 s (the peer's answer is not waited for), then the close.
    if (io_->socket.is_open() && !io_->failed && SSL_is_init_finished(io_->ssl)) {
      SSL* ssl = io_->ssl;
      co_await drive(
          [ssl](std::size_t* n) {
            *n = 0;
            const int r = SSL_shutdown(ssl);
            return r == 0 ? 1 : r;  // 0: sent, the peer's not yet received; enough here
          },
          Clock::now() + std::chrono::seconds(2));
    }
    close();
  }
  bool input_pending() override { return input_buffered() || socket_input_pending(io_->socket); }
  // Records OpenSSL read from the socket and holds (decrypted or not): the socket alone cannot
  // tell.
  bool input_buffered() const override { return SSL_has_pending(io_->ssl) != 0; }
  // With SSL_MODE_RELEASE_BUFFERS, OpenSSL 3.0 frees its write buffer once a write is out and its
  // read buffer when a read finds the socket empty; but a held stream waits for the socket and
  // then reads once (the event's record, whole), so the read buffer stayed for the stream's
  // life: heaptrack, 100 held streams to an https replica: 1.65 MB of them. Freed here, 9,500
  // held https streams took 26 KiB per stream instead of 33 (docs/benchmarks.md).
  // SSL_free_buffers frees nothing that holds a record not yet read; the next read allocates it
  // again.
  void release_buffers() override {
    if (SSL_is_init_finished(io_->ssl)) {
      SSL_free_buffers(io_->ssl);
    }
  }
  void async_read_some(asio::mutable_buffer buffer, ReadHandler handler) override {
    read_step(io_, buffer, std::move(handler), arm(deadline_, Expiry::close), true);
  }
  bool can_read_now() const override { return false; }
  IoResult read_now(asio::mutable_buffer) override {
    return IoResult{asio::error::operation_not_supported, 0};
  }

  // See net::release_tls. Nothing may be pending on the connection.
  std::optional<ReleasedTls> release() {
    if (!io_->socket.is_open()) {
      return std::nullopt;
    }
    error_code ec;
    const int fd = io_->socket.release(ec);
    if (ec) {
      return std::nullopt;
    }
    const int flags = ::fcntl(fd, F_GETFL, 0);
    ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
    return ReleasedTls{fd, std::exchange(io_->ssl, nullptr)};
  }

 protected:
  void start_wait_readable(std::chrono::steady_clock::duration timeout,
                           WaitHandler handler) override {
    if (input_buffered()) {
      asio::post(io_->socket.get_executor(),
                 [handler = std::move(handler)]() mutable { std::move(handler)(error_code{}); });
      return;
    }
    TimedConn::start_wait_readable(timeout, std::move(handler));
  }

 private:
  // Runs op (an OpenSSL call: > 0 done, else SSL_get_error says why) until it completes, waiting
  // for the socket whenever OpenSSL wants to read or write it, within deadline.
  template <class Op>
  asio::awaitable<IoResult> drive(Op op, Clock::time_point deadline) {
    const std::shared_ptr<SocketIo> io = io_;
    const auto armed = arm(deadline, Expiry::close);
    for (;;) {
      if (!io->socket.is_open()) {
        // Closed (by the timer, say): its descriptor number may belong to another socket now.
        co_return IoResult{io->disarm(armed, asio::error::bad_descriptor), 0};
      }
      ERR_clear_error();
      std::size_t n = 0;
      const int r = op(&n);
      if (r > 0) {
        co_return IoResult{io->disarm(armed, {}), n};
      }
      const int why = SSL_get_error(io->ssl, r);
      if (why != SSL_ERROR_WANT_READ && why != SSL_ERROR_WANT_WRITE) {
        co_return IoResult{io->disarm(armed, tls_error(*io, why)), 0};
      }
      auto [ec] = co_await io->socket.async_wait(
          why == SSL_ERROR_WANT_READ ? tcp::socket::wait_read : tcp::socket::wait_write, kUseTuple);
      if (ec) {
        co_return IoResult{io->disarm(armed, ec), 0};
      }
    }
  }

  // async_read_some's steps: a plain handler, no coroutine. The first step's result is posted
  // (the handler never runs inside the call); later ones run from the socket's wait.
  static void read_step(const std::shared_ptr<SocketIo>& io, asio::mutable_buffer buffer,
                        ReadHandler handler, std::uint64_t armed, bool first) {
    auto complete = [&](error_code ec, std::size_t n) {
      ec = io->disarm(armed, ec);
      if (first) {
        asio::post(io->socket.get_executor(),
                   [handler = std::move(handler), ec, n] { handler(ec, n); });
      } else {
        handler(ec, n);
      }
    };
    if (!io->socket.is_open()) {
      complete(asio::error::bad_descriptor, 0);
      return;
    }
    ERR_clear_error();
    std::size_t n = 0;
    const int r = SSL_read_ex(io->ssl, buffer.data(), buffer.size(), &n);
    if (r > 0) {
      complete({}, n);
      return;
    }
    const int why = SSL_get_error(io->ssl, r);
    if (why != SSL_ERROR_WANT_READ && why != SSL_ERROR_WANT_WRITE) {
      complete(tls_error(*io, why), 0);
      return;
    }
    io->socket.async_wait(
        why == SSL_ERROR_WANT_READ ? tcp::socket::wait_read : tcp::socket::wait_write,
        [io, buffer, handler = std::move(handler), armed](error_code ec) mutable {
          if (ec) {
            handler(io->disarm(armed, ec), 0);
            return;
          }
          read_step(io, buffer, std::move(handler), armed, false);
        });
  }
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

std::optional<ReleasedTls> release_tls(Conn& conn) {
  auto* tls = dynamic_cast<TlsConn*>(&conn);
  return tls != nullptr ? tls->release() : std::nullopt;
}

std::unique_ptr<Conn> make_tls_server_conn(tcp::socket socket, asio::ssl::context& ctx) {
  socket.set_option(tcp::no_delay(true));
  return std::make_unique<TlsConn>(std::move(socket), ctx);
}

asio::awaitable<error_code> tls_server_handshake(Conn& conn) {
  co_return co_await static_cast<TlsConn&>(conn).handshake(false);
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
  if (TlsSessions::enable(ctx->native_handle()) == nullptr) {
    throw std::runtime_error("cannot keep TLS sessions (SSL_CTX_set_ex_data)");
  }
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

  auto tls = std::make_unique<TlsConn>(stream.release_socket(), *tls_ctx);
  tls->expires_after(deadline - std::chrono::steady_clock::now());
  if (!tls->expect_host(url.host, is_ip_literal(url.host))) {
    result.failure = ConnectFailure::tls;
    result.ec = asio::error::invalid_argument;
    co_return result;
  }
  TlsSessions* sessions = tls->sessions();
  if (sessions != nullptr) {
    sessions->offer(tls->native(), url.to_string());
  }
  const error_code hs_ec = co_await tls->handshake(true);
  if (hs_ec) {
    if (sessions != nullptr && hs_ec != beast::error::timeout &&
        hs_ec != asio::error::operation_aborted) {
      // The replica refused (not a slow one, nor a request that left): the next connection to
      // it starts afresh.
      sessions->forget(tls->native());
    }
    result.failure = hs_ec == beast::error::timeout ? ConnectFailure::timeout : ConnectFailure::tls;
    result.ec = hs_ec;
    co_return result;
  }
  tls->expires_never();
  result.tls_resumed = tls->session_reused();
  if (sessions != nullptr) {
    sessions->count_handshake(result.tls_resumed);
  }
  result.conn = std::move(tls);
  co_return result;
}

}  // namespace fg::net
