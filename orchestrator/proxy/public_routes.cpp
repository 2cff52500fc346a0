#include "orchestrator/proxy/public_routes.hpp"

#include <array>
#include <stdexcept>
#include <string>

namespace fg::proxy {

namespace {

using openai::Api;

constexpr std::array kProxied = {
    ProxiedRoute{PublicRoute::chat_completions, "/v1/chat/completions", "chat", Api::openai, true,
                 true},
    ProxiedRoute{PublicRoute::completions, "/v1/completions", "completions", Api::openai, true,
                 true},
    ProxiedRoute{PublicRoute::embeddings, "/v1/embeddings", "embeddings", Api::openai, false,
                 false},
    ProxiedRoute{PublicRoute::responses, "/v1/responses", "responses", Api::responses, true, false},
    ProxiedRoute{PublicRoute::responses_input_tokens, "/v1/responses/input_tokens", "input_tokens",
                 Api::responses, false, false},
    ProxiedRoute{PublicRoute::messages, "/v1/messages", "messages", Api::anthropic, true, false},
    ProxiedRoute{PublicRoute::messages_count_tokens, "/v1/messages/count_tokens", "count_tokens",
                 Api::anthropic, false, false},
    ProxiedRoute{PublicRoute::rerank, "/v1/rerank", "rerank", Api::openai, false, false},
};

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

std::span<const ProxiedRoute> proxied_routes() {
  return kProxied;
}

const ProxiedRoute* find_proxied(std::string_view path) {
  for (const auto& row : kProxied) {
    if (row.path == path) {
      return &row;
    }
  }
  return nullptr;
}

const ProxiedRoute& proxied(PublicRoute route) {
  for (const auto& row : kProxied) {
    if (row.route == route) {
      return row;
    }
  }
  throw std::logic_error("not a proxied route");
}

std::string_view target_path(std::string_view target) {
  return target.substr(0, target.find('?'));
}

openai::Api error_api_for_path(std::string_view path) {
  if (path == "/v1/messages" || path.substr(0, 13) == "/v1/messages/") {
    return Api::anthropic;
  }
  if (const auto* row = find_proxied(path)) {
    return row->api;
  }
  return Api::openai;
}

RouteDecision route_public(std::string_view method, std::string_view path, bool authorized) {
  RouteDecision decision;
  if (path.substr(0, 4) != "/v1/" && path != "/v1") {
    decision.refusal = refusal(404, "not_found", "no route for " + std::string(path));
    return decision;
  }
  if (!authorized) {
    decision.refusal =
        refusal(401, "invalid_api_key",
                "a valid API key is required (Authorization: Bearer <key>, or x-api-key: <key>)",
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
  // The Files and Batches API: the batch module judges each sub-path and its method.
  for (auto [prefix, route] : {std::pair{std::string_view("/v1/files"), PublicRoute::files},
                               std::pair{std::string_view("/v1/batches"), PublicRoute::batches}}) {
    if (path == prefix || (path.size() > prefix.size() && path.substr(0, prefix.size()) == prefix &&
                           path[prefix.size()] == '/')) {
      if (method != "GET" && method != "POST" && method != "DELETE") {
        decision.refusal = method_not_allowed("GET, POST, DELETE", path);
        return decision;
      }
      decision.route = route;
      return decision;
    }
  }
  const ProxiedRoute* row = find_proxied(path);
  if (row == nullptr) {
    decision.refusal = refusal(404, "not_found", "no route for " + std::string(path));
    return decision;
  }
  if (method != "POST") {
    decision.refusal = method_not_allowed("POST", path);
    return decision;
  }
  decision.route = row->route;
  return decision;
}

}  // namespace fg::proxy
