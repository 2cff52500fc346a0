#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>

#include "common/net/conn.hpp"
#include "common/net/http_io.hpp"
#include "common/net/response_writer.hpp"
#include "common/openai/api.hpp"
#include "replica-agent/core/context.hpp"

namespace fg::agent {

// How a forwarded request went, for the request log line and the metrics.
struct ProxyProgress {
  unsigned status = 0;              // what the client got (the engine's status, or ours)
  bool finished = false;            // the whole response was written
  std::string outcome;              // "ok", "engine_unreachable", "engine_failed", ...
  std::uint64_t prompt_tokens = 0;  // from the engine's usage, when it reported it
  std::uint64_t completion_tokens = 0;
  double prefill_tps = 0;  // from the engine's timings (llama.cpp), when present
  double decode_tps = 0;
  // The request's API family: where its usage is (the Responses and Anthropic APIs report it in
  // their own fields, read with the gateway's readers, common/openai/answer.hpp).
  openai::Api api = openai::Api::openai;
  // The request's slot: freed as soon as the engine's answer is complete, before its last bytes
  // are written to the client (as for the simulator), so that a client sending its next request
  // the moment it has read this answer never finds the slot still taken.
  std::optional<SlotGuard>* slot = nullptr;
};

// Forwards one admitted OpenAI request (llama-server and openai engines) to the engine on a new
// connection and relays the answer as it arrives: the body bytes unchanged (a stream chunk by
// chunk), the status, Content-Type and Retry-After of the engine. Cancelling it (the client went
// away) closes the engine connection, which makes llama.cpp stop generating.
boost::asio::awaitable<void> forward_to_engine(AgentContext* ctx, net::ResponseWriter* client,
                                               const net::Request* request,
                                               ProxyProgress* progress);

}  // namespace fg::agent
