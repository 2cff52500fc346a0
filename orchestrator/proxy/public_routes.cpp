#include "orchestrator/proxy/public_routes.hpp"

#include <string>

namespace fg::proxy {

namespace {

net::ErrorReply refusal(unsigned status, std::string code, std::string message,
                        std::vector<net::Header> headers = {}) {
  return net::ErrorReply{status, std::move(code), std::move(message), std::move(headers)};
}

net::ErrorReply method_not_allowed(std::string_view allowed, std::string_view path) {
  return refusal(405, "method_not_allowed",
                 "use " + std::string(allowed) + " for " + std::string(path),
                 {{"Allow", std::string(allowed)}});
}

}  // namespace

std::string_view target_path(std::string_view target) {
  return target.substr(0, target.find('?'));
}

RouteDecision route_public(std::string_view method, std::string_view path, bool authorized) {
  RouteDecision decision;
  if (path.substr(0, 4) != "/v1/" && path != "/v1") {
    decision.refusal = refusal(404, "not_found", "no route for " + std::string(path));
    return decision;
  }
  if (!authorized) {
    decision.refusal =
        refusal(401, "invalid_api_key", "a valid API key is required (Authorization: Bearer <key>)",
                {{"WWW-Authenticate", "Bearer"}});
    return decision;
  }
  if (path == "/v1/models" || path.substr(0, 11) == "/v1/models/") {
    if (method != "GET") {
      decision.refusal = method_not_allowed("GET", path);
      return decision;
    }
    decision.route = path == "/v1/models" ? PublicRoute::models : PublicRoute::model;
    return decision;
  }
  std::optional<PublicRoute> proxied;
  if (path == "/v1/chat/completions") {
    proxied = PublicRoute::chat_completions;
  } else if (path == "/v1/completions") {
    proxied = PublicRoute::completions;
  } else if (path == "/v1/embeddings") {
    proxied = PublicRoute::embeddings;
  }
  if (!proxied) {
    decision.refusal = refusal(404, "not_found", "no route for " + std::string(path));
    return decision;
  }
  if (method != "POST") {
    decision.refusal = method_not_allowed("POST", path);
    return decision;
  }
  decision.route = proxied;
  return decision;
}

}  // namespace fg::proxy
