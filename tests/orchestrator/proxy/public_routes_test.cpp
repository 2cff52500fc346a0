#include "orchestrator/proxy/public_routes.hpp"

#include <algorithm>
#include <set>
#include <string>

#include <gtest/gtest.h>

#include "orchestrator/metrics/metrics.hpp"

namespace fg::proxy {
namespace {

unsigned refused(std::string_view method, std::string_view path, bool authorized) {
  auto d = route_public(method, path, authorized);
  EXPECT_NE(d.route.has_value(), d.refusal.has_value());
  return d.refusal ? d.refusal->status : 0;
}

TEST(PublicRoutes, OutsideV1Is404WhateverTheKey) {
  EXPECT_EQ(refused("GET", "/", false), 404u);
  EXPECT_EQ(refused("POST", "/v2/chat/completions", false), 404u);
  EXPECT_EQ(refused("GET", "/v1x", true), 404u);
}

TEST(PublicRoutes, TheKeyComesBeforeRouteAndMethod) {
  auto d = route_public("POST", "/v1/chat/completions", false);
  ASSERT_TRUE(d.refusal);
  EXPECT_EQ(d.refusal->status, 401u);
  EXPECT_EQ(d.refusal->code, "invalid_api_key");
  ASSERT_EQ(d.refusal->headers.size(), 1u);
  EXPECT_EQ(d.refusal->headers[0].first, "WWW-Authenticate");
  EXPECT_EQ(refused("PUT", "/v1/nothing", false), 401u);
  EXPECT_EQ(refused("GET", "/v1/models", false), 401u);
}

TEST(PublicRoutes, MethodsAndRoutes) {
  EXPECT_EQ(route_public("GET", "/v1/models", true).route, PublicRoute::models);
  EXPECT_EQ(route_public("GET", "/v1/models/m", true).route, PublicRoute::model);
  EXPECT_EQ(route_public("POST", "/v1/chat/completions", true).route,
            PublicRoute::chat_completions);
  EXPECT_EQ(route_public("POST", "/v1/completions", true).route, PublicRoute::completions);
  EXPECT_EQ(route_public("POST", "/v1/embeddings", true).route, PublicRoute::embeddings);
  auto d = route_public("POST", "/v1/models", true);
  ASSERT_TRUE(d.refusal);
  EXPECT_EQ(d.refusal->status, 405u);
  EXPECT_EQ(d.refusal->headers.at(0), (net::Header{"Allow", "GET"}));
  d = route_public("GET", "/v1/embeddings", true);
  ASSERT_TRUE(d.refusal);
  EXPECT_EQ(d.refusal->status, 405u);
  EXPECT_EQ(d.refusal->headers.at(0), (net::Header{"Allow", "POST"}));
  EXPECT_EQ(refused("POST", "/v1/nothing-here", true), 404u);
}

TEST(PublicRoutes, TargetPathDropsTheQuery) {
  EXPECT_EQ(target_path("/v1/models?x=1"), "/v1/models");
  EXPECT_EQ(target_path("/v1/models"), "/v1/models");
  EXPECT_EQ(target_path(""), "");
}

TEST(PublicRoutes, EveryApiRouteIsProxiedWithPost) {
  const std::pair<std::string_view, PublicRoute> routes[] = {
      {"/v1/responses", PublicRoute::responses},
      {"/v1/responses/input_tokens", PublicRoute::responses_input_tokens},
      {"/v1/messages", PublicRoute::messages},
      {"/v1/messages/count_tokens", PublicRoute::messages_count_tokens},
      {"/v1/rerank", PublicRoute::rerank},
  };
  for (const auto& [path, route] : routes) {
    EXPECT_EQ(route_public("POST", path, true).route, route) << path;
    EXPECT_EQ(refused("GET", path, true), 405u) << path;
    EXPECT_EQ(refused("POST", path, false), 401u) << path;
  }
  // Stateful parts of the Responses API are not routes at all.
  EXPECT_EQ(refused("GET", "/v1/responses/resp_123", true), 404u);
  EXPECT_EQ(refused("POST", "/v1/messages/batches", true), 404u);
}

TEST(PublicRoutes, EachRouteHasItsApiLabelAndUsageReader) {
  const auto& responses = proxied(PublicRoute::responses);
  EXPECT_EQ(responses.api, openai::Api::responses);
  EXPECT_EQ(responses.api_label, "responses");
  EXPECT_TRUE(responses.streams);
  EXPECT_FALSE(responses.adds_stream_usage);
  const auto& messages = proxied(PublicRoute::messages);
  EXPECT_EQ(messages.api, openai::Api::anthropic);
  EXPECT_EQ(messages.api_label, "messages");
  EXPECT_TRUE(messages.streams);
  EXPECT_EQ(proxied(PublicRoute::messages_count_tokens).api_label, "count_tokens");
  EXPECT_FALSE(proxied(PublicRoute::messages_count_tokens).streams);
  EXPECT_EQ(proxied(PublicRoute::responses_input_tokens).api_label, "input_tokens");
  EXPECT_EQ(proxied(PublicRoute::rerank).api, openai::Api::openai);
  EXPECT_FALSE(proxied(PublicRoute::embeddings).streams);
  EXPECT_TRUE(proxied(PublicRoute::chat_completions).adds_stream_usage);
  EXPECT_TRUE(proxied(PublicRoute::completions).adds_stream_usage);

  std::set<std::string_view> labels;
  for (const auto& row : proxied_routes()) {
    EXPECT_TRUE(labels.insert(row.api_label).second) << "label used twice: " << row.api_label;
    EXPECT_EQ(find_proxied(row.path), &row);
    // Every route that reports usage has its token series declared at zero.
    const bool counts_only = row.api_label == "input_tokens" || row.api_label == "count_tokens";
    const auto& declared = metrics::Metrics::kTokenApis;
    EXPECT_EQ(std::find(declared.begin(), declared.end(), row.api_label) != declared.end(),
              !counts_only)
        << row.api_label;
  }
  EXPECT_EQ(find_proxied("/v1/models"), nullptr);
}

TEST(PublicRoutes, AnthropicPathsAnswerInAnthropicShape) {
  EXPECT_EQ(error_api_for_path("/v1/messages"), openai::Api::anthropic);
  EXPECT_EQ(error_api_for_path("/v1/messages/count_tokens"), openai::Api::anthropic);
  EXPECT_EQ(error_api_for_path("/v1/messages/unknown"), openai::Api::anthropic);
  EXPECT_EQ(error_api_for_path("/v1/messagesx"), openai::Api::openai);
  EXPECT_EQ(error_api_for_path("/v1/responses"), openai::Api::responses);
  EXPECT_EQ(error_api_for_path("/v1/chat/completions"), openai::Api::openai);
  EXPECT_EQ(error_api_for_path("/v1/nothing"), openai::Api::openai);
  EXPECT_EQ(error_api_for_path("/"), openai::Api::openai);
}

TEST(PublicRoutes, TheRefusalNamesBothKeyHeaders) {
  auto d = route_public("POST", "/v1/messages", false);
  ASSERT_TRUE(d.refusal);
  EXPECT_NE(d.refusal->message.find("x-api-key"), std::string::npos);
  EXPECT_NE(d.refusal->message.find("Bearer"), std::string::npos);
}

}  // namespace
}  // namespace fg::proxy
