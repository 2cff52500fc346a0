#pragma once

// The decisions of reading an HTTP request on a server, apart from sockets and parsers: which
// timeout applies now, what to answer when reading fails, and what to do once the head is in
// (refuse at once, ask for the body with 100 Continue, or read it). Pure: unit-tested and used by
// the session loop of both binaries (common/net/http_session.hpp).

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fg::net {

using Header = std::pair<std::string, std::string>;

// An answer the server layer gives by itself, as an OpenAI error body: a refusal decided from the
// head, or a request that could not be read.
struct ErrorReply {
  unsigned status = 400;
  std::string code;  // OpenAI "code": "invalid_api_key", "not_found", ...
  std::string message;
  std::vector<Header> headers;  // e.g. WWW-Authenticate, Allow
};

// The timed parts of reading a request. idle: a kept-alive connection waits for the first byte of
// its next request; head: from that first byte to the end of the headers (so a client trickling
// header bytes is cut however slowly it sends); body: from the end of the headers to the end of
// the body.
enum class ReadPhase { idle, head, body };

struct ReadTimeouts {
  std::chrono::steady_clock::duration idle = std::chrono::seconds(60);
  std::chrono::steady_clock::duration header = std::chrono::seconds(10);
  std::chrono::steady_clock::duration body = std::chrono::seconds(60);
};

// How long the phase may last in total, counted from its start (never restarted by a read).
std::chrono::steady_clock::duration phase_timeout(ReadPhase phase, const ReadTimeouts& timeouts);

// How long a streamed body (one a route takes piece by piece as it arrives, e.g. a 200 MB upload)
// may take once `received` bytes of it are in: the body timeout, plus one more for every
// `bytes_per_timeout` received. A large body that keeps coming is not cut by the body timeout,
// and a client trickling it still is (it must average bytes_per_timeout per body timeout).
std::chrono::steady_clock::duration streamed_body_allowance(const ReadTimeouts& timeouts,
                                                            std::uint64_t received,
                                                            std::uint64_t bytes_per_timeout);

// How reading a request ended when it did not produce one.
enum class ReadFailure {
  closed,            // the peer closed (or reset) between requests
  idle_timeout,      // no new request within the idle timeout
  header_timeout,    // the head did not complete within the header timeout
  body_timeout,      // the body did not complete within the body timeout
  malformed,         // not HTTP/1.x, or the peer closed in the middle of a request
  header_too_large,  // the head exceeds the header limit
  body_too_large,    // a chunked body grew past the body limit
};

// The failure a phase's deadline means.
ReadFailure timeout_failure(ReadPhase phase);

// What the client is told when reading failed; nullopt: close without a word. That is the answer
// to a client that left, to an idle keep-alive connection and to one too slow for the header or
// body timeout (a deadline closes the socket: a slow client is cut, not told).
// body_limit_key names the setting in the 413 message.
std::optional<ErrorReply> failure_reply(ReadFailure failure, std::uint64_t body_limit,
                                        std::string_view body_limit_key);

// The name a failure is counted under ("header_timeout", "bad_request", ...); "" for the ordinary
// ends of a connection (closed, idle_timeout), which are not counted.
std::string_view failure_reason(ReadFailure failure);

// What a request's head says about its body.
struct HeadFacts {
  std::optional<std::uint64_t> content_length;  // declared Content-Length
  bool chunked = false;                         // Transfer-Encoding: chunked
  bool expect_continue = false;                 // Expect: 100-continue
  bool has_body() const { return chunked || content_length.value_or(0) > 0; }
};

struct HeadDecision {
  // Answer this at once: the body is not read (and no 100 Continue sent), so the connection
  // closes afterwards unless the request has no body.
  std::optional<ErrorReply> reply;
  bool send_continue = false;  // the client waits for "100 Continue" before sending its body
};

// Decides once the head is in. refusal is the application's verdict on the head (unknown route,
// wrong method, missing key); it wins over the declared length, which must not exceed
// body_limit. A body is asked for (100 Continue) only when it will be read.
HeadDecision decide_head(const HeadFacts& facts, std::optional<ErrorReply> refusal,
                         std::uint64_t body_limit, std::string_view body_limit_key);

}  // namespace fg::net
