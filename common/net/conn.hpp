#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include <functional>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/async_result.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/beast/core/error.hpp>

#include "common/net/session_tracker.hpp"
#include "common/net/url.hpp"

namespace fg::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
using tcp = asio::ip::tcp;
using error_code = beast::error_code;

struct IoResult {
  error_code ec;
  std::size_t bytes = 0;
};

// A connected byte stream, plain TCP or TLS over TCP, so that HTTP handling is written once for
// both. One read and one write may be outstanding at the same time (as for Asio sockets); every
// operation honours the coroutine's cancellation and the deadline set with expires_after.
class Conn : public Closable {
 public:
  virtual ~Conn() = default;
  virtual asio::awaitable<IoResult> read_some(asio::mutable_buffer buffer) = 0;
  virtual asio::awaitable<IoResult> write(asio::const_buffer first,
                                          asio::const_buffer second = {}) = 0;
  // TLS close_notify where applicable, then a TCP shutdown of the sending side.
  virtual asio::awaitable<void> shutdown() = 0;
  // Closes at once; pending operations complete with operation_aborted.
  void close() override = 0;
  virtual bool is_open() const = 0;
  // Whether the peer sent something nobody has read yet (bytes, a TLS record, its close or a
  // reset), found without reading or waiting. An idle keep-alive connection for which this holds
  // must not carry another request: those bytes would be taken for its answer.
  virtual bool input_pending() = 0;
  // Waits until the peer sent something (bytes, a TLS record, its close or a reset) without
  // reading it: a parked wait holds no buffer. Ends with beast::error::timeout after timeout
  // (duration::max(): no limit), and honours the coroutine's cancellation. A timeout cancels
  // every operation pending on the socket, so use it where only one is.
  virtual asio::awaitable<error_code> wait_readable(std::chrono::steady_clock::duration timeout);
  // The same as an asynchronous operation (any completion token, a plain handler included): no
  // coroutine frame of its own while it waits, which is where a held stream spends its life (the
  // relay between two events, the client watch). The handler runs on the connection's executor,
  // never inside the call, and may destroy the connection.
  using WaitHandler = asio::any_completion_handler<void(error_code)>;
  template <class Token>
  auto async_wait_readable(std::chrono::steady_clock::duration timeout, Token&& token) {
    return asio::async_initiate<Token, void(error_code)>(
        [this, timeout](auto handler) {
          if (!input_buffered()) {
            release_buffers();  // nothing is read while it waits
          }
          if (timeout == std::chrono::steady_clock::duration::max() && !input_buffered()) {
            // No timer, nothing held in user space: the socket's own wait takes the handler as
            // it is (a client watch waits here for minutes; type erasure cost ~0.1 KiB more).
            socket().async_wait(tcp::socket::wait_read, std::move(handler));
          } else {
            start_wait_readable(timeout, WaitHandler(std::move(handler)));
          }
        },
        token);
  }
  // Whether input was read from the socket already and waits in user space (OpenSSL's records):
  // then the socket may never wake, and a wait must end at once.
  virtual bool input_buffered() const { return false; }
  // Gives back what the connection needs only while it reads (TLS: OpenSSL's 16.5 KiB read
  // buffer, which OpenSSL 3.0 kept while a held stream waited). Called before every wait for
  // input with nothing buffered; plain connections hold nothing of the kind.
  virtual void release_buffers() {}
  // Whether read_now works: reading into a buffer shared by every connection of the thread
  // (plain TCP: yes; TLS: no, OpenSSL reads the socket itself).
  virtual bool can_read_now() const = 0;
  // Reads what has arrived, without waiting: would_block when nothing has, eof at the end.
  virtual IoResult read_now(asio::mutable_buffer buffer) = 0;
  // read_some with a plain handler, for a watch that holds no coroutine frame (net::ClientWatch).
  // Connections that cannot wait or read this way (a batch line's capture) complete with
  // operation_not_supported.
  using ReadHandler = std::function<void(error_code, std::size_t)>;
  virtual void async_read_some(asio::mutable_buffer buffer, ReadHandler handler);
  virtual void expires_after(std::chrono::steady_clock::duration d) = 0;
  virtual void expires_never() = 0;
  virtual asio::any_io_executor get_executor() = 0;
  virtual tcp::socket& socket() = 0;

  // What cancels the operation the coroutine serving this connection awaits: the listener spawns
  // each connection's coroutine with a signal of its own and hands it over here (null for other
  // connections). A watch emits it when the client leaves, which cancels the request in its own
  // coroutine instead of racing it in a parallel group (net::ClientWatch).
  asio::cancellation_signal* session_cancel() const { return session_cancel_; }
  void set_session_cancel(asio::cancellation_signal* signal) { session_cancel_ = signal; }

 protected:
  virtual void start_wait_readable(std::chrono::steady_clock::duration timeout,
                                   WaitHandler handler);

 private:
  asio::cancellation_signal* session_cancel_ = nullptr;
};

std::unique_ptr<Conn> make_plain_conn(tcp::socket socket);
// A TLS connection's socket descriptor and OpenSSL connection, handed over (release_tls).
struct ReleasedTls {
  int fd = -1;
  SSL* ssl = nullptr;
};
// TLS connections only (nullopt for others): hands the socket's descriptor (non-blocking) and
// its OpenSSL connection to the caller, who then owns both (SSL_free, close), and leaves conn
// closed. For readers outside Asio's event loop (the health checker's probes).
std::optional<ReleasedTls> release_tls(Conn& conn);

// The TLS handshake (server side) is performed by the caller through tls_server_handshake.
std::unique_ptr<Conn> make_tls_server_conn(tcp::socket socket, asio::ssl::context& ctx);
asio::awaitable<error_code> tls_server_handshake(Conn& conn);

// Server-side TLS context from PEM files. Throws std::runtime_error naming the file.
std::shared_ptr<asio::ssl::context> make_server_tls_context(const std::string& cert_file,
                                                            const std::string& key_file);
// Client-side TLS context: system CAs plus ca_file when given; peers are always verified. It keeps
// the TLS sessions (tickets) each server sends, per URL, and connect_to offers one on each next
// connection to that server (common/net/tls_sessions.hpp).
std::shared_ptr<asio::ssl::context> make_client_tls_context(const std::string& ca_file);

enum class ConnectFailure { none, resolve, connect, tls, timeout };

struct ConnectResult {
  std::unique_ptr<Conn> conn;
  ConnectFailure failure = ConnectFailure::none;
  error_code ec;
  bool tls_resumed = false;  // https: the handshake resumed a session kept for url
};

// Resolves (resolver_for(executor): cached, off the io thread), connects and (for https)
// performs the TLS handshake with SNI and hostname verification, all within timeout. Honours
// the coroutine's cancellation at every step. An https connection offers a TLS session tls_ctx
// keeps for url (make_client_tls_context); a handshake that fails (not by timeout or
// cancellation) drops url's sessions.
asio::awaitable<ConnectResult> connect_to(const Url& url, asio::ssl::context* tls_ctx,
                                          std::chrono::steady_clock::duration timeout);

}  // namespace fg::net
