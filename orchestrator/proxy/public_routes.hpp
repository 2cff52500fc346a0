#pragma once

// The public listener's routes, judged from the request line and the key alone (before any body
// byte is read), and what the gateway does with each proxied route. Pure.

#include <optional>
#include <span>
#include <string_view>

#include "common/net/request_rules.hpp"
#include "common/openai/api.hpp"

namespace fg::proxy {

enum class PublicRoute {
  models,
  model,
  chat_completions,
  completions,
  embeddings,
  responses,
  responses_input_tokens,
  messages,
  messages_count_tokens,
  rerank,
  files,    // /v1/files and below: the Files API (orchestrator/batch, docs/batch.md)
  batches,  // /v1/batches and below: the Batch API
};

// A route the gateway relays to a replica through the queue and a slot. One row per route in
// public_routes.cpp: the only place these choices are made.
struct ProxiedRoute {
  PublicRoute route;
  std::string_view path;
  // The "api" label of fleetgate_requests_total and fleetgate_tokens_total, and the log line's
  // "api": chat, completions, embeddings, responses, input_tokens, messages, count_tokens, rerank.
  std::string_view api_label;
  openai::Api api;  // how usage is read, the error shape, the request rules
  // "stream": true is relayed as an event stream; on the other routes the answer is always whole.
  bool streams;
  // Streams whose client did not ask for usage get stream_options.include_usage added (and the
  // usage stripped on the way back): chat and completions; the other APIs always report it.
  bool adds_stream_usage;
};

// Every proxied route, in the order docs/api.md lists them.
std::span<const ProxiedRoute> proxied_routes();
// The row of a proxied path, or nullptr.
const ProxiedRoute* find_proxied(std::string_view path);
const ProxiedRoute& proxied(PublicRoute route);  // route must be a proxied one

struct RouteDecision {
  std::optional<PublicRoute> route;        // set when the request may go on
  std::optional<net::ErrorReply> refusal;  // otherwise the answer: 404, 401 or 405
};

// Paths outside /v1 get 404 whatever the key; then a missing or wrong key 401; then the method
// (GET for /v1/models and /v1/models/{id}, POST for the proxied routes) 405; an unknown /v1 path
// 404. authorized: the request's key is valid (Authorization: Bearer or x-api-key), or no key is
// configured.
RouteDecision route_public(std::string_view method, std::string_view path, bool authorized);

// The error shape of every answer to a path: anthropic for /v1/messages and below (whatever the
// answer: 401, 404, 413, a queue refusal), openai otherwise (the Responses API's errors are
// OpenAI's, and its routes' stream errors follow their row's api).
openai::Api error_api_for_path(std::string_view path);

// The path of a request target (without its query).
std::string_view target_path(std::string_view target);

}  // namespace fg::proxy
