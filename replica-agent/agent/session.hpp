#pragma once

#include "common/net/http_session.hpp"
#include "replica-agent/agent/context.hpp"

namespace fg::agent {

// What the agent's sessions (net::serve_session) do: HTTP/1.1 keep-alive, /health, /metrics, the
// OpenAI routes (the key checked from the head), admission to slots. ctx outlives every session.
net::SessionHooks agent_session_hooks(AgentContext* ctx);

}  // namespace fg::agent
