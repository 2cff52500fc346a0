#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "common/openai/api.hpp"

namespace fg::openai {

// What the gateway needs from a client's request body; the body itself is forwarded unchanged.
struct RequestInfo {
  std::string model;
  bool stream = false;         // "stream": true
  bool include_usage = false;  // "stream_options": {"include_usage": true}
};

// A request the gateway refuses before routing, as an HTTP status and an OpenAI error.
struct InspectError {
  int status = 400;     // 400 malformed, 415 bad content type
  std::string code;     // e.g. "invalid_json", "missing_model", "unsupported_media_type"
  std::string param;    // the offending field when there is one ("model", "stream")
  std::string message;  // says exactly what is wrong, never echoes the body
};

// Inspects a POST body for /v1/chat/completions, /v1/completions or /v1/embeddings.
// content_type must be application/json (parameters such as charset allowed, case-insensitive).
// The body must be a JSON object with a non-empty string "model"; "stream", when present, must be
// a boolean; "stream_options", when present, an object.
std::variant<RequestInfo, InspectError> inspect_request(std::string_view content_type,
                                                        std::string_view body);

// The same, plus the family's own rules. responses: what needs state kept between requests is
// refused with 400 (code "unsupported_stateful_request"), since any replica of a fleet may serve
// the next request and none keeps responses: "previous_response_id" or "conversation" (not
// null), "store": true, "background": true, and an "input" item of type "item_reference". A
// request without "store" is served and stored nowhere.
std::variant<RequestInfo, InspectError> inspect_request(Api api, std::string_view content_type,
                                                        std::string_view body);

}  // namespace fg::openai

namespace fg::openai {

// The body with "stream_options": {"include_usage": true} set (other members unchanged), or
// nullopt when it is not a JSON object. Used to learn token counts of streams whose client did
// not ask for usage; the extra usage is stripped again on the way back (SseRelay).
std::optional<std::string> with_stream_usage(std::string_view body);

}  // namespace fg::openai
