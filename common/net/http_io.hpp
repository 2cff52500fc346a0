#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/asio/any_completion_handler.hpp>
#include <boost/asio/cancellation_signal.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/basic_parser.hpp>
#include <boost/beast/http/message.hpp>

#include "common/net/conn.hpp"
#include "common/net/request_reader.hpp"
#include "common/net/request_rules.hpp"

namespace fg::net {

namespace http = beast::http;

// Completes only when the client is gone (EOF or error), so it can run beside the work of a
// request (awaitable operator ||) and cancel it. Bytes the client pipelines meanwhile stay in
// buffer for the next request; past cap it stops reading (and so stops noticing a disconnect).
asio::awaitable<void> watch_client(Conn* conn, beast::flat_buffer* buffer, std::size_t cap);

class ResponseWriter;
class ClientWatch;

// Starts client watches late, all from one timer: a watch handed to it begins `delay` after
// ClientWatch::start, unless the request ended first (ClientWatch::stop). Asio begins a wait for
// input with an epoll_ctl(2) every time: one of 7 system calls per proxied request, where HAProxy
// makes 4 and one costs ~1.2 µs on this machine. A request answered within the delay makes none,
// and a client that leaves is still noticed at most `delay` late (a phone's prompt takes seconds
// to minutes). One timer for every watch: no timer, and no timerfd update, per request.
// Destroy it before the io_context: watches still listed then are detached, so the sessions the
// io_context destroys afterwards never reach back to it.
class WatchStarter {
 public:
  WatchStarter(asio::any_io_executor executor, std::chrono::steady_clock::duration delay);
  ~WatchStarter();
  WatchStarter(const WatchStarter&) = delete;
  WatchStarter& operator=(const WatchStarter&) = delete;

 private:
  friend class ClientWatch;
  void add(ClientWatch* watch);
  void remove(ClientWatch* watch);
  void arm();
  void on_tick();

  asio::steady_timer timer_;
  std::chrono::steady_clock::duration delay_;
  // The watches not started yet, oldest first (each is due delay_ after it was added).
  ClientWatch* head_ = nullptr;
  ClientWatch* tail_ = nullptr;
  bool armed_ = false;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);  // for the timer's handler
};

// What runs beside a request that may take minutes, in the request's own coroutine instead of a
// parallel group: noticing that the client left, and keep-alive comments while a stream waits.
// Plain completion handlers, no coroutine frames: a held stream's watch_client and keep-alive
// ticker, each in a group of co_spawned coroutines, cost ~4.5 KiB (gateway, 2026-12-07).
//
// When the client closes or fails, gone() turns true and *cancel is emitted: the operation the
// request's coroutine awaits is cancelled (and, as Asio does once a coroutine is cancelled, every
// co_await after it throws operation_aborted until the coroutine resets its cancellation state).
// Bytes the client pipelines meanwhile stay in buffer, as with watch_client (past cap it stops
// reading). Before it is destroyed: stop(), then co_await settled(), after which none of its
// handlers runs any more.
class ClientWatch {
 public:
  ClientWatch(Conn* conn, beast::flat_buffer* buffer, std::size_t cap,
              asio::cancellation_signal* cancel);
  ClientWatch(const ClientWatch&) = delete;
  ClientWatch& operator=(const ClientWatch&) = delete;

  // Starts watching now, or through later (null: now).
  void start(WatchStarter* later = nullptr);
  ~ClientWatch();
  // ": keep-alive" comments through writer every interval until the answer's content starts or it
  // ends (ResponseWriter::keepalive); the writer ends the ticker at its first content.
  void keep_alive(ResponseWriter* writer, std::chrono::steady_clock::duration interval);
  bool gone() const { return gone_; }
  // It has begun watching the socket (through a WatchStarter: once its delay passed).
  bool started() const { return started_; }
  // The keep-alive ticker is on (keep_alive, until the first content or the end).
  bool keeping_alive() const { return ticker_ != nullptr; }
  // Cancels what is pending (the wait on the client socket: no other operation is outstanding
  // on it once the request's coroutine has stopped writing) and stops every handler.
  void stop();
  // Completes when no handler of the watch is pending (at once when none is).
  asio::awaitable<void> settled();

 private:
  friend class WatchStarter;
  void begin();
  void wait();
  void on_readable(error_code ec);
  void on_read(error_code ec, std::size_t n);
  void arm_ticker();
  void on_tick(error_code ec);
  void drop_ticker();
  void client_left();
  void done_one();

  Conn* conn_;
  beast::flat_buffer* buffer_;
  std::size_t cap_;
  asio::cancellation_signal* cancel_;
  ResponseWriter* writer_ = nullptr;
  std::chrono::steady_clock::duration interval_{};
  std::unique_ptr<asio::steady_timer> ticker_;  // only until the answer's content starts
  int pending_ = 0;                             // handlers still to run
  bool stopped_ = false;
  bool gone_ = false;
  bool started_ = false;
  asio::any_completion_handler<void()> settled_;  // the coroutine awaiting settled()
  // While it waits in a WatchStarter's list.
  WatchStarter* starter_ = nullptr;
  ClientWatch* prev_ = nullptr;
  ClientWatch* next_ = nullptr;
  std::chrono::steady_clock::time_point due_{};
};

// The second half of a lingering close (after conn->shutdown()): reads what the peer still sends
// until it closes too (at most 2 s, max_bytes), so unread input does not turn the last response
// into a reset (which makes the peer's kernel drop the response unread), then closes. The session
// raises max_bytes to a refused request's declared body, so a client that sends its body anyway
// still gets its answer.
inline constexpr std::uint64_t kLingerBytes = 256 * 1024;
asio::awaitable<void> drain_and_close(Conn* conn, std::uint64_t max_bytes = kLingerBytes);

// "HTTP/1.1 <status> <reason>\r\n" + headers + "\r\n". With content_length unset the body is
// sent chunked.
std::string response_head(unsigned status, std::string_view content_type,
                          std::optional<std::uint64_t> content_length,
                          const std::vector<Header>& extra, bool keep_alive);
// The same appended to head, with "X-Request-Id: request_id" (unless empty) before extra: what
// ResponseWriter sends, built without a vector of headers or a copy of the id.
void append_response_head(std::string& head, unsigned status, std::string_view content_type,
                          std::optional<std::uint64_t> content_length, std::string_view request_id,
                          const std::vector<Header>& extra, bool keep_alive);

// A complete response with a body of known length.
std::string full_response(unsigned status, std::string_view content_type, std::string_view body,
                          const std::vector<Header>& extra, bool keep_alive);

// One HTTP/1.1 chunk ("<hex>\r\n" + data + "\r\n"); data must not be empty.
std::string chunk(std::string_view data);
inline constexpr std::string_view kLastChunk = "0\r\n\r\n";

// A response parser that hands body bytes over as they arrive (chunked decoding included), for
// relaying. Only the headers the gateway uses are kept.
class ResponseParser final : public http::basic_parser<false> {
 public:
  ResponseParser() = default;

  unsigned status() const { return status_; }
  const std::string& content_type() const { return content_type_; }
  const std::string& retry_after() const { return retry_after_; }
  std::optional<std::uint64_t> declared_length() const { return declared_length_; }
  // Decoded body bytes received since the last take_body().
  std::string take_body() { return std::exchange(body_, {}); }
  std::size_t pending_body() const { return body_.size(); }

 private:
  void on_request_impl(http::verb, beast::string_view, beast::string_view, int,
                       error_code&) override {}
  void on_response_impl(int code, beast::string_view, int, error_code&) override {
    status_ = static_cast<unsigned>(code);
  }
  void on_field_impl(http::field name, beast::string_view, beast::string_view value,
                     error_code&) override;
  void on_header_impl(error_code&) override {}
  void on_body_init_impl(boost::optional<std::uint64_t> const& length, error_code&) override;
  std::size_t on_body_impl(beast::string_view body, error_code&) override;
  void on_chunk_header_impl(std::uint64_t, beast::string_view, error_code&) override {}
  std::size_t on_chunk_body_impl(std::uint64_t, beast::string_view body, error_code&) override;
  void on_finish_impl(error_code&) override {}

  unsigned status_ = 0;
  std::string content_type_;
  std::string retry_after_;
  std::optional<std::uint64_t> declared_length_;
  std::string body_;
};

}  // namespace fg::net
