#include "replica-agent/agent/responses.hpp"

#include <nlohmann/json.hpp>

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

std::string make_response_id(Endpoint endpoint, std::uint64_t bits_a, std::uint64_t bits_b) {
  static constexpr char kAlphabet[] =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string id = endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-";
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

std::string model_object(std::string_view model) {
  return dump(Json{{"id", model}, {"object", "model"}, {"created", 0}, {"owned_by", "fleetgate"}});
}

std::string model_list(std::string_view model) {
  Json list{{"object", "list"}};
  list["data"] = Json::array({Json::parse(model_object(model))});
  return dump(list);
}

}  // namespace fg::agent
