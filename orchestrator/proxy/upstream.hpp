#pragma once

#include <chrono>
#include <functional>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "common/net/http_io.hpp"
#include "common/openai/answer.hpp"
#include "common/openai/inspect.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/proxy/client_writer.hpp"
#include "orchestrator/proxy/context.hpp"
#include "orchestrator/proxy/retry_rule.hpp"

namespace fg::proxy {

// What every attempt of one request sends, and how the answer is relayed.
struct UpstreamRequest {
  const net::Request* client = nullptr;  // the client's request (its target is forwarded)
  const std::string* body = nullptr;     // what goes to the replica
  const openai::RequestInfo* info = nullptr;
  openai::Api api = openai::Api::openai;  // how the answer reports its usage
  // The gateway asked for stream usage the client did not: strip it from the relayed stream.
  bool strip_usage = false;
  std::chrono::steady_clock::time_point deadline;  // routing.request_timeout
  // Optional: called once, when a stream's first content has reached the client. No retry can
  // follow, so what only a retry needs (client, body) may be released then; neither is used
  // after it.
  std::function<void()> content_started;
};

struct ExchangeResult {
  enum class Kind {
    done,         // the replica's answer went to the client (whatever its status)
    failed,       // nothing more will come: retry_decision says what next, the caller answers
    client_gone,  // the client stopped reading
  };
  Kind kind = Kind::done;
  // The exchange's part of the facts the retry rule needs (phase, error, pooled, written, ...).
  FailedAttempt failure;
  unsigned upstream_status = 0;
  std::string retry_after;  // from a 429/503 answer
  std::string detail;       // what went wrong, in words for the client's error message
  openai::AnswerStats stats;
};

// One attempt on one replica: takes a clean pooled connection (when allow_pooled) or opens one,
// sends the request, reads the final answer's head (interim 1xx answers are skipped), and relays
// the answer through writer: a 200 event stream event by event (each event at most
// upstream.max_event_bytes), anything else whole (at most upstream.max_response_bytes; holding
// it lets a failure in the middle still go to another replica). Every wait is clipped to
// request->deadline. A failure is reported, never answered: the caller decides and answers.
boost::asio::awaitable<ExchangeResult> exchange(ProxyContext* ctx, const config::Config* config,
                                                fleet::Replica* replica,
                                                const UpstreamRequest* request, bool allow_pooled,
                                                ClientWriter* writer);
// The same, reporting into *result: what a held stream uses, since an awaited ExchangeResult is
// one more copy (248 bytes) in each coroutine frame it passes through, for the stream's life.
boost::asio::awaitable<void> exchange_into(ProxyContext* ctx, const config::Config* config,
                                           fleet::Replica* replica, const UpstreamRequest* request,
                                           bool allow_pooled, ClientWriter* writer,
                                           ExchangeResult* result);

}  // namespace fg::proxy
