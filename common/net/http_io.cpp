#include "common/net/http_io.hpp"

#include <array>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/http/status.hpp>

#include "common/net/response_writer.hpp"

namespace fg::net {

asio::awaitable<void> watch_client(Conn* conn, beast::flat_buffer* buffer, std::size_t cap) {
  for (;;) {
    if (buffer->size() >= cap) {
      asio::steady_timer forever(co_await asio::this_coro::executor,
                                 asio::steady_timer::time_point::max());
      co_await forever.async_wait(asio::as_tuple(asio::use_awaitable));
      co_return;
    }
    // A watched connection usually receives nothing for minutes (a held stream): wait without a
    // buffer, and give back the one the request was read with (4 KiB per connection; 10,000
    // held streams kept ~40 MiB of them). Only bytes that came are read, in small pieces.
    if (buffer->size() == 0) {
      buffer->shrink_to_fit();
    }
    if (co_await conn->wait_readable(std::chrono::steady_clock::duration::max())) {
      co_return;
    }
    auto [ec, n] =
        co_await conn->read_some(buffer->prepare(std::min<std::size_t>(512, cap - buffer->size())));
    if (ec) {
      co_return;
    }
    buffer->commit(n);
  }
}

ClientWatch::ClientWatch(Conn* conn, beast::flat_buffer* buffer, std::size_t cap,
                         asio::cancellation_signal* cancel)
    : conn_(conn), buffer_(buffer), cap_(cap), cancel_(cancel) {}

WatchStarter::WatchStarter(asio::any_io_executor executor,
                           std::chrono::steady_clock::duration delay)
    : timer_(std::move(executor)), delay_(delay) {}

WatchStarter::~WatchStarter() {
  // Watches still listed belong to sessions the io_context destroys later: they must not reach
  // back here.
  for (ClientWatch* w = head_; w != nullptr; w = w->next_) {
    w->starter_ = nullptr;
  }
  alive_.reset();
}

void WatchStarter::add(ClientWatch* watch) {
  watch->starter_ = this;
  watch->due_ = std::chrono::steady_clock::now() + delay_;
  watch->prev_ = tail_;
  watch->next_ = nullptr;
  (tail_ != nullptr ? tail_->next_ : head_) = watch;
  tail_ = watch;
  if (!armed_) {
    arm();
  }
}

void WatchStarter::remove(ClientWatch* watch) {
  (watch->prev_ != nullptr ? watch->prev_->next_ : head_) = watch->next_;
  (watch->next_ != nullptr ? watch->next_->prev_ : tail_) = watch->prev_;
  watch->prev_ = watch->next_ = nullptr;
  watch->starter_ = nullptr;
  // The timer stays armed when the list empties: re-arming it for the next request would be a
  // system call (a timerfd update) each time; a tick that finds nothing due only re-arms.
}

void WatchStarter::arm() {
  armed_ = true;
  timer_.expires_at(head_->due_);
  timer_.async_wait([this, alive = std::weak_ptr<bool>(alive_)](error_code ec) {
    if (!alive.expired() && !ec) {
      on_tick();
    }
  });
}

void WatchStarter::on_tick() {
  armed_ = false;
  const auto now = std::chrono::steady_clock::now();
  while (head_ != nullptr && head_->due_ <= now) {
    ClientWatch* watch = head_;
    remove(watch);
    watch->begin();
  }
  if (head_ != nullptr) {
    arm();
  }
}

ClientWatch::~ClientWatch() {
  if (starter_ != nullptr) {
    starter_->remove(this);
  }
}

void ClientWatch::start(WatchStarter* later) {
  if (later != nullptr && later->delay_ > std::chrono::steady_clock::duration::zero()) {
    later->add(this);
  } else {
    begin();
  }
}

void ClientWatch::begin() {
  started_ = true;
  if (buffer_->size() < cap_) {
    wait();
  }
}

void ClientWatch::wait() {
  // A watched connection usually receives nothing for minutes (a held stream): wait without a
  // buffer, and give back the one the request was read with.
  if (buffer_->size() == 0) {
    buffer_->shrink_to_fit();
  }
  ++pending_;
  conn_->async_wait_readable(std::chrono::steady_clock::duration::max(),
                             [this](error_code ec) { on_readable(ec); });
}

void ClientWatch::on_readable(error_code ec) {
  if (stopped_) {
    done_one();  // the bytes, if any, stay in the socket for the session
    return;
  }
  if (ec) {
    client_left();
    done_one();
    return;
  }
  const auto space = buffer_->prepare(std::min<std::size_t>(512, cap_ - buffer_->size()));
  if (!conn_->can_read_now()) {
    // TLS: OpenSSL reads the socket itself. The read is short: something has arrived.
    ++pending_;
    conn_->async_read_some(space, [this](error_code rec, std::size_t n) { on_read(rec, n); });
    done_one();
    return;
  }
  const IoResult got = conn_->read_now(space);
  if (got.ec == asio::error::would_block) {
    wait();  // woken for nothing
  } else if (got.ec) {
    client_left();
  } else {
    buffer_->commit(got.bytes);
    if (buffer_->size() < cap_) {
      wait();
    }
  }
  done_one();
}

void ClientWatch::on_read(error_code ec, std::size_t n) {
  if (!ec) {
    buffer_->commit(n);  // even when stopped: the bytes left the socket, the session needs them
  }
  if (!stopped_) {
    if (ec) {
      client_left();
    } else if (buffer_->size() < cap_) {
      wait();
    }
  }
  done_one();
}

void ClientWatch::keep_alive(ResponseWriter* writer, std::chrono::steady_clock::duration interval) {
  writer_ = writer;
  interval_ = interval;
  ticker_ = std::make_unique<asio::steady_timer>(conn_->get_executor());
  writer_->end_ticker_at_content(ticker_.get());
  arm_ticker();
}

void ClientWatch::arm_ticker() {
  ticker_->expires_after(interval_);
  ++pending_;
  ticker_->async_wait([this](error_code ec) { on_tick(ec); });
}

void ClientWatch::on_tick(error_code ec) {
  if (stopped_ || ec || writer_->content_started() || writer_->finished()) {
    // Stopped, or cancelled by the writer at the first content, or nothing left to keep alive:
    // the ticker ends here instead of staying parked for the rest of the stream.
    drop_ticker();
    done_one();
    return;
  }
  // The comment is written by a short coroutine of its own (the writer serialises it with the
  // request's writes); it exists only while it writes.
  ++pending_;
  asio::co_spawn(
      conn_->get_executor(), writer_->keepalive(), [this](const std::exception_ptr&, bool written) {
        if (!stopped_ && written && !writer_->content_started() && !writer_->finished()) {
          arm_ticker();
        } else {
          drop_ticker();
        }
        done_one();
      });
  done_one();
}

void ClientWatch::drop_ticker() {
  writer_->end_ticker_at_content(nullptr);
  ticker_.reset();  // safe inside its own handler: its wait is over
}

void ClientWatch::client_left() {
  gone_ = true;
  if (cancel_ != nullptr) {
    cancel_->emit(asio::cancellation_type::terminal);
  }
}

void ClientWatch::stop() {
  if (stopped_) {
    return;
  }
  stopped_ = true;
  if (starter_ != nullptr) {
    starter_->remove(this);  // never started: nothing is pending on the socket
  }
  error_code ignored;
  conn_->socket().cancel(ignored);
  if (ticker_) {
    ticker_->cancel();
  }
}

void ClientWatch::done_one() {
  --pending_;
  if (stopped_ && pending_ == 0 && settled_) {
    // Resumes the coroutine awaiting settled(), which may destroy this watch: the last thing
    // any handler does. Called in place (it empties itself before it runs).
    std::move(settled_)();
  }
}

asio::awaitable<void> ClientWatch::settled() {
  if (pending_ == 0) {
    co_return;
  }
  co_await asio::async_initiate<const asio::use_awaitable_t<>&, void()>(
      [this](auto handler) {
        // Swapped in: Asio 1.26's move assignment wraps the handler in itself without end.
        asio::any_completion_handler<void()> waiting(std::move(handler));
        settled_.swap(waiting);
      },
      asio::use_awaitable);
}

asio::awaitable<void> drain_and_close(Conn* conn, std::uint64_t max_bytes) {
  std::array<char, 4096> sink;
  conn->expires_after(std::chrono::seconds(2));
  for (std::uint64_t drained = 0; drained < max_bytes && conn->is_open();) {
    auto [ec, n] = co_await conn->read_some(asio::buffer(sink));
    if (ec) {
      break;
    }
    drained += n;
  }
  conn->close();
}

void append_response_head(std::string& head, unsigned status, std::string_view content_type,
                          std::optional<std::uint64_t> content_length, std::string_view request_id,
                          const std::vector<Header>& extra, bool keep_alive) {
  head.reserve(head.size() + 256);
  head += "HTTP/1.1 ";
  head += std::to_string(status);
  head += ' ';
  auto reason = http::obsolete_reason(static_cast<http::status>(status));
  head.append(reason.data(), reason.size());
  head += "\r\n";
  if (!content_type.empty()) {
    head += "Content-Type: ";
    head += content_type;
    head += "\r\n";
  }
  if (content_length) {
    head += "Content-Length: ";
    head += std::to_string(*content_length);
    head += "\r\n";
  } else {
    head += "Transfer-Encoding: chunked\r\n";
  }
  if (!request_id.empty()) {
    head += "X-Request-Id: ";
    head += request_id;
    head += "\r\n";
  }
  for (const auto& [name, value] : extra) {
    head += name;
    head += ": ";
    head += value;
    head += "\r\n";
  }
  if (!keep_alive) {
    head += "Connection: close\r\n";
  }
  head += "\r\n";
}

std::string response_head(unsigned status, std::string_view content_type,
                          std::optional<std::uint64_t> content_length,
                          const std::vector<Header>& extra, bool keep_alive) {
  std::string head;
  append_response_head(head, status, content_type, content_length, {}, extra, keep_alive);
  return head;
}

std::string full_response(unsigned status, std::string_view content_type, std::string_view body,
                          const std::vector<Header>& extra, bool keep_alive) {
  std::string out = response_head(status, content_type, body.size(), extra, keep_alive);
  out.append(body.data(), body.size());
  return out;
}

std::string chunk(std::string_view data) {
  char size[20];
  int len = std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  std::string out;
  out.reserve(static_cast<std::size_t>(len) + data.size() + 2);
  out.append(size, static_cast<std::size_t>(len));
  out.append(data.data(), data.size());
  out += "\r\n";
  return out;
}

void ResponseParser::on_field_impl(http::field name, beast::string_view, beast::string_view value,
                                   error_code&) {
  if (name == http::field::content_type) {
    content_type_.assign(value.data(), value.size());
  } else if (name == http::field::retry_after) {
    retry_after_.assign(value.data(), value.size());
  }
}

void ResponseParser::on_body_init_impl(boost::optional<std::uint64_t> const& length, error_code&) {
  if (length) {
    declared_length_ = *length;
  }
}

std::size_t ResponseParser::on_body_impl(beast::string_view body, error_code&) {
  body_.append(body.data(), body.size());
  return body.size();
}

std::size_t ResponseParser::on_chunk_body_impl(std::uint64_t, beast::string_view body,
                                               error_code&) {
  body_.append(body.data(), body.size());
  return body.size();
}

}  // namespace fg::net
