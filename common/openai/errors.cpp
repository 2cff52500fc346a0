#include "common/openai/errors.hpp"

#include <nlohmann/json.hpp>

namespace fg::openai {

std::string error_body(std::string_view message, std::string_view type, std::string_view code,
                       std::string_view param) {
  // ordered_json keeps OpenAI's field order, which some clients' logs and tests show verbatim.
  nlohmann::ordered_json error = {
      {"message", message},
      {"type", type},
      {"param", param.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param)},
      {"code", code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code)},
  };
  nlohmann::ordered_json body = {{"error", std::move(error)}};
  // Messages may quote client-supplied text (a model name): replace invalid UTF-8, never throw.
  return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
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

}  // namespace fg::openai
