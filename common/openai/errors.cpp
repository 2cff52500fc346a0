#include "common/openai/errors.hpp"

#include <nlohmann/json.hpp>

#include "common/openai/answer.hpp"

namespace fg::openai {

namespace {

std::string dump(const nlohmann::ordered_json& body) {
  // Messages may quote client-supplied text (a model name): replace invalid UTF-8, never throw.
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string anthropic_body(int status, std::string_view message) {
  nlohmann::ordered_json error = {{"type", anthropic_error_type(status)}, {"message", message}};
  return dump(nlohmann::ordered_json{{"type", "error"}, {"error", std::move(error)}});
}

}  // namespace

std::string error_body(std::string_view message, std::string_view type, std::string_view code,
                       std::string_view param) {
  // ordered_json keeps OpenAI's field order, which some clients' logs and tests show verbatim.
  nlohmann::ordered_json error = {
      {"message", message},
      {"type", type},
      {"param", param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param)},
      {"code", code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code)},
  };
  return dump(nlohmann::ordered_json{{"error", std::move(error)}});
}

std::string_view error_type_for_status(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 429:
      return "rate_limit_error";
    default:
      break;
  }
  if (status >= 400 && status < 500) {
    return "invalid_request_error";
  }
  // 5xx, and anything that is not an error status at all, is the server's fault.
  return "server_error";
}

std::string_view anthropic_error_type(int status) {
  switch (status) {
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
    case 529:
      return "overloaded_error";
    case 504:
      return "timeout_error";
    default:
      break;
  }
  if (status >= 400 && status < 500) {
    return "invalid_request_error";
  }
  return "api_error";
}

std::string api_error_body(Api api, int status, std::string_view message, std::string_view code,
                           std::string_view param) {
  switch (api) {
    case Api::openai:
    case Api::responses:
      return error_body(message, error_type_for_status(status), code, param);
    case Api::anthropic:
      return anthropic_body(status, message);
  }
  return error_body(message, error_type_for_status(status), code, param);
}

std::optional<std::string> reshaped_error(Api api, int status, std::string_view body) {
  switch (api) {
    case Api::openai:
    case Api::responses:
      return std::nullopt;
    case Api::anthropic: {
      if (top_level_member(body, "type") == std::optional<std::string_view>("\"error\"")) {
        return std::nullopt;
      }
      auto error = read_error(body);
      if (!error || error->message.empty()) {
        return anthropic_body(status, "the replica answered HTTP " + std::to_string(status));
      }
      return anthropic_body(status, error->message);
    }
  }
  return std::nullopt;
}

}  // namespace fg::openai
