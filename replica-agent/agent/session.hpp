#pragma once

#include "common/net/http_session.hpp"
#include "replica-agent/core/context.hpp"
#include "replica-agent/engines/engine.hpp"

namespace fg::net {
class OffThread;
}

namespace fg::agent {

class Registrar;
class ModelFetcher;

// The parts of the agent its sessions consult besides the shared state. Every pointer outlives
// every session; registrar and model may be null (no gateway, no model_file).
struct AgentServices {
  Engine* engine = nullptr;
  const Registrar* registrar = nullptr;  // its secret answers the gateway's URL challenge
  const ModelFetcher* model = nullptr;   // the model download's progress, in /health
  // Large request bodies are examined there, off the io thread; null: on the io thread.
  net::OffThread* off_thread = nullptr;
};

// What the agent's sessions (net::serve_session) do: HTTP/1.1 keep-alive, /health, /metrics, the
// URL challenge, the OpenAI routes (the key checked from the head), admission to slots, then the
// engine. ctx outlives every session.
net::SessionHooks agent_session_hooks(AgentContext* ctx, AgentServices services);

}  // namespace fg::agent
