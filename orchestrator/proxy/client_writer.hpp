#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/net/conn.hpp"
#include "common/net/http_io.hpp"

namespace fg::proxy {

// Writes one response to the client. Several coroutines may write (the relay and the keep-alive
// ticker), so writes are serialised here. Tracks what went out: whether the head was sent, whether
// real content (not just keep-alive comments) started, and when the first content byte left.
class ClientWriter {
 public:
  ClientWriter(net::Conn& conn, std::string request_id, bool keep_alive,
               std::chrono::steady_clock::duration write_timeout);

  const std::string& request_id() const { return request_id_; }
  bool head_sent() const { return head_sent_; }
  bool content_started() const { return content_started_; }
  bool broken() const { return broken_; }
  bool finished() const { return finished_; }
  bool keep_alive() const { return keep_alive_ && !broken_; }
  unsigned status() const { return status_; }
  std::optional<std::chrono::steady_clock::time_point> first_content_at() const {
    return first_content_at_;
  }

  // A whole response with a known body.
  boost::asio::awaitable<bool> send_full(unsigned status, std::string content_type,
                                         std::string body, std::vector<net::Header> extra = {});
  // An OpenAI-style error: an HTTP response when nothing was sent yet, otherwise an SSE error
  // event that ends the stream.
  boost::asio::awaitable<bool> send_error(unsigned status, std::string message, std::string code,
                                          std::vector<net::Header> extra = {},
                                          std::string param = {});
  // Starts a chunked event stream.
  boost::asio::awaitable<bool> begin_stream(unsigned status, std::string content_type);
  boost::asio::awaitable<bool> send_chunk(std::string data);
  boost::asio::awaitable<bool> end_stream();
  // ": keep-alive" comment; opens the stream with 200 first if needed. Not content. Skipped
  // when content started, the response finished, or another write is in progress, so a comment
  // never follows the end of a stream.
  boost::asio::awaitable<bool> keepalive();

 private:
  boost::asio::awaitable<bool> write(std::string bytes);
  std::vector<net::Header> base_headers() const;

  net::Conn& conn_;
  std::string request_id_;
  bool keep_alive_;
  std::chrono::steady_clock::duration write_timeout_;
  boost::asio::steady_timer turn_;
  bool writing_ = false;
  bool head_sent_ = false;
  bool streaming_ = false;
  bool content_started_ = false;
  bool broken_ = false;
  bool finished_ = false;
  unsigned status_ = 0;
  std::optional<std::chrono::steady_clock::time_point> first_content_at_;
};

}  // namespace fg::proxy
