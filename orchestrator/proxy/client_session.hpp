#pragma once

#include "common/net/http_session.hpp"
#include "orchestrator/proxy/context.hpp"

namespace fg::proxy {

// What the public listener's sessions (net::serve_session) do: the OpenAI routes and the API key
// checked from the head, then queueing, relaying and failover. ctx outlives every session.
net::SessionHooks public_session_hooks(ProxyContext* ctx);

// The client key a request's head carries (Authorization: Bearer, or x-api-key), among the
// accepted ones; nullptr when none matches or the listener is open.
const ApiKeyInfo* api_key_of(const ProxyContext* ctx, const net::Request& head);

}  // namespace fg::proxy
