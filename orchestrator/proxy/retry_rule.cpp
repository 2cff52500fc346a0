#include "orchestrator/proxy/retry_rule.hpp"

namespace fg::proxy {

std::string_view to_string(UpstreamError e) {
  switch (e) {
    case UpstreamError::none:
      return "none";
    case UpstreamError::connect:
      return "connect";
    case UpstreamError::tls:
      return "tls";
    case UpstreamError::timeout:
      return "timeout";
    case UpstreamError::http_5xx:
      return "http_5xx";
    case UpstreamError::busy:
      return "busy";
    case UpstreamError::reset:
      return "reset";
    case UpstreamError::protocol:
      return "protocol";
    case UpstreamError::model_not_found:
      return "model_not_found";
    case UpstreamError::too_large:
      return "too_large";
    case UpstreamError::deadline:
      return "deadline";
  }
  return "unknown";
}

bool blames_replica(UpstreamError e) {
  switch (e) {
    case UpstreamError::connect:
    case UpstreamError::tls:
    case UpstreamError::timeout:
    case UpstreamError::http_5xx:
    case UpstreamError::reset:
    case UpstreamError::protocol:
    case UpstreamError::model_not_found:
      return true;
    case UpstreamError::none:
    case UpstreamError::busy:
    case UpstreamError::too_large:
    case UpstreamError::deadline:
      return false;
  }
  return false;
}

namespace {

// A keep-alive connection the replica had already closed: the failure is the connection's, and
// the replica cannot have started the work (the request never got through whole, or it failed
// at once, with no answer).
bool stale_connection(const FailedAttempt& f) {
  if (!f.pooled || f.answer_started || f.fresh_retry_used) {
    return false;
  }
  if (f.phase != Phase::send && f.phase != Phase::head) {
    return false;
  }
  // A timeout means the replica held the request: it may be reading a long prompt.
  if (f.error != UpstreamError::reset && f.error != UpstreamError::tls) {
    return false;
  }
  return !f.request_written || f.since_written <= kStaleWindow;
}

}  // namespace

RetryDecision retry_decision(const FailedAttempt& f) {
  if (f.deadline_passed || f.error == UpstreamError::deadline) {
    return {RetryAction::fail, false};
  }
  const bool blame = blames_replica(f.error);
  // Pingora's rule: once the client has content, a retry would duplicate or splice answers.
  if (f.content_sent) {
    return {RetryAction::fail, blame};
  }
  if (stale_connection(f)) {
    return {RetryAction::retry_fresh_connection, false};
  }
  // The same request would get the same oversized answer anywhere.
  if (f.error == UpstreamError::too_large || f.error == UpstreamError::none) {
    return {RetryAction::fail, blame};
  }
  return {f.attempts_left ? RetryAction::retry_elsewhere : RetryAction::fail, blame};
}

}  // namespace fg::proxy
