#pragma once

#include <string>
#include <string_view>

namespace fg::openai {

// OpenAI's error shape: {"error":{"message":...,"type":...,"param":null,"code":...}}.
// An empty code or param is written as null.
std::string error_body(std::string_view message, std::string_view type, std::string_view code = {},
                       std::string_view param = {});

// The OpenAI error "type" that fits an HTTP status (400 invalid_request_error, 401
// authentication_error, 404 invalid_request_error, 429 rate_limit_error, 5xx server_error, ...).
std::string_view error_type_for_status(int status);

}  // namespace fg::openai
