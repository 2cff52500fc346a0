#pragma once

// What the gateway reads in a replica's answer besides relaying it: the usage and timings the
// replica reports (token counts for logs and metrics, and the speeds a router can learn from)
// and, in an error answer, its OpenAI error object. Every reader is linear in the answer and
// parses only the small member it needs, with fg::parse_network_json; no text is kept.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/openai/sse.hpp"

namespace fg::openai {

// The APIs whose answers the gateway reads, each reporting usage its own way. Another API (the
// Responses API: usage in the "response.completed" event; Anthropic Messages: in
// "message_start" and "message_delta") is one more case in the two readers below.
enum class Api {
  // Chat completions, completions, embeddings: "usage" (and llama.cpp's "timings") at the top
  // level of the answer, or of the usage chunk of a stream.
  openai,
};

struct AnswerStats {
  std::optional<std::uint64_t> prompt_tokens;
  std::optional<std::uint64_t> completion_tokens;
  std::optional<std::uint64_t> cached_tokens;  // usage.prompt_tokens_details.cached_tokens
  // llama.cpp's "timings": prompt tokens read and the milliseconds it took, tokens generated and
  // theirs, and prompt tokens taken from its cache.
  std::optional<std::uint64_t> prompt_n;
  std::optional<double> prompt_ms;
  std::optional<std::uint64_t> predicted_n;
  std::optional<double> predicted_ms;
  std::optional<std::uint64_t> cache_n;
};

// From a whole (non-streamed) answer.
void read_stats_from_body(Api api, std::string_view body, AnswerStats& stats);
// From one event of a streamed answer; later reports overwrite earlier ones field by field.
void read_stats_from_event(Api api, const SseEvent& event, AnswerStats& stats);

// The OpenAI error object of an error answer: {"error": {"message": ..., "code": ...}}.
struct ErrorInfo {
  std::string message;
  std::string code;  // "" when null or absent
};
std::optional<ErrorInfo> read_error(std::string_view body);

// The text of the value of member name of the top-level object of json, if it has one. One pass,
// no allocation, no recursion; a member name is matched as written (escapes are not decoded).
std::optional<std::string_view> top_level_member(std::string_view json, std::string_view name);

}  // namespace fg::openai
