#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "common/net/http_io.hpp"
#include "common/openai/inspect.hpp"
#include "orchestrator/fleet/registry.hpp"
#include "orchestrator/proxy/client_writer.hpp"
#include "orchestrator/proxy/context.hpp"

namespace fg::proxy {

// Why an exchange with a replica failed (metric label values).
enum class UpstreamError { none, connect, tls, timeout, http_5xx, busy, reset, protocol };
std::string_view to_string(UpstreamError e);

struct ExchangeResult {
  enum class Kind {
    done,                  // the response went to the client (any status)
    retryable,             // failed before any content reached the client: another replica may
    failed_after_content,  // failed mid-stream; the stream was ended with an error event
    client_gone,           // the client stopped reading
  };
  Kind kind = Kind::done;
  UpstreamError error = UpstreamError::none;
  unsigned upstream_status = 0;
  std::string retry_after;  // from a 429/503 replica answer
  std::optional<std::uint64_t> prompt_tokens;
  std::optional<std::uint64_t> completion_tokens;
};

// One attempt: sends the request to the replica (pooled connection or a new one) and relays the
// answer through writer: streamed chunk by chunk for "stream": true, whole otherwise (a
// non-streamed answer is a short JSON document; holding it lets a failure mid-body be retried).
// body is what goes to the replica (the client's, or with stream usage requested); with
// strip_usage the usage the client did not ask for is removed from the relayed stream.
boost::asio::awaitable<ExchangeResult> exchange(ProxyContext* ctx, const config::Config* config,
                                                fleet::Replica* replica,
                                                const net::Request* request,
                                                const std::string* body,
                                                const openai::RequestInfo* info, bool strip_usage,
                                                ClientWriter* writer);

}  // namespace fg::proxy
