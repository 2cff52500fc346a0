#pragma once

// What the gateway reads in a replica's answer besides relaying it: the usage and timings the
// replica reports (token counts for logs and metrics, and the speeds a router can learn from)
// and, in an error answer, its OpenAI error object. Every reader is linear in the answer and
// parses only the small member it needs (usage and timings without allocating, falling back to
// fg::parse_network_json for what that reader declines; answer.cpp); no text is kept.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "common/openai/api.hpp"
#include "common/openai/sse.hpp"

namespace fg::openai {

// Token counts in OpenAI's terms whatever the API: prompt_tokens is the whole prompt, its cached
// part included. Read from usage.prompt_tokens / completion_tokens /
// prompt_tokens_details.cached_tokens (openai); usage.input_tokens / output_tokens /
// input_tokens_details.cached_tokens of the response object (responses); usage.input_tokens +
// cache_read_input_tokens + cache_creation_input_tokens / output_tokens / cache_read_input_tokens
// (anthropic, whose input_tokens leaves out the cached part).
struct AnswerStats {
  std::optional<std::uint64_t> prompt_tokens;
  std::optional<std::uint64_t> completion_tokens;
  std::optional<std::uint64_t> cached_tokens;
  // llama.cpp's "timings": prompt tokens read and the milliseconds it took, tokens generated and
  // theirs, and prompt tokens taken from its cache.
  std::optional<std::uint64_t> prompt_n;
  std::optional<double> prompt_ms;
  std::optional<std::uint64_t> predicted_n;
  std::optional<double> predicted_ms;
  std::optional<std::uint64_t> cache_n;
  // Whether the token limit cut the answer: choices[0].finish_reason "length" (chat,
  // completions), status "incomplete" for max_output_tokens (Responses), stop_reason
  // "max_tokens" (Anthropic). Unset when the answer says neither.
  std::optional<bool> truncated;
};

// From a whole (non-streamed) answer.
void read_stats_from_body(Api api, std::string_view body, AnswerStats& stats);
namespace detail {
// read_stats_from_body with nlohmann's DOM only: the reference the small reader is checked
// against (tests/common/answer_test.cpp, the fuzz target answer_stats).
void read_stats_from_body_dom(Api api, std::string_view body, AnswerStats& stats);
// Whether the small reader reads this object itself (true) or leaves it to the DOM.
bool small_reader_takes(std::string_view object);
// Whether a streamed event may carry stats: its data holds "usage", "timings" or "length" with
// their quotes (a quote inside a JSON string is escaped, so these are member names, or the
// string "length" of a finish_reason). read_stats_from_event reads only such events.
bool names_a_stat(std::string_view data);
}  // namespace detail
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
// The same for several names in one pass: out[i] gets the value of names[i] (the first of
// repeated keys), unset when absent or when the text is malformed before it.
void top_level_members(std::string_view json, std::span<const std::string_view> names,
                       std::span<std::optional<std::string_view>> out);

}  // namespace fg::openai
