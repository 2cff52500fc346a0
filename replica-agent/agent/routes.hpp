#pragma once

// The agent's routes, judged from the request line and the key alone (before any body byte is
// read). Pure.

#include <optional>
#include <string_view>

#include "common/net/request_rules.hpp"

namespace fg::agent {

enum class AgentRoute { health, metrics, models, model, chat_completions, completions };

struct AgentRouteDecision {
  std::optional<AgentRoute> route;         // set when the request may go on
  std::optional<net::ErrorReply> refusal;  // otherwise the answer: 401, 404 or 405
};

// /v1/... without a valid key gets 401 first; then /health and /metrics (GET), /v1/models and
// /v1/models/{id} (GET), /v1/chat/completions and /v1/completions (POST); a wrong method 405,
// anything else 404. authorized: the key is valid, or the agent has none.
AgentRouteDecision route_agent(std::string_view method, std::string_view path, bool authorized);

}  // namespace fg::agent
