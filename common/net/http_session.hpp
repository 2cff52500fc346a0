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

struct SessionLimits {
  std::size_t header_limit = 16 * 1024;
  std::uint64_t body_limit = 4 * 1024 * 1024;
  std::string body_limit_key = "server.max_body_bytes";  // named in 413 answers
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
  std::string body_budget_key = "server.max_buffered_bytes";  // named in 503 answers
};

// One complete request, as a handler gets it. The writer already carries the request id
// (X-Request-Id) and whether the connection may be kept alive.
struct ServerRequest {
  Conn* conn = nullptr;
  boost::beast::flat_buffer* buffer = nullptr;  // bytes the client sent past this request
  Request* request = nullptr;
  ResponseWriter* writer = nullptr;
  std::size_t pipeline_cap = 0;
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
  // Serves one request and answers it through r.writer; returns whether the connection may
  // carry another request.
  std::function<boost::asio::awaitable<bool>(ServerRequest r)> handle;
  // Optional. Told of what the session layer itself answers or drops, by reason: an ErrorReply
  // code ("invalid_api_key", "header_timeout", ...), "write_timeout" or "exception".
  std::function<void(std::string_view reason)> count;
  std::mt19937_64* id_rng = nullptr;  // request ids
  SessionTracker* tracker = nullptr;  // optional: sessions a drain waits for
};

// Serves one connection until it closes, a request asks to close, or reading fails.
boost::asio::awaitable<void> serve_session(const SessionHooks* hooks, std::unique_ptr<Conn> conn);

}  // namespace fg::net
