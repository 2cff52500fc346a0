#include "orchestrator/proxy/public_routes.hpp"

#include <gtest/gtest.h>

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

}  // namespace
}  // namespace fg::proxy
