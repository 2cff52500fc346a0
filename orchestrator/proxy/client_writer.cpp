#include "orchestrator/proxy/client_writer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/openai/errors.hpp"
#include "common/openai/sse.hpp"

namespace fg::proxy {

namespace asio = boost::asio;

ClientWriter::ClientWriter(net::Conn& conn, std::string request_id, bool keep_alive,
                           std::chrono::steady_clock::duration write_timeout)
    : conn_(conn),
      request_id_(std::move(request_id)),
      keep_alive_(keep_alive),
      write_timeout_(write_timeout),
      turn_(conn.get_executor()) {}

std::vector<net::Header> ClientWriter::base_headers() const {
  return {{"X-Request-Id", request_id_}};
}

asio::awaitable<bool> ClientWriter::write(std::string bytes) {
  while (writing_) {
    turn_.expires_at(asio::steady_timer::time_point::max());
    co_await turn_.async_wait(asio::as_tuple(asio::use_awaitable));
  }
  if (broken_) {
    co_return false;
  }
  writing_ = true;
  conn_.expires_after(write_timeout_);
  auto [ec, n] = co_await conn_.write(asio::buffer(bytes));
  writing_ = false;
  turn_.cancel();
  if (ec) {
    broken_ = true;
    co_return false;
  }
  co_return true;
}

asio::awaitable<bool> ClientWriter::send_full(unsigned status, std::string content_type,
                                              std::string body, std::vector<net::Header> extra) {
  if (head_sent_) {
    co_return false;
  }
  head_sent_ = true;
  finished_ = true;
  status_ = status;
  content_started_ = true;
  first_content_at_ = std::chrono::steady_clock::now();
  auto headers = base_headers();
  headers.insert(headers.end(), extra.begin(), extra.end());
  co_return co_await write(net::full_response(status, content_type, body, headers, keep_alive_));
}

asio::awaitable<bool> ClientWriter::send_error(unsigned status, std::string message,
                                               std::string code, std::vector<net::Header> extra,
                                               std::string param) {
  auto type = std::string(openai::error_type_for_status(status));
  if (!head_sent_) {
    co_return co_await send_full(status, "application/json",
                                 openai::error_body(message, type, code, param), std::move(extra));
  }
  if (!streaming_ || finished_) {
    co_return false;
  }
  // No co_await inside && or ?: anywhere: GCC 12 miscompiles it (SIGILL at run time).
  bool ok = co_await write(net::chunk(openai::sse_error(message, type, code)));
  if (!ok) {
    co_return false;
  }
  co_return co_await end_stream();
}

asio::awaitable<bool> ClientWriter::begin_stream(unsigned status, std::string content_type) {
  if (head_sent_) {
    co_return false;
  }
  head_sent_ = true;
  streaming_ = true;
  status_ = status;
  auto headers = base_headers();
  headers.emplace_back("Cache-Control", "no-cache");
  headers.emplace_back("X-Accel-Buffering", "no");
  co_return co_await write(
      net::response_head(status, content_type, std::nullopt, headers, keep_alive_));
}

asio::awaitable<bool> ClientWriter::send_chunk(std::string data) {
  if (data.empty()) {
    co_return !broken_;
  }
  if (!content_started_) {
    content_started_ = true;
    first_content_at_ = std::chrono::steady_clock::now();
  }
  co_return co_await write(net::chunk(data));
}

asio::awaitable<bool> ClientWriter::end_stream() {
  if (finished_) {
    co_return !broken_;
  }
  finished_ = true;
  co_return co_await write(std::string(net::kLastChunk));
}

asio::awaitable<bool> ClientWriter::keepalive() {
  // A comment only keeps an idle line open. While another write is in progress the line is not
  // idle, and waiting for that write could put the comment after the stream's last chunk.
  if (content_started_ || finished_ || writing_) {
    co_return !broken_;
  }
  if (!head_sent_) {
    bool opened = co_await begin_stream(200, "text/event-stream");
    if (!opened) {
      co_return false;
    }
    if (content_started_ || finished_ || writing_) {
      co_return !broken_;
    }
  }
  co_return co_await write(net::chunk(openai::sse_comment("keep-alive")));
}

}  // namespace fg::proxy
