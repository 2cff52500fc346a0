#include "common/net/response_writer.hpp"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core/error.hpp>

#include "common/net/http_io.hpp"
#include "common/openai/errors.hpp"
#include "common/openai/sse.hpp"

namespace fg::net {

ResponseWriter::ResponseWriter(Conn& conn, std::string request_id, bool keep_alive,
                               std::chrono::steady_clock::duration write_timeout)
    : conn_(conn),
      request_id_(std::move(request_id)),
      keep_alive_(keep_alive),
      write_timeout_(write_timeout) {}

void ResponseWriter::end_ticker() {
  if (ticker_ != nullptr) {
    ticker_->cancel();
    ticker_ = nullptr;
  }
}

asio::awaitable<bool> ResponseWriter::write(std::string bytes) {
  while (writing_) {
    if (!turn_) {
      turn_ = std::make_unique<asio::steady_timer>(conn_.get_executor());
    }
    turn_->expires_at(asio::steady_timer::time_point::max());
    co_await turn_->async_wait(asio::as_tuple(asio::use_awaitable));
  }
  if (broken_) {
    co_return false;
  }
  writing_ = true;
  conn_.expires_after(write_timeout_);
  auto [ec, n] = co_await conn_.write(asio::buffer(bytes));
  writing_ = false;
  if (turn_) {
    turn_->cancel();
  }
  if (ec) {
    broken_ = true;
    timed_out_ = ec == beast::error::timeout;
    co_return false;
  }
  co_return true;
}

asio::awaitable<bool> ResponseWriter::send_full(unsigned status, std::string content_type,
                                                std::string body, std::vector<Header> extra) {
  if (head_sent_) {
    co_return false;
  }
  head_sent_ = true;
  finished_ = true;
  status_ = status;
  content_started_ = true;
  first_content_at_ = std::chrono::steady_clock::now();
  end_ticker();
  // One allocation for the whole response: the head is written with the request id in place
  // into a string sized for head and body (before: a vector of headers, a copy of the id, and
  // the head string grown for the body: 3 of the ~44 allocations of a proxied JSON request).
  // One buffer, so a TLS client gets one record, not two.
  std::string out;
  out.reserve(256 + body.size());
  append_response_head(out, status, content_type, body.size(), request_id_, extra, keep_alive_);
  out += body;
  co_return co_await write(std::move(out));
}

asio::awaitable<bool> ResponseWriter::send_error(unsigned status, std::string message,
                                                 std::string code, std::vector<Header> extra,
                                                 std::string param) {
  if (!head_sent_) {
    co_return co_await send_full(
        status, "application/json",
        openai::api_error_body(error_api_, static_cast<int>(status), message, code, param),
        std::move(extra));
  }
  if (!event_stream_ || finished_) {
    co_return false;
  }
  // No co_await inside && or ?: anywhere: GCC 12 miscompiles it (SIGILL at run time).
  bool ok = co_await write(
      chunk(openai::api_stream_error(error_api_, static_cast<int>(status), message, code)));
  if (!ok) {
    co_return false;
  }
  co_return co_await end_stream();
}

asio::awaitable<bool> ResponseWriter::send_reply(ErrorReply reply) {
  co_return co_await send_error(reply.status, std::move(reply.message), std::move(reply.code),
                                std::move(reply.headers));
}

asio::awaitable<bool> ResponseWriter::begin_stream(unsigned status, std::string content_type,
                                                   std::vector<Header> extra) {
  extra.emplace_back("Cache-Control", "no-cache");
  extra.emplace_back("X-Accel-Buffering", "no");
  // An event stream whatever type its source named: the client asked for one.
  co_return co_await begin(status, std::move(content_type), std::nullopt, std::move(extra), true);
}

asio::awaitable<bool> ResponseWriter::begin_body(unsigned status, std::string content_type,
                                                 std::optional<std::uint64_t> length,
                                                 std::vector<Header> extra) {
  const bool event_stream = content_type.rfind("text/event-stream", 0) == 0;
  co_return co_await begin(status, std::move(content_type), length, std::move(extra), event_stream);
}

asio::awaitable<bool> ResponseWriter::begin(unsigned status, std::string content_type,
                                            std::optional<std::uint64_t> length,
                                            std::vector<Header> extra, bool event_stream) {
  if (head_sent_) {
    co_return false;
  }
  head_sent_ = true;
  streaming_ = !length.has_value();
  event_stream_ = streaming_ && event_stream;
  status_ = status;
  std::string head;
  append_response_head(head, status, content_type, length, request_id_, extra, keep_alive_);
  co_return co_await write(std::move(head));
}

asio::awaitable<bool> ResponseWriter::send_chunk(std::string data) {
  if (data.empty()) {
    co_return !broken_;
  }
  if (!content_started_) {
    content_started_ = true;
    first_content_at_ = std::chrono::steady_clock::now();
    end_ticker();
  }
  if (!streaming_) {
    co_return co_await write(std::move(data));
  }
  co_return co_await write(chunk(data));
}

asio::awaitable<bool> ResponseWriter::end_stream(std::string last) {
  if (finished_) {
    co_return !broken_;
  }
  finished_ = true;
  end_ticker();
  if (!last.empty() && !content_started_) {
    content_started_ = true;
    first_content_at_ = std::chrono::steady_clock::now();
  }
  if (!streaming_) {
    if (last.empty()) {
      co_return !broken_;
    }
    co_return co_await write(std::move(last));
  }
  std::string bytes = last.empty() ? std::string() : chunk(last);
  bytes += kLastChunk;
  co_return co_await write(std::move(bytes));
}

asio::awaitable<bool> ResponseWriter::keepalive() {
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
  co_return co_await write(chunk(openai::sse_comment("keep-alive")));
}

}  // namespace fg::net
