#pragma once

// The agent's routes, judged from the request line and the key alone (before any body byte is
// read). Pure.

#include <optional>
#include <string_view>

#include "common/net/request_rules.hpp"
#include "common/openai/api.hpp"

namespace fg::agent {

enum class AgentRoute {
  health,
  metrics,
  challenge,
  models,
  model,
  chat_completions,
  completions,
  responses,
  responses_input_tokens,
  messages,
  messages_count_tokens,
  rerank,
};

struct AgentRouteDecision {
  std::optional<AgentRoute> route;         // set when the request may go on
  std::optional<net::ErrorReply> refusal;  // otherwise the answer: 401, 404 or 405
};

// /v1/... without a valid key gets 401 first; then /health, /metrics and the gateway's URL
// challenge /fleetgate/v1/challenge (GET, open: it proves the URL, not the caller), /v1/models and
// /v1/models/{id} (GET), /v1/chat/completions, /v1/completions, /v1/responses,
// /v1/responses/input_tokens, /v1/messages, /v1/messages/count_tokens and /v1/rerank (POST); a
// wrong method 405, anything else 404. authorized: the key is valid, or the agent has none.
AgentRouteDecision route_agent(std::string_view method, std::string_view path, bool authorized);

// The error shape of every answer to a path, as the gateway's: anthropic for /v1/messages and
// below, responses for /v1/responses and below, openai otherwise.
openai::Api agent_error_api(std::string_view path);

}  // namespace fg::agent
