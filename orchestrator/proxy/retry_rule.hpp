#pragma once

// The retry rule: after an attempt with a replica failed, what the request does next, and whether
// the failure counts against the replica (passive health). Pure: no sockets, no clock.

#include <chrono>
#include <string_view>

namespace fg::proxy {

// Why an exchange with a replica failed (also the metric label values).
enum class UpstreamError {
  none,
  connect,          // TCP connect (or name resolution) failed
  tls,              // TLS handshake or record error
  timeout,          // upstream.connect/first_byte/idle_timeout passed
  http_5xx,         // the replica answered 5xx (other than 503)
  busy,             // 429 or 503: its slots are taken, perhaps by another gateway
  reset,            // the connection closed or reset before the answer was complete
  protocol,         // not HTTP, a malformed answer, an event above upstream.max_event_bytes
  model_not_found,  // 404 model_not_found: the replica serves another model
  too_large,        // a whole answer above upstream.max_response_bytes
  deadline,         // routing.request_timeout passed (the request's own, not the replica's)
};
std::string_view to_string(UpstreamError e);

// Where in the exchange the failure came.
enum class Phase {
  connect,  // opening the connection
  send,     // writing the request
  head,     // waiting for the answer's head
  body,     // reading a whole answer
  stream,   // relaying a streamed answer
};

// A pooled connection that fails this soon after the request was written, before any byte of an
// answer, was already dead (the replica closed it while idle and the close crossed the request):
// the replica cannot have started the work. Later, it may have: prefill takes minutes on a phone.
inline constexpr std::chrono::milliseconds kStaleWindow{1000};

struct FailedAttempt {
  // From the exchange.
  Phase phase = Phase::connect;
  UpstreamError error = UpstreamError::none;
  bool pooled = false;                                  // on a reused keep-alive connection
  bool request_written = false;                         // the whole request reached the connection
  bool answer_started = false;                          // some byte of an answer came back
  std::chrono::steady_clock::duration since_written{};  // from the end of the write to the failure
  // From the request.
  bool content_sent = false;      // content reached the client (keep-alive comments do not count)
  bool fresh_retry_used = false;  // this request already had its free retry
  bool attempts_left = false;     // routing.retries not used up
  bool deadline_passed = false;   // routing.request_timeout
};

enum class RetryAction {
  retry_elsewhere,         // a new attempt (another replica while one is routable)
  retry_fresh_connection,  // the same replica and slot on a new connection; not an attempt
  fail,                    // answer the client (an error, or an error event ending its stream)
};

struct RetryDecision {
  RetryAction action = RetryAction::fail;
  bool counts_against_replica = false;
};

RetryDecision retry_decision(const FailedAttempt& failure);

// Whether the replica is at fault for this kind of failure. Not for busy (its slots are taken),
// too_large (the request may ask for a huge answer: a client must not be able to eject phones)
// or deadline (the request's own).
bool blames_replica(UpstreamError e);

}  // namespace fg::proxy
