#include "replica-agent/agent/routes.hpp"

#include <string>

namespace fg::agent {

namespace {

AgentRouteDecision only(std::string_view allowed, std::string_view method, std::string_view path,
                        AgentRoute route) {
  AgentRouteDecision decision;
  if (method == allowed) {
    decision.route = route;
    return decision;
  }
  decision.refusal = net::ErrorReply{405,
                                     "method_not_allowed",
                                     "use " + std::string(allowed) + " for " + std::string(path),
                                     {{"Allow", std::string(allowed)}}};
  return decision;
}

}  // namespace

AgentRouteDecision route_agent(std::string_view method, std::string_view path, bool authorized) {
  if (path.substr(0, 4) == "/v1/" && !authorized) {
    AgentRouteDecision decision;
    decision.refusal = net::ErrorReply{401,
                                       "invalid_api_key",
                                       "a valid API key is required (Authorization: Bearer ...)",
                                       {{"WWW-Authenticate", "Bearer"}}};
    return decision;
  }
  if (path == "/health") {
    return only("GET", method, path, AgentRoute::health);
  }
  if (path == "/metrics") {
    return only("GET", method, path, AgentRoute::metrics);
  }
  if (path == "/fleetgate/v1/challenge") {
    return only("GET", method, path, AgentRoute::challenge);
  }
  if (path == "/v1/models") {
    return only("GET", method, path, AgentRoute::models);
  }
  if (path.substr(0, 11) == "/v1/models/") {
    return only("GET", method, path, AgentRoute::model);
  }
  if (path == "/v1/chat/completions") {
    return only("POST", method, path, AgentRoute::chat_completions);
  }
  if (path == "/v1/completions") {
    return only("POST", method, path, AgentRoute::completions);
  }
  if (path == "/v1/responses") {
    return only("POST", method, path, AgentRoute::responses);
  }
  if (path == "/v1/responses/input_tokens") {
    return only("POST", method, path, AgentRoute::responses_input_tokens);
  }
  if (path == "/v1/messages") {
    return only("POST", method, path, AgentRoute::messages);
  }
  if (path == "/v1/messages/count_tokens") {
    return only("POST", method, path, AgentRoute::messages_count_tokens);
  }
  if (path == "/v1/rerank") {
    return only("POST", method, path, AgentRoute::rerank);
  }
  AgentRouteDecision decision;
  decision.refusal = net::ErrorReply{404, "not_found", "no route for " + std::string(path), {}};
  return decision;
}

openai::Api agent_error_api(std::string_view path) {
  if (path == "/v1/messages" || path.substr(0, 13) == "/v1/messages/") {
    return openai::Api::anthropic;
  }
  if (path == "/v1/responses" || path.substr(0, 14) == "/v1/responses/") {
    return openai::Api::responses;
  }
  return openai::Api::openai;
}

}  // namespace fg::agent
