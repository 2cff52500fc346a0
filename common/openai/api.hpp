#pragma once

// The API families the gateway and the agent speak. Each family has its own way of reporting
// usage (answer.hpp), its own error shape (errors.hpp) and its own request rules (inspect.hpp);
// those modules each have one case per family. Which route belongs to which family is decided in
// one table per binary (the gateway's orchestrator/proxy/public_routes.cpp, the agent's
// replica-agent/agent/routes.cpp).

namespace fg::openai {

enum class Api {
  // Chat completions, completions, embeddings, rerank: "usage" (and llama.cpp's "timings") at
  // the top level of the answer or of a stream's usage chunk; errors {"error":{...}}; a stream
  // error is a data-only event followed by "data: [DONE]".
  openai,
  // OpenAI's Responses API (/v1/responses, /v1/responses/input_tokens): usage
  // {input_tokens, output_tokens} in the "response" object (the body, or the response.completed /
  // response.incomplete / response.failed event); errors as openai over HTTP, an "error" typed
  // event inside a stream.
  responses,
  // Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens): usage in message_start
  // and message_delta (or the body); errors {"type":"error","error":{"type","message"}}, an
  // "error" typed event inside a stream.
  anthropic,
};

}  // namespace fg::openai
