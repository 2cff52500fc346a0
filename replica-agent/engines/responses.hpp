#pragma once

// The bodies and stream events the agent's sim engine answers with, in each API's shape: OpenAI
// chat completions and completions (plus llama.cpp's `timings`), the Responses API, Anthropic's
// Messages API, their token counts, and rerank. Pure: JSON only.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fg::agent {

enum class Endpoint { chat, completions, responses, messages, input_tokens, count_tokens, rerank };

// The name of an endpoint in logs ("chat", "responses", "count_tokens", ...).
std::string_view endpoint_name(Endpoint endpoint);

// What every response or chunk of one request repeats.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::chat;
  std::string id;            // "chatcmpl-...", "cmpl-...", "resp_..." or "msg_..."
  std::int64_t created = 0;  // Unix seconds
  std::string model;
  bool include_usage = false;  // streams: "usage": null on every chunk, then a usage chunk
};

// llama.cpp server's per-request timings: prompt_n counts the tokens actually evaluated (not the
// cached ones, which are cache_n); milliseconds are wall time on this agent.
struct Timings {
  std::size_t prompt_n = 0;
  std::size_t cache_n = 0;
  double prompt_ms = 0;
  std::size_t predicted_n = 0;
  double predicted_ms = 0;
};

struct Usage {
  std::size_t prompt_tokens = 0;  // all of the prompt, cached part included
  std::size_t cached_tokens = 0;
  std::size_t completion_tokens = 0;
};

// "chatcmpl-", "cmpl-", "resp_" or "msg_" (by endpoint) followed by 24 characters drawn from
// random bits.
std::string make_response_id(Endpoint endpoint, std::uint64_t bits_a, std::uint64_t bits_b);

// A whole (non-stream) chat or completions answer.
std::string full_body(const ResponseMeta& meta, std::string_view text,
                      std::string_view finish_reason, const Usage& usage, const Timings& timings);

// Stream chunks (JSON payloads, without SSE framing). Chat streams start with a role chunk.
std::string role_chunk(const ResponseMeta& meta);
std::string token_chunk(const ResponseMeta& meta, std::string_view token);
std::string finish_chunk(const ResponseMeta& meta, std::string_view finish_reason,
                         const Timings& timings);
std::string usage_chunk(const ResponseMeta& meta, const Usage& usage);

// A generated answer (chat, completions, responses, messages) in its endpoint's shape: the whole
// body, or the stream's events, SSE framed. A stream is stream_opening (with the first token),
// one stream_token per token, then stream_closing. Responses streams: response.created,
// response.in_progress, response.output_item.added, response.content_part.added, then
// response.output_text.delta per token, then response.output_text.done,
// response.content_part.done, response.output_item.done and response.completed (or
// response.incomplete when max_output_tokens cut the answer) with the usage, sequence numbers
// counting from 0. Messages streams: message_start (with the prompt's usage), content_block_start,
// ping, content_block_delta per token, content_block_stop, message_delta (stop_reason and
// output_tokens), message_stop. Chat and completions: the chunks above, then "[DONE]".
std::string answer_body(const ResponseMeta& meta, std::string_view text,
                        std::string_view finish_reason, const Usage& usage, const Timings& timings);
std::string stream_opening(const ResponseMeta& meta, const Usage& usage);
std::string stream_token(const ResponseMeta& meta, std::size_t index, std::string_view token);
std::string stream_closing(const ResponseMeta& meta, std::string_view text,
                           std::string_view finish_reason, const Usage& usage,
                           const Timings& timings);

// /v1/responses/input_tokens: {"object":"response.input_tokens","input_tokens":n};
// /v1/messages/count_tokens: {"input_tokens":n}.
std::string token_count_body(Endpoint endpoint, std::size_t input_tokens);

// Rerank: each document's relevance to the query, the share of the query's words (lower case,
// split at anything not a letter or digit) that occur in the document, in [0, 1]. Sorted by
// score, highest first (ties by index), at most top_n.
std::vector<std::pair<std::size_t, double>> rerank_scores(std::string_view query,
                                                          const std::vector<std::string>& documents,
                                                          std::size_t top_n);
// llama.cpp's rerank answer: {"model","object":"list","usage":{prompt_tokens,total_tokens},
// "results":[{"index","relevance_score"}]}.
std::string rerank_body(const ResponseMeta& meta,
                        const std::vector<std::pair<std::size_t, double>>& scores,
                        const Usage& usage);

// GET /v1/models and /v1/models/{id}.
std::string model_list(std::string_view model);
std::string model_object(std::string_view model);

}  // namespace fg::agent
