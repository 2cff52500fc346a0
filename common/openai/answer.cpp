#include "common/openai/answer.hpp"

#include <cmath>
#include <span>

#include "common/util/json.hpp"

namespace fg::openai {

namespace {

constexpr auto npos = std::string_view::npos;
// A usage or timings object is a few hundred bytes; a longer one is not parsed.
constexpr std::size_t kMaxMemberBytes = 64 * 1024;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

std::size_t skip_space(std::string_view t, std::size_t i) {
  while (i < t.size() && is_space(t[i])) {
    ++i;
  }
  return i;
}

// Past the closing quote of the string opening at i, or npos.
std::size_t skip_string(std::string_view t, std::size_t i) {
  for (++i; i < t.size(); ++i) {
    if (t[i] == '\\') {
      ++i;
    } else if (t[i] == '"') {
      return i + 1;
    }
  }
  return npos;
}

// Past the end of the value starting at i, or npos when it does not end. Brackets are counted,
// not matched: the parser that reads the value later refuses a malformed one.
std::size_t skip_value(std::string_view t, std::size_t i) {
  if (i >= t.size()) {
    return npos;
  }
  if (t[i] == '"') {
    return skip_string(t, i);
  }
  if (t[i] != '{' && t[i] != '[') {
    while (i < t.size() && t[i] != ',' && t[i] != '}' && t[i] != ']' && !is_space(t[i])) {
      ++i;
    }
    return i;
  }
  std::size_t depth = 0;
  while (i < t.size()) {
    const char c = t[i];
    if (c == '"') {
      i = skip_string(t, i);
      if (i == npos) {
        return npos;
      }
      continue;
    }
    if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
    ++i;
  }
  return npos;
}

nlohmann::json parse_value(const std::optional<std::string_view>& value) {
  if (!value || value->size() > kMaxMemberBytes) {
    return nlohmann::json(nlohmann::json::value_t::discarded);
  }
  return parse_network_json(*value);
}

nlohmann::json parse_member(std::string_view json, std::string_view name) {
  return parse_value(top_level_member(json, name));
}

// Each reader below finds the members it needs of one document in one pass over it (a whole
// answer is scanned once, not once per member: ~2 instructions a byte saved on every answer).

void read_count(const nlohmann::json& object, const char* key, std::optional<std::uint64_t>& out) {
  auto it = object.find(key);
  if (it != object.end() && it->is_number_unsigned()) {
    out = it->get<std::uint64_t>();
  }
}

void read_ms(const nlohmann::json& object, const char* key, std::optional<double>& out) {
  auto it = object.find(key);
  if (it != object.end() && it->is_number()) {
    const double ms = it->get<double>();
    if (std::isfinite(ms) && ms >= 0) {
      out = ms;
    }
  }
}

void read_timings(const std::optional<std::string_view>& member, AnswerStats& stats) {
  const auto timings = parse_value(member);
  if (timings.is_object()) {
    read_count(timings, "prompt_n", stats.prompt_n);
    read_ms(timings, "prompt_ms", stats.prompt_ms);
    read_count(timings, "predicted_n", stats.predicted_n);
    read_ms(timings, "predicted_ms", stats.predicted_ms);
    read_count(timings, "cache_n", stats.cache_n);
  }
}

// A string value as written (with its quotes), or nothing for null, other types and absence.
bool is_quoted(const std::optional<std::string_view>& value) {
  return value && value->size() >= 2 && value->front() == '"';
}

// choices[0].finish_reason of an OpenAI-shaped document (a whole answer or a stream chunk). The
// first choice's members are walked, not parsed: its text is skipped, never copied.
void read_finish_reason(const std::optional<std::string_view>& choices, AnswerStats& stats) {
  if (!choices || choices->empty() || choices->front() != '[') {
    return;
  }
  const std::size_t first = skip_space(*choices, 1);
  if (first >= choices->size() || (*choices)[first] != '{') {
    return;
  }
  const auto reason = top_level_member(choices->substr(first), "finish_reason");
  if (is_quoted(reason)) {
    stats.truncated = *reason == "\"length\"";
  }
}

// {"usage": {...}, "timings": {...}, "choices": [...]} at the top level of an OpenAI-shaped
// document.
void read_openai_stats(std::string_view json, AnswerStats& stats) {
  static constexpr std::string_view kNames[] = {"usage", "timings", "choices"};
  std::optional<std::string_view> found[3];
  top_level_members(json, kNames, found);
  const nlohmann::json usage = parse_value(found[0]);
  const std::optional<std::string_view> timings = found[1];
  read_finish_reason(found[2], stats);
  if (usage.is_object()) {
    read_count(usage, "prompt_tokens", stats.prompt_tokens);
    read_count(usage, "completion_tokens", stats.completion_tokens);
    auto details = usage.find("prompt_tokens_details");
    if (details != usage.end() && details->is_object()) {
      read_count(*details, "cached_tokens", stats.cached_tokens);
    }
  }
  read_timings(timings, stats);
}

// The Responses API's usage object {input_tokens, output_tokens, input_tokens_details} at the
// top level of a response object (a whole answer, or the "response" of a stream event).
void read_responses_stats(std::string_view response, AnswerStats& stats) {
  static constexpr std::string_view kNames[] = {"usage", "timings", "status",
                                                "incomplete_details"};
  std::optional<std::string_view> found[4];
  top_level_members(response, kNames, found);
  const nlohmann::json usage = parse_value(found[0]);
  const std::optional<std::string_view> timings = found[1];
  if (is_quoted(found[2])) {
    const auto reason = found[3] ? top_level_member(*found[3], "reason") : std::nullopt;
    stats.truncated = *found[2] == "\"incomplete\"" && reason && *reason == "\"max_output_tokens\"";
  }
  if (usage.is_object()) {
    read_count(usage, "input_tokens", stats.prompt_tokens);
    read_count(usage, "output_tokens", stats.completion_tokens);
    auto details = usage.find("input_tokens_details");
    if (details != usage.end() && details->is_object()) {
      read_count(*details, "cached_tokens", stats.cached_tokens);
    }
  }
  read_timings(timings, stats);
}

// Anthropic's usage object at the top level of a message (a whole answer, message_start's
// "message") or of a message_delta event. The prompt is input_tokens plus the cache's reads and
// writes; a delta that reports only output_tokens leaves the prompt as message_start said.
void read_anthropic_stats(std::string_view message, AnswerStats& stats) {
  static constexpr std::string_view kNames[] = {"usage", "timings", "stop_reason", "delta"};
  std::optional<std::string_view> found[4];
  top_level_members(message, kNames, found);
  const nlohmann::json usage = parse_value(found[0]);
  const std::optional<std::string_view> timings = found[1];
  // A whole message says stop_reason at its top, a stream's message_delta inside "delta".
  std::optional<std::string_view> stop = found[2];
  if (!is_quoted(stop) && found[3]) {
    stop = top_level_member(*found[3], "stop_reason");
  }
  if (is_quoted(stop)) {
    stats.truncated = *stop == "\"max_tokens\"";
  }
  if (usage.is_object()) {
    std::optional<std::uint64_t> input;
    read_count(usage, "input_tokens", input);
    if (input) {
      std::optional<std::uint64_t> read;
      std::optional<std::uint64_t> created;
      read_count(usage, "cache_read_input_tokens", read);
      read_count(usage, "cache_creation_input_tokens", created);
      stats.prompt_tokens = *input + read.value_or(0) + created.value_or(0);
      if (read) {
        stats.cached_tokens = read;
      }
    }
    read_count(usage, "output_tokens", stats.completion_tokens);
  }
  read_timings(timings, stats);
}

bool mentions(std::string_view data, std::string_view quoted_name) {
  return data.find(quoted_name) != std::string_view::npos;
}

}  // namespace

void top_level_members(std::string_view json, std::span<const std::string_view> names,
                       std::span<std::optional<std::string_view>> out) {
  std::size_t left = names.size();
  std::size_t i = skip_space(json, 0);
  if (i >= json.size() || json[i] != '{') {
    return;
  }
  for (i = skip_space(json, i + 1); left > 0 && i < json.size() && json[i] == '"';) {
    const std::size_t key_end = skip_string(json, i);
    if (key_end == npos) {
      return;
    }
    const std::string_view key = json.substr(i + 1, key_end - i - 2);
    i = skip_space(json, key_end);
    if (i >= json.size() || json[i] != ':') {
      return;
    }
    i = skip_space(json, i + 1);
    const std::size_t value_end = skip_value(json, i);
    if (value_end == npos || value_end == i) {
      return;
    }
    for (std::size_t n = 0; n < names.size(); ++n) {
      if (!out[n] && key == names[n]) {
        out[n] = json.substr(i, value_end - i);  // the first of repeated keys, as before
        --left;
      }
    }
    i = skip_space(json, value_end);
    if (i >= json.size() || json[i] != ',') {
      return;
    }
    i = skip_space(json, i + 1);
  }
}

std::optional<std::string_view> top_level_member(std::string_view json, std::string_view name) {
  std::optional<std::string_view> value;
  top_level_members(json, std::span(&name, 1), std::span(&value, 1));
  return value;
}

void read_stats_from_body(Api api, std::string_view body, AnswerStats& stats) {
  switch (api) {
    case Api::openai:
      read_openai_stats(body, stats);
      return;
    case Api::responses:
      read_responses_stats(body, stats);
      return;
    case Api::anthropic:
      read_anthropic_stats(body, stats);
      return;
  }
}

void read_stats_from_event(Api api, const SseEvent& event, AnswerStats& stats) {
  // Only a few events carry usage or timings; the others (the text deltas, "[DONE]") are skipped
  // by the first look for the member names. A quote inside a JSON string is escaped, so "usage"
  // with its quotes can only be a member name.
  // "length" with its quotes is likewise a JSON string of its own: a chunk that says
  // finish_reason "length".
  const std::string_view data = event.data;
  if (!mentions(data, "\"usage\"") && !mentions(data, "\"timings\"") &&
      !mentions(data, "\"length\"")) {
    return;
  }
  switch (api) {
    case Api::openai:
      read_openai_stats(data, stats);
      return;
    case Api::responses:
      // response.completed, response.incomplete, response.failed: {"response": {..., "usage"}}.
      // The response object holds the whole answer, so it is scanned, not parsed.
      if (auto response = top_level_member(data, "response")) {
        read_responses_stats(*response, stats);
      }
      return;
    case Api::anthropic:
      // message_start: {"message": {..., "usage"}}; message_delta: {"usage": {...}}.
      if (auto message = top_level_member(data, "message")) {
        read_anthropic_stats(*message, stats);
      } else {
        read_anthropic_stats(data, stats);
      }
      return;
  }
}

std::optional<ErrorInfo> read_error(std::string_view body) {
  const auto error = parse_member(body, "error");
  if (!error.is_object()) {
    return std::nullopt;
  }
  ErrorInfo info;
  auto message = error.find("message");
  if (message != error.end() && message->is_string()) {
    info.message = message->get<std::string>();
  }
  auto code = error.find("code");
  if (code != error.end() && code->is_string()) {
    info.code = code->get<std::string>();
  }
  return info;
}

}  // namespace fg::openai
