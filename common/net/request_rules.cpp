#include "common/net/request_rules.hpp"

namespace fg::net {

std::chrono::steady_clock::duration phase_timeout(ReadPhase phase, const ReadTimeouts& timeouts) {
  switch (phase) {
    case ReadPhase::idle:
      return timeouts.idle;
    case ReadPhase::head:
      return timeouts.header;
    case ReadPhase::body:
      return timeouts.body;
  }
  return timeouts.header;
}

std::chrono::steady_clock::duration streamed_body_allowance(const ReadTimeouts& timeouts,
                                                            std::uint64_t received,
                                                            std::uint64_t bytes_per_timeout) {
  const std::uint64_t earned = bytes_per_timeout == 0 ? 0 : received / bytes_per_timeout;
  return timeouts.body * static_cast<std::int64_t>(1 + earned);
}

ReadFailure timeout_failure(ReadPhase phase) {
  switch (phase) {
    case ReadPhase::idle:
      return ReadFailure::idle_timeout;
    case ReadPhase::head:
      return ReadFailure::header_timeout;
    case ReadPhase::body:
      return ReadFailure::body_timeout;
  }
  return ReadFailure::header_timeout;
}

std::optional<ErrorReply> failure_reply(ReadFailure failure, std::uint64_t body_limit,
                                        std::string_view body_limit_key) {
  switch (failure) {
    case ReadFailure::closed:
    case ReadFailure::idle_timeout:
    case ReadFailure::header_timeout:
    case ReadFailure::body_timeout:
      return std::nullopt;
    case ReadFailure::malformed:
      return ErrorReply{400, "bad_request", "malformed HTTP request", {}};
    case ReadFailure::header_too_large:
      return ErrorReply{431, "headers_too_large", "the request headers are too large", {}};
    case ReadFailure::body_too_large:
      break;
  }
  return ErrorReply{413,
                    "request_too_large",
                    "the request body exceeds " + std::string(body_limit_key) + " (" +
                        std::to_string(body_limit) + " bytes)",
                    {}};
}

std::string_view failure_reason(ReadFailure failure) {
  switch (failure) {
    case ReadFailure::closed:
    case ReadFailure::idle_timeout:
      return "";
    case ReadFailure::header_timeout:
      return "header_timeout";
    case ReadFailure::body_timeout:
      return "body_timeout";
    case ReadFailure::malformed:
      return "bad_request";
    case ReadFailure::header_too_large:
      return "headers_too_large";
    case ReadFailure::body_too_large:
      return "request_too_large";
  }
  return "";
}

HeadDecision decide_head(const HeadFacts& facts, std::optional<ErrorReply> refusal,
                         std::uint64_t body_limit, std::string_view body_limit_key) {
  HeadDecision decision;
  if (refusal) {
    decision.reply = std::move(refusal);
    return decision;
  }
  if (facts.content_length && *facts.content_length > body_limit) {
    decision.reply = failure_reply(ReadFailure::body_too_large, body_limit, body_limit_key);
    return decision;
  }
  decision.send_continue = facts.expect_continue && facts.has_body();
  return decision;
}

}  // namespace fg::net
