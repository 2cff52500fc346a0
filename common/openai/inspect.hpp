#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "common/openai/api.hpp"
#include "common/openai/prompt_blocks.hpp"

namespace fg::openai {

// What the gateway needs from a client's request body; the body itself is forwarded unchanged.
struct RequestInfo {
  std::string model;
  bool stream = false;         // "stream": true
  bool include_usage = false;  // "stream_options": {"include_usage": true}
  // The answer's token limit: the first of "max_completion_tokens", "max_tokens" and
  // "max_output_tokens" that is an unsigned integer, capped at UINT32_MAX (the scheduler's
  // expected answer length under expected_finish). Unset when none is.
  std::optional<std::uint32_t> max_tokens;

  // Where with_stream_usage splices "include_usage": true into the body, found by the one-pass
  // scan (unset when the body was read through the DOM): bytes [at, at + erase) are replaced.
  struct UsageSplice {
    enum class Kind : std::uint8_t {
      add_options,  // no "stream_options": add the member before the top-level '}'
      set_options,  // "stream_options": null: the value becomes {"include_usage":true}
      add_member,   // an object without "include_usage": add it before its '}'
      set_value,    // "include_usage": false / null: the value becomes true
    };
    Kind kind = Kind::add_options;
    bool comma = false;  // add_*: the object has members already
    std::uint32_t at = 0;
    std::uint32_t erase = 0;
  };
  std::optional<UsageSplice> usage_splice;
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

// The same, and the prompt's blocks (common/openai/prompt_blocks.hpp) from the same pass: *blocks
// gets what prompt_blocks(parsed body, key) gives, for the scheduler's prompt-cache model, without
// a second parse. Left empty when the request is refused.
std::variant<RequestInfo, InspectError> inspect_request(Api api, std::string_view content_type,
                                                        std::string_view body, PromptBlocks* blocks,
                                                        std::uint64_t key);

// The same answers through a full nlohmann DOM parse. inspect_request scans the body once
// without building a DOM (validating it as nlohmann does: UTF-8, escapes and surrogates, a
// leading BOM, numbers that overflow a double, nesting) and falls back to this for everything
// it does not settle itself: any refusal (so every error answer is the DOM's, byte offsets
// included), a relevant key given twice, escapes in the keys or the model, the Responses API's
// stateful checks. Public for the differential tests and the fuzz target.
std::variant<RequestInfo, InspectError> inspect_request_dom(Api api, std::string_view content_type,
                                                            std::string_view body,
                                                            PromptBlocks* blocks = nullptr,
                                                            std::uint64_t key = 0);

}  // namespace fg::openai

namespace fg::openai {

// The body with "stream_options": {"include_usage": true} set (other members unchanged), or
// nullopt when it is not a JSON object. Used to learn token counts of streams whose client did
// not ask for usage; the extra usage is stripped again on the way back (SseRelay).
std::optional<std::string> with_stream_usage(std::string_view body);
// The same from inspect_request's findings: the bytes are spliced where the scan said
// (info.usage_splice), the rest of the body unchanged; without a splice, as above (a DOM
// rewrite). Parsing and re-serialising a 4 MiB body cost tens of milliseconds of the io thread.
std::optional<std::string> with_stream_usage(std::string_view body, const RequestInfo& info);

}  // namespace fg::openai
