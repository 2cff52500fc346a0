#pragma once

// OpenAI-shaped bodies the agent answers with, plus llama.cpp's `timings`. Pure: JSON only.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fg::agent {

enum class Endpoint { chat, completions };

// What every response or chunk of one request repeats.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::chat;
  std::string id;            // "chatcmpl-..." or "cmpl-..."
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

// "chatcmpl-" or "cmpl-" followed by 24 characters drawn from random bits.
std::string make_response_id(Endpoint endpoint, std::uint64_t bits_a, std::uint64_t bits_b);

// A whole (non-stream) answer.
std::string full_body(const ResponseMeta& meta, std::string_view text,
                      std::string_view finish_reason, const Usage& usage, const Timings& timings);

// Stream chunks (JSON payloads, without SSE framing). Chat streams start with a role chunk.
std::string role_chunk(const ResponseMeta& meta);
std::string token_chunk(const ResponseMeta& meta, std::string_view token);
std::string finish_chunk(const ResponseMeta& meta, std::string_view finish_reason,
                         const Timings& timings);
std::string usage_chunk(const ResponseMeta& meta, const Usage& usage);

// GET /v1/models and /v1/models/{id}.
std::string model_list(std::string_view model);
std::string model_object(std::string_view model);

}  // namespace fg::agent
