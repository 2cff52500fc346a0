#pragma once

// The public listener's routes, judged from the request line and the key alone (before any body
// byte is read). Pure.

#include <optional>
#include <string_view>

#include "common/net/request_rules.hpp"

namespace fg::proxy {

enum class PublicRoute { models, model, chat_completions, completions, embeddings };

struct RouteDecision {
  std::optional<PublicRoute> route;        // set when the request may go on
  std::optional<net::ErrorReply> refusal;  // otherwise the answer: 404, 401 or 405
};

// Paths outside /v1 get 404 whatever the key; then a missing or wrong key 401; then the method
// (GET for /v1/models and /v1/models/{id}, POST for the proxied routes) 405; an unknown /v1 path
// 404. authorized: the request's key is valid, or no key is configured.
RouteDecision route_public(std::string_view method, std::string_view path, bool authorized);

// The path of a request target (without its query).
std::string_view target_path(std::string_view target);

}  // namespace fg::proxy
