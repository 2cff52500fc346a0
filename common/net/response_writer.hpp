#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/steady_timer.hpp>

#include "common/net/conn.hpp"
#include "common/net/request_rules.hpp"
#include "common/openai/api.hpp"

namespace fg::net {

// Writes one response to a client. Several coroutines may write (a relay and a keep-alive
// ticker), so writes are serialised here. Tracks what went out: whether the head was sent,
// whether real content (not just keep-alive comments) started, when the first content byte left,
// and whether the response is complete, so that whoever ends the request (the session loop after
// an exception, a relay after a failure) knows how the client can still be told.
// Every write must finish within write_timeout: a client that stops reading is dropped.
class ResponseWriter {
 public:
  ResponseWriter(Conn& conn, std::string request_id, bool keep_alive,
                 std::chrono::steady_clock::duration write_timeout);

  const std::string& request_id() const { return request_id_; }
  bool head_sent() const { return head_sent_; }
  bool content_started() const { return content_started_; }
  bool broken() const { return broken_; }
  // A write did not finish within write_timeout (the client stopped reading).
  bool timed_out() const { return timed_out_; }
  bool finished() const { return finished_; }
  bool keep_alive() const { return keep_alive_ && !broken_; }
  // The response must close the connection (sent as "Connection: close" if the head is not
  // out yet).
  void refuse_keep_alive() { keep_alive_ = false; }
  unsigned status() const { return status_; }
  std::optional<std::chrono::steady_clock::time_point> first_content_at() const {
    return first_content_at_;
  }

  // A whole response with a known body.
  boost::asio::awaitable<bool> send_full(unsigned status, std::string content_type,
                                         std::string body, std::vector<Header> extra = {});
  // The API family whose error shape send_error writes (openai unless set): the session loop
  // sets it from the request's route (SessionHooks::error_api) before anything is written.
  void set_error_api(openai::Api api) { error_api_ = api; }
  openai::Api error_api() const { return error_api_; }

  // An error in the error API's shape: an HTTP response when nothing was sent yet, otherwise the
  // family's SSE error event that ends the stream (nothing, when the response cannot carry one).
  boost::asio::awaitable<bool> send_error(unsigned status, std::string message, std::string code,
                                          std::vector<Header> extra = {}, std::string param = {});
  boost::asio::awaitable<bool> send_reply(ErrorReply reply);
  // Starts a chunked event stream (Cache-Control: no-cache, X-Accel-Buffering: no); an error
  // can end it with an SSE error event whatever content_type says.
  boost::asio::awaitable<bool> begin_stream(unsigned status, std::string content_type,
                                            std::vector<Header> extra = {});
  // Starts a response whose body follows in pieces: of the given length, or chunked without one
  // (an error can end it with an SSE error event only when content_type is text/event-stream).
  boost::asio::awaitable<bool> begin_body(unsigned status, std::string content_type,
                                          std::optional<std::uint64_t> length,
                                          std::vector<Header> extra = {});
  // A piece of the body: one HTTP chunk, or the bytes as they are for a body of known length.
  boost::asio::awaitable<bool> send_chunk(std::string data);
  // Ends the body; last (when not empty) is its final piece, sent in the same write.
  boost::asio::awaitable<bool> end_stream(std::string last = {});
  // ": keep-alive" comment; opens the stream with 200 first if needed. Not content. Skipped
  // when content started, the response finished, or another write is in progress, so a comment
  // never follows the end of a stream.
  boost::asio::awaitable<bool> keepalive();
  // The keep-alive ticker's timer (ClientWatch), cancelled at the first content or the end of
  // the response, so that the ticker ends there; nullptr forgets it.
  void end_ticker_at_content(boost::asio::steady_timer* ticker) { ticker_ = ticker; }

 private:
  boost::asio::awaitable<bool> begin(unsigned status, std::string content_type,
                                     std::optional<std::uint64_t> length, std::vector<Header> extra,
                                     bool event_stream);
  boost::asio::awaitable<bool> write(std::string bytes);
  // Content started or the response ended: a keep-alive ticker has nothing more to do.
  void end_ticker();

  Conn& conn_;
  std::string request_id_;
  bool keep_alive_;
  openai::Api error_api_ = openai::Api::openai;
  std::chrono::steady_clock::duration write_timeout_;
  // Where a write waits for the one in progress: made only when two writes meet (a keep-alive
  // comment and the answer), so a response that writes alone holds no timer (120 bytes).
  std::unique_ptr<boost::asio::steady_timer> turn_;
  boost::asio::steady_timer* ticker_ = nullptr;
  bool writing_ = false;
  bool head_sent_ = false;
  bool streaming_ = false;     // chunked: the body's end is still to be written
  bool event_stream_ = false;  // text/event-stream: an SSE error event can still end it
  bool content_started_ = false;
  bool broken_ = false;
  bool timed_out_ = false;
  bool finished_ = false;
  unsigned status_ = 0;
  std::optional<std::chrono::steady_clock::time_point> first_content_at_;
};

}  // namespace fg::net
