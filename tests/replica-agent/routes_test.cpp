#include "replica-agent/agent/routes.hpp"

#include <gtest/gtest.h>

namespace fg::agent {
namespace {

TEST(AgentRoutes, V1NeedsTheKeyFirst) {
  auto d = route_agent("POST", "/v1/chat/completions", false);
  ASSERT_TRUE(d.refusal);
  EXPECT_EQ(d.refusal->status, 401u);
  EXPECT_EQ(route_agent("GET", "/v1/nothing", false).refusal->status, 401u);
  // /health and /metrics are open: the gateway probes and Prometheus have no key.
  EXPECT_EQ(route_agent("GET", "/health", false).route, AgentRoute::health);
  EXPECT_EQ(route_agent("GET", "/metrics", false).route, AgentRoute::metrics);
  // The URL challenge proves the URL, not the caller: open too.
  EXPECT_EQ(route_agent("GET", "/fleetgate/v1/challenge", false).route, AgentRoute::challenge);
  EXPECT_EQ(route_agent("POST", "/fleetgate/v1/challenge", true).refusal->status, 405u);
}

TEST(AgentRoutes, MethodsAndUnknownPaths) {
  EXPECT_EQ(route_agent("GET", "/v1/models", true).route, AgentRoute::models);
  EXPECT_EQ(route_agent("GET", "/v1/models/m", true).route, AgentRoute::model);
  EXPECT_EQ(route_agent("POST", "/v1/chat/completions", true).route, AgentRoute::chat_completions);
  EXPECT_EQ(route_agent("POST", "/v1/completions", true).route, AgentRoute::completions);
  auto d = route_agent("POST", "/health", true);
  ASSERT_TRUE(d.refusal);
  EXPECT_EQ(d.refusal->status, 405u);
  EXPECT_EQ(d.refusal->headers.at(0), (net::Header{"Allow", "GET"}));
  EXPECT_EQ(route_agent("GET", "/v1/chat/completions", true).refusal->status, 405u);
  EXPECT_EQ(route_agent("GET", "/nothing", false).refusal->status, 404u);
  EXPECT_EQ(route_agent("POST", "/v1/embeddings", true).refusal->status, 404u);
}

TEST(AgentRoutes, EveryApiRoute) {
  EXPECT_EQ(route_agent("POST", "/v1/responses", true).route, AgentRoute::responses);
  EXPECT_EQ(route_agent("POST", "/v1/responses/input_tokens", true).route,
            AgentRoute::responses_input_tokens);
  EXPECT_EQ(route_agent("POST", "/v1/messages", true).route, AgentRoute::messages);
  EXPECT_EQ(route_agent("POST", "/v1/messages/count_tokens", true).route,
            AgentRoute::messages_count_tokens);
  EXPECT_EQ(route_agent("POST", "/v1/rerank", true).route, AgentRoute::rerank);
  EXPECT_EQ(route_agent("GET", "/v1/messages", true).refusal->status, 405u);
  EXPECT_EQ(route_agent("POST", "/v1/messages", false).refusal->status, 401u);
  EXPECT_EQ(agent_error_api("/v1/messages"), openai::Api::anthropic);
  EXPECT_EQ(agent_error_api("/v1/messages/count_tokens"), openai::Api::anthropic);
  EXPECT_EQ(agent_error_api("/v1/responses"), openai::Api::responses);
  EXPECT_EQ(agent_error_api("/v1/chat/completions"), openai::Api::openai);
}

}  // namespace
}  // namespace fg::agent
