#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "common/openai/api.hpp"

namespace fg::openai {

// OpenAI's error shape: {"error":{"message":...,"type":...,"param":null,"code":...}}.
// An empty code or param is written as null.
std::string error_body(std::string_view message, std::string_view type, std::string_view code = {},
                       std::string_view param = {});

// The OpenAI error "type" that fits an HTTP status (400 invalid_request_error, 401
// authentication_error, 404 invalid_request_error, 429 rate_limit_error, 5xx server_error, ...).
std::string_view error_type_for_status(int status);

// Anthropic's error "type" for an HTTP status: 400 invalid_request_error, 401
// authentication_error, 403 permission_error, 404 not_found_error, 413 request_too_large, 429
// rate_limit_error, 503 and 529 overloaded_error, 504 timeout_error, other 5xx api_error.
std::string_view anthropic_error_type(int status);

// An error answer in the family's shape: openai and responses as error_body (code and param
// kept); anthropic {"type":"error","error":{"type":...,"message":...}} (Anthropic has no code or
// param; its type follows the status).
std::string api_error_body(Api api, int status, std::string_view message,
                           std::string_view code = {}, std::string_view param = {});

// A replica's error answer (status >= 400) rewritten in the family's shape, or nullopt when it
// is already in that shape and goes to the client unchanged. The engines answer every route with
// OpenAI errors; an Anthropic client gets them as Anthropic errors with the same message (or, when
// the body says nothing readable, "the replica answered HTTP <status>").
std::optional<std::string> reshaped_error(Api api, int status, std::string_view body);

}  // namespace fg::openai
