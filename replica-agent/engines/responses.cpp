#include "replica-agent/engines/responses.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include <nlohmann/json.hpp>

#include "common/openai/sse.hpp"

namespace fg::agent {

namespace {

using Json = nlohmann::ordered_json;

std::string dump(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

double per_second(std::size_t n, double ms) {
  return ms > 0 ? static_cast<double>(n) * 1000.0 / ms : 0.0;
}

Json timings_json(const Timings& t) {
  return Json{{"prompt_n", t.prompt_n},
              {"cache_n", t.cache_n},
              {"prompt_ms", t.prompt_ms},
              {"prompt_per_second", per_second(t.prompt_n, t.prompt_ms)},
              {"predicted_n", t.predicted_n},
              {"predicted_ms", t.predicted_ms},
              {"predicted_per_second", per_second(t.predicted_n, t.predicted_ms)}};
}

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", Json{{"cached_tokens", u.cached_tokens}}}};
}

bool is_chat(const ResponseMeta& meta) {
  return meta.endpoint == Endpoint::chat;
}

Json chunk_head(const ResponseMeta& meta) {
  return Json{{"id", meta.id},
              {"object", is_chat(meta) ? "chat.completion.chunk" : "text_completion"},
              {"created", meta.created},
              {"model", meta.model}};
}

// One choice of a stream chunk. Chat carries a delta, completions a text piece.
Json chunk_choice(const ResponseMeta& meta, Json delta_or_text, const Json& finish_reason) {
  Json choice{{"index", 0}};
  choice[is_chat(meta) ? "delta" : "text"] = std::move(delta_or_text);
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  return choice;
}

std::string chunk_with(const ResponseMeta& meta, Json choice) {
  Json out = chunk_head(meta);
  out["choices"] = Json::array({std::move(choice)});
  if (meta.include_usage) {
    out["usage"] = nullptr;
  }
  return dump(out);
}

}  // namespace

std::string_view endpoint_name(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::chat:
      return "chat";
    case Endpoint::completions:
      return "completions";
    case Endpoint::responses:
      return "responses";
    case Endpoint::messages:
      return "messages";
    case Endpoint::input_tokens:
      return "input_tokens";
    case Endpoint::count_tokens:
      return "count_tokens";
    case Endpoint::rerank:
      return "rerank";
  }
  return "unknown";
}

std::string make_response_id(Endpoint endpoint, std::uint64_t bits_a, std::uint64_t bits_b) {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = endpoint == Endpoint::chat        ? "chatcmpl-"
                   : endpoint == Endpoint::responses ? "resp_"
                   : endpoint == Endpoint::messages  ? "msg_"
                                                     : "cmpl-";
  for (int i = 0; i < 24; ++i) {
    std::uint64_t& bits = i < 12 ? bits_a : bits_b;
    id += kAlphabet[bits % 62];
    bits /= 62;
  }
  return id;
}

std::string full_body(const ResponseMeta& meta, std::string_view text,
                      std::string_view finish_reason, const Usage& usage, const Timings& timings) {
  Json choice{{"index", 0}};
  if (is_chat(meta)) {
    choice["message"] = Json{{"role", "assistant"}, {"content", text}};
  } else {
    choice["text"] = text;
  }
  choice["logprobs"] = nullptr;
  choice["finish_reason"] = finish_reason;
  Json out{{"id", meta.id},
           {"object", is_chat(meta) ? "chat.completion" : "text_completion"},
           {"created", meta.created},
           {"model", meta.model}};
  out["choices"] = Json::array({std::move(choice)});
  out["usage"] = usage_json(usage);
  out["timings"] = timings_json(timings);
  return dump(out);
}

std::string role_chunk(const ResponseMeta& meta) {
  return chunk_with(meta,
                    chunk_choice(meta, Json{{"role", "assistant"}, {"content", ""}}, nullptr));
}

std::string token_chunk(const ResponseMeta& meta, std::string_view token) {
  Json piece = is_chat(meta) ? Json{{"content", token}} : Json(token);
  return chunk_with(meta, chunk_choice(meta, std::move(piece), nullptr));
}

std::string finish_chunk(const ResponseMeta& meta, std::string_view finish_reason,
                         const Timings& timings) {
  Json piece = is_chat(meta) ? Json::object() : Json("");
  Json out = chunk_head(meta);
  out["choices"] = Json::array({chunk_choice(meta, std::move(piece), Json(finish_reason))});
  if (meta.include_usage) {
    out["usage"] = nullptr;
  }
  out["timings"] = timings_json(timings);
  return dump(out);
}

std::string usage_chunk(const ResponseMeta& meta, const Usage& usage) {
  Json out = chunk_head(meta);
  out["choices"] = Json::array();
  out["usage"] = usage_json(usage);
  return dump(out);
}

namespace {

// ---- the Responses API ----

// The output message's id: the response's own, under the message prefix.
std::string item_id(const ResponseMeta& meta) {
  return "msg_" + meta.id.substr(meta.id.find('_') + 1);
}

bool cut_by_length(std::string_view finish_reason) {
  return finish_reason == "length";
}

Json responses_usage(const Usage& u) {
  return Json{{"input_tokens", u.prompt_tokens},
              {"input_tokens_details", Json{{"cached_tokens", u.cached_tokens}}},
              {"output_tokens", u.completion_tokens},
              {"output_tokens_details", Json{{"reasoning_tokens", 0}}},
              {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

Json output_text_part(std::string_view text) {
  return Json{{"type", "output_text"},
              {"text", text},
              {"annotations", Json::array()},
              {"logprobs", Json::array()}};
}

Json output_message(const ResponseMeta& meta, std::string_view status, Json content) {
  return Json{{"id", item_id(meta)},
              {"type", "message"},
              {"status", status},
              {"role", "assistant"},
              {"content", std::move(content)}};
}

// A response object; output and usage are null-able by the stream's stage.
Json response_object(const ResponseMeta& meta, std::string_view status, Json output, Json usage,
                     Json incomplete_details) {
  return Json{{"id", meta.id},
              {"object", "response"},
              {"created_at", meta.created},
              {"status", status},
              {"error", nullptr},
              {"incomplete_details", std::move(incomplete_details)},
              {"instructions", nullptr},
              {"max_output_tokens", nullptr},
              {"model", meta.model},
              {"output", std::move(output)},
              {"parallel_tool_calls", true},
              {"previous_response_id", nullptr},
              {"store", false},
              {"temperature", 1.0},
              {"text", Json{{"format", Json{{"type", "text"}}}}},
              {"tool_choice", "auto"},
              {"tools", Json::array()},
              {"top_p", 1.0},
              {"truncation", "disabled"},
              {"usage", std::move(usage)},
              {"metadata", Json::object()}};
}

Json final_response(const ResponseMeta& meta, std::string_view text, std::string_view finish_reason,
                    const Usage& usage) {
  const bool cut = cut_by_length(finish_reason);
  Json output = Json::array({output_message(meta, cut ? "incomplete" : "completed",
                                            Json::array({output_text_part(text)}))});
  return response_object(meta, cut ? "incomplete" : "completed", std::move(output),
                         responses_usage(usage),
                         cut ? Json{{"reason", "max_output_tokens"}} : Json(nullptr));
}

std::string responses_event(std::string_view type, std::size_t sequence, Json fields) {
  Json event{{"type", type}, {"sequence_number", sequence}};
  for (auto& [key, value] : fields.items()) {
    event[key] = std::move(value);
  }
  return openai::sse_event(type, dump(event));
}

// Events before the first delta, and the sequence number of delta i.
constexpr std::size_t kResponsesOpeningEvents = 4;

std::string responses_opening(const ResponseMeta& meta) {
  std::string out;
  out += responses_event(
      "response.created", 0,
      Json{{"response", response_object(meta, "in_progress", Json::array(), nullptr, nullptr)}});
  out += responses_event(
      "response.in_progress", 1,
      Json{{"response", response_object(meta, "in_progress", Json::array(), nullptr, nullptr)}});
  out += responses_event(
      "response.output_item.added", 2,
      Json{{"output_index", 0}, {"item", output_message(meta, "in_progress", Json::array())}});
  out += responses_event("response.content_part.added", 3,
                         Json{{"item_id", item_id(meta)},
                              {"output_index", 0},
                              {"content_index", 0},
                              {"part", output_text_part("")}});
  return out;
}

std::string responses_closing(const ResponseMeta& meta, std::string_view text,
                              std::string_view finish_reason, const Usage& usage) {
  std::size_t seq = kResponsesOpeningEvents + usage.completion_tokens;
  const bool cut = cut_by_length(finish_reason);
  std::string out;
  out += responses_event("response.output_text.done", seq++,
                         Json{{"item_id", item_id(meta)},
                              {"output_index", 0},
                              {"content_index", 0},
                              {"text", text},
                              {"logprobs", Json::array()}});
  out += responses_event("response.content_part.done", seq++,
                         Json{{"item_id", item_id(meta)},
                              {"output_index", 0},
                              {"content_index", 0},
                              {"part", output_text_part(text)}});
  out += responses_event("response.output_item.done", seq++,
                         Json{{"output_index", 0},
                              {"item", output_message(meta, cut ? "incomplete" : "completed",
                                                      Json::array({output_text_part(text)}))}});
  out += responses_event(cut ? "response.incomplete" : "response.completed", seq++,
                         Json{{"response", final_response(meta, text, finish_reason, usage)}});
  return out;
}

// ---- Anthropic's Messages API ----

std::string_view stop_reason(std::string_view finish_reason) {
  return cut_by_length(finish_reason) ? "max_tokens" : "end_turn";
}

// Anthropic counts the cached part of the prompt apart from input_tokens.
Json anthropic_usage(const Usage& u, std::size_t output_tokens) {
  return Json{{"input_tokens", u.prompt_tokens - u.cached_tokens},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", u.cached_tokens},
              {"output_tokens", output_tokens}};
}

Json message_object(const ResponseMeta& meta, Json content, Json stop, Json usage) {
  return Json{{"id", meta.id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", meta.model},
              {"content", std::move(content)},
              {"stop_reason", std::move(stop)},
              {"stop_sequence", nullptr},
              {"usage", std::move(usage)}};
}

std::string messages_event(std::string_view type, Json fields) {
  Json event{{"type", type}};
  for (auto& [key, value] : fields.items()) {
    event[key] = std::move(value);
  }
  return openai::sse_event(type, dump(event));
}

std::string messages_opening(const ResponseMeta& meta, const Usage& usage) {
  std::string out;
  out += messages_event(
      "message_start",
      Json{{"message", message_object(meta, Json::array(), nullptr, anthropic_usage(usage, 0))}});
  out +=
      messages_event("content_block_start",
                     Json{{"index", 0}, {"content_block", Json{{"type", "text"}, {"text", ""}}}});
  out += messages_event("ping", Json::object());
  return out;
}

std::string messages_closing(std::string_view finish_reason, const Usage& usage) {
  std::string out;
  out += messages_event("content_block_stop", Json{{"index", 0}});
  out += messages_event(
      "message_delta",
      Json{{"delta", Json{{"stop_reason", stop_reason(finish_reason)}, {"stop_sequence", nullptr}}},
           {"usage", Json{{"output_tokens", usage.completion_tokens}}}});
  out += messages_event("message_stop", Json::object());
  return out;
}

}  // namespace

std::string answer_body(const ResponseMeta& meta, std::string_view text,
                        std::string_view finish_reason, const Usage& usage,
                        const Timings& timings) {
  switch (meta.endpoint) {
    case Endpoint::responses:
      return dump(final_response(meta, text, finish_reason, usage));
    case Endpoint::messages:
      return dump(message_object(meta, Json::array({Json{{"type", "text"}, {"text", text}}}),
                                 Json(stop_reason(finish_reason)),
                                 anthropic_usage(usage, usage.completion_tokens)));
    default:
      return full_body(meta, text, finish_reason, usage, timings);
  }
}

std::string stream_opening(const ResponseMeta& meta, const Usage& usage) {
  switch (meta.endpoint) {
    case Endpoint::chat:
      return openai::sse_data(role_chunk(meta));
    case Endpoint::responses:
      return responses_opening(meta);
    case Endpoint::messages:
      return messages_opening(meta, usage);
    default:
      return {};
  }
}

std::string stream_token(const ResponseMeta& meta, std::size_t index, std::string_view token) {
  switch (meta.endpoint) {
    case Endpoint::responses:
      return responses_event("response.output_text.delta", kResponsesOpeningEvents + index,
                             Json{{"item_id", item_id(meta)},
                                  {"output_index", 0},
                                  {"content_index", 0},
                                  {"delta", token},
                                  {"logprobs", Json::array()}});
    case Endpoint::messages:
      return messages_event(
          "content_block_delta",
          Json{{"index", 0}, {"delta", Json{{"type", "text_delta"}, {"text", token}}}});
    default:
      return openai::sse_data(token_chunk(meta, token));
  }
}

std::string stream_closing(const ResponseMeta& meta, std::string_view text,
                           std::string_view finish_reason, const Usage& usage,
                           const Timings& timings) {
  switch (meta.endpoint) {
    case Endpoint::responses:
      return responses_closing(meta, text, finish_reason, usage);
    case Endpoint::messages:
      return messages_closing(finish_reason, usage);
    default: {
      std::string out = openai::sse_data(finish_chunk(meta, finish_reason, timings));
      if (meta.include_usage) {
        out += openai::sse_data(usage_chunk(meta, usage));
      }
      out += openai::sse_data("[DONE]");
      return out;
    }
  }
}

std::string token_count_body(Endpoint endpoint, std::size_t input_tokens) {
  if (endpoint == Endpoint::input_tokens) {
    return dump(Json{{"object", "response.input_tokens"}, {"input_tokens", input_tokens}});
  }
  return dump(Json{{"input_tokens", input_tokens}});
}

namespace {

std::set<std::string> words_of(std::string_view text) {
  std::set<std::string> words;
  std::string word;
  for (char c : text) {
    if (std::isalnum(static_cast<unsigned char>(c))) {
      word += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    } else if (!word.empty()) {
      words.insert(std::move(word));
      word.clear();
    }
  }
  if (!word.empty()) {
    words.insert(std::move(word));
  }
  return words;
}

}  // namespace

std::vector<std::pair<std::size_t, double>> rerank_scores(std::string_view query,
                                                          const std::vector<std::string>& documents,
                                                          std::size_t top_n) {
  const auto query_words = words_of(query);
  std::vector<std::pair<std::size_t, double>> scores;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    const auto document_words = words_of(documents[i]);
    std::size_t shared = 0;
    for (const auto& word : query_words) {
      shared += document_words.count(word);
    }
    const double score =
        query_words.empty() ? 0.0
                            : static_cast<double>(shared) / static_cast<double>(query_words.size());
    scores.emplace_back(i, score);
  }
  std::stable_sort(scores.begin(), scores.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  if (scores.size() > top_n) {
    scores.resize(top_n);
  }
  return scores;
}

std::string rerank_body(const ResponseMeta& meta,
                        const std::vector<std::pair<std::size_t, double>>& scores,
                        const Usage& usage) {
  Json results = Json::array();
  for (const auto& [index, score] : scores) {
    results.push_back(Json{{"index", index}, {"relevance_score", score}});
  }
  return dump(Json{{"model", meta.model},
                   {"object", "list"},
                   {"usage", Json{{"prompt_tokens", usage.prompt_tokens},
                                  {"total_tokens", usage.prompt_tokens}}},
                   {"results", std::move(results)}});
}

std::string model_object(std::string_view model) {
  return dump(Json{{"id", model}, {"object", "model"}, {"created", 0}, {"owned_by", "fleetgate"}});
}

std::string model_list(std::string_view model) {
  Json list{{"object", "list"}};
  list["data"] = Json::array({Json::parse(model_object(model))});
  return dump(list);
}

}  // namespace fg::agent
