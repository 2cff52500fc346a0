#pragma once

// One server session loop for every listener of both binaries (the gateway's public and admin
// listeners, the agent): it reads requests (a head first, judged before any body byte is read),
// answers what the application refuses from the head and what cannot be read (OpenAI-shaped
// errors), hands each complete request to the application's handler with a ResponseWriter,
// answers 500 when the handler throws, keeps the session tracker told for drains, and ends with a
// lingering close.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>

#include <boost/asio/awaitable.hpp>
#include <boost/beast/core/flat_buffer.hpp>

#include "common/net/body_budget.hpp"
#include "common/net/conn.hpp"
#include "common/net/request_reader.hpp"
#include "common/net/request_rules.hpp"
#include "common/net/response_writer.hpp"
#include "common/net/session_tracker.hpp"

namespace fg::net {

class OffThread;

struct SessionLimits {
  std::size_t header_limit = 16 * 1024;
  std::uint64_t body_limit = 4 * 1024 * 1024;
  // The names of the settings in 413 and 503 answers: string literals (views, so that the limits
  // read before every request allocate nothing).
  std::string_view body_limit_key = "server.max_body_bytes";
  ReadTimeouts timeouts;
  std::chrono::steady_clock::duration write_timeout = std::chrono::seconds(60);
  // Bytes a client may pipeline while a request is served before the session stops reading (and
  // so stops noticing a disconnect) on that connection.
  std::size_t pipeline_cap = 64 * 1024;
  // Optional: the listener's budget for the request bodies it holds at once, and its current
  // limit. A body that does not fit is refused from its head (503 server_busy, Retry-After) and
  // the connection closed; one that fits is counted until its request is finished.
  BodyBudget* body_budget = nullptr;
  std::uint64_t body_budget_limit = 0;
  std::string_view body_budget_key = "server.max_buffered_bytes";
};

// What a route that takes its body as a stream (SessionHooks::stream_body) is allowed: its own
// limit instead of the listener's body limit (named in the 413 answers), and no share of the
// listener's body budget (it holds one piece at a time).
struct StreamedBody {
  std::uint64_t limit = 0;
  std::string limit_key;
  // Memory the route holds while the body streams, reserved from the session's body budget
  // (SessionLimits::body_budget) until the request ends: streamed bodies count too.
  std::uint64_t held_bytes = 0;
};

// A request body read from the connection piece by piece while its handler runs, for a route
// SessionHooks::stream_body chose: the handler pulls the pieces and is never handed the whole.
// Its time is the body timeout plus one more for every kBytesPerTimeout received
// (streamed_body_allowance), so a large upload that keeps coming is not cut and a trickling one
// is.
class BodyStream {
 public:
  static constexpr std::uint64_t kBytesPerTimeout = 4 * 1024 * 1024;
  struct Piece {
    std::string data;                    // the next bytes of the body (may be empty)
    bool end = false;                    // the body is complete (data is its last piece)
    std::optional<ReadFailure> failure;  // reading failed; feed no more then
  };
  BodyStream(Conn* conn, boost::beast::flat_buffer* buffer, RequestReader* reader,
             const ReadTimeouts& timeouts, StreamedBody streamed, HeadFacts facts);
  boost::asio::awaitable<Piece> next();
  bool complete() const { return complete_; }
  std::uint64_t received() const { return received_; }
  // What to tell the client about a failure; nullopt: nothing (it left, or it was too slow).
  std::optional<ErrorReply> failure_reply(ReadFailure failure) const;
  // Bytes of the declared body still to come (read and dropped at the close, so that an early
  // answer is not lost to a reset); 0 when chunked or over the limit.
  std::uint64_t unread() const;

 private:
  Conn* conn_;
  boost::beast::flat_buffer* buffer_;
  RequestReader* reader_;
  ReadTimeouts timeouts_;
  StreamedBody streamed_;
  HeadFacts facts_;
  std::chrono::steady_clock::time_point start_;
  std::uint64_t received_ = 0;
  bool complete_ = false;
  std::optional<ReadFailure> failure_;
};

// One complete request, as a handler gets it. The writer already carries the request id
// (X-Request-Id) and whether the connection may be kept alive.
struct ServerRequest {
  Conn* conn = nullptr;
  boost::beast::flat_buffer* buffer = nullptr;  // bytes the client sent past this request
  Request* request = nullptr;
  ResponseWriter* writer = nullptr;
  std::size_t pipeline_cap = 0;
  // Set for a route that takes its body as a stream (then request->body() is empty): the body is
  // read through it. Null: the body was read whole into request->body().
  BodyStream* body = nullptr;
};

// Completes only when the client of r is gone (see watch_client in http_io.hpp).
boost::asio::awaitable<void> watch_client(ServerRequest r);

// What one listener's sessions do. Every member but the optional ones must be set; the object
// outlives every session.
struct SessionHooks {
  std::string listener;  // "public", "admin", "agent": for logs and counts
  // Read before each request, so that a reload applies to the next one.
  std::function<SessionLimits()> limits;
  // Optional. Judges a head (the message without its body) before the body is read or
  // 100 Continue sent: a refusal (unknown route, wrong method, missing key) is answered at once.
  std::function<std::optional<ErrorReply>(const Request& head)> check_head;
  // Optional. The API family of a request (from its head), whose error shape every error answer
  // to it takes, the session layer's own (401, 404, 413, 500) included; openai when unset.
  std::function<openai::Api(const Request& head)> error_api;
  // Optional. Called for a head that check_head let through and that has a body (so after the
  // API key was checked: an unauthenticated client never gets to send one): a value makes the
  // handler take the body as a stream (ServerRequest::body), within that limit, instead of the
  // session reading it whole within SessionLimits::body_limit. A handler that answers before
  // the stream is complete gets its connection closed (the rest cannot be told from a request).
  std::function<std::optional<StreamedBody>(const Request& head)> stream_body;
  // Serves one request and answers it through r.writer; returns whether the connection may
  // carry another request.
  std::function<boost::asio::awaitable<bool>(ServerRequest r)> handle;
  // Optional. Told of what the session layer itself answers or drops, by reason: an ErrorReply
  // code ("invalid_api_key", "header_timeout", ...), "write_timeout" or "exception".
  std::function<void(std::string_view reason)> count;
  std::mt19937_64* id_rng = nullptr;  // request ids
  SessionTracker* tracker = nullptr;  // optional: sessions a drain waits for
  // Optional. A request body larger than kDisposeBody is freed there once its request is done,
  // not on the io thread (a 4 MiB body's munmap).
  OffThread* off_thread = nullptr;
};

// Serves one connection until it closes, a request asks to close, or reading fails.
boost::asio::awaitable<void> serve_session(const SessionHooks* hooks, std::unique_ptr<Conn> conn);

}  // namespace fg::net
