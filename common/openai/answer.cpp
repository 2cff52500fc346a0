#include "common/openai/answer.hpp"

#include <array>
#include <charconv>
#include <cmath>
#include <span>

#include "common/util/json.hpp"
#include "common/util/swar.hpp"

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

// Past the closing quote of the string opening at i, or npos. Eight bytes at a time while none
// is a quote or a backslash (common/util/swar.hpp): an answer's text is most of its bytes, and
// this scan took 4.1k of the gateway's ~61k instructions per small JSON answer.
std::size_t skip_string(std::string_view t, std::size_t i) {
  for (i = swar::find(t, i + 1, '"', '\\'); i != npos; i = swar::find(t, i + 2, '"', '\\')) {
    if (t[i] == '"') {
      return i + 1;
    }
    // A backslash: the escape takes the byte after it.
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

// ---- Two readers of the small usage and timings objects ----
//
// A usage or timings object is ~100-300 bytes of counts. Parsing it into an nlohmann DOM cost
// ~12k of the 14.6k instructions read_stats_from_body took per JSON answer (a map node and a
// key string per member, the lexer's token buffer, the destruction); SmallObject reads the
// same members in two passes over the text without allocating (~1.5k). It accepts a strict
// subset of JSON: ASCII strings without escapes, numbers nlohmann and std::from_chars read
// alike, depth <= 16. Anything else (an escape, a non-ASCII byte, an exponent that overflows, a
// syntax error) goes to the DOM, so every answer reads as nlohmann reads it: a refusal by the
// DOM is "no stats", and the members are typed as nlohmann types them (an unsigned count, any
// other number, an object) with the last of repeated keys winning. The unit test
// AnswerSmallReader.* and the fuzz target answer_stats compare the two readers.
//
// The API rules below (read_openai_usage, ...) are written once, over either reader's Object.

// nlohmann's reading of one member of a DOM object.
class DomObject {
 public:
  class Member {
   public:
    explicit Member(const nlohmann::json* value = nullptr) : value_(value) {}
    std::optional<std::uint64_t> count() const {
      if (value_ != nullptr && value_->is_number_unsigned()) {
        return value_->get<std::uint64_t>();
      }
      return std::nullopt;
    }
    std::optional<double> number() const {
      if (value_ != nullptr && value_->is_number()) {
        return value_->get<double>();
      }
      return std::nullopt;
    }
    std::optional<DomObject> object() const {
      if (value_ != nullptr && value_->is_object()) {
        return DomObject(*value_);
      }
      return std::nullopt;
    }

   private:
    const nlohmann::json* value_;
  };

  explicit DomObject(const nlohmann::json& object) : object_(&object) {}
  template <std::size_t N>
  std::array<Member, N> members(const std::string_view (&names)[N]) const {
    std::array<Member, N> out;
    for (std::size_t n = 0; n < N; ++n) {
      auto it = object_->find(names[n]);
      if (it != object_->end()) {
        out[n] = Member(&*it);
      }
    }
    return out;
  }

 private:
  const nlohmann::json* object_;
};

// The same reading, without a DOM, of an object in the subset described above.
class SmallObject {
 public:
  class Member {
   public:
    enum class Kind : std::uint8_t { other, count, number, object };
    std::optional<std::uint64_t> count() const {
      return kind == Kind::count ? std::optional(count_value) : std::nullopt;
    }
    std::optional<double> number() const {
      return kind == Kind::count || kind == Kind::number ? std::optional(number_value)
                                                         : std::nullopt;
    }
    std::optional<SmallObject> object() const {
      return kind == Kind::object ? std::optional(SmallObject(text)) : std::nullopt;
    }

    // A constructor, not member initializers: SmallObject keeps an array of these, which a
    // nested class's member initializers do not allow before SmallObject is complete.
    Member() : kind(Kind::other), count_value(0), number_value(0) {}

    Kind kind;  // other: also "absent"
    std::uint64_t count_value;
    double number_value;
    std::string_view text;  // kind object: its text, already checked
  };

  // The object that is all of text, when the whole of it is in the subset. Its first members
  // are kept as the check walks them, so that members() need not walk the text again (a usage
  // object's three counts were read twice: ~1k of the ~6k instructions an answer's stats took).
  static std::optional<SmallObject> parse(std::string_view text) {
    std::size_t i = 0;
    SmallObject object(text);
    if (text.size() > kMaxMemberBytes ||
        !walk_object(text, i, 1,
                     [&](std::string_view key, const Member& value) { object.keep(key, value); }) ||
        skip_space(text, i) != text.size()) {
      return std::nullopt;
    }
    object.walked_ = true;
    return object;
  }

  template <std::size_t N>
  std::array<Member, N> members(const std::string_view (&names)[N]) const {
    std::array<Member, N> out;
    auto take = [&](std::string_view key, const Member& value) {
      for (std::size_t n = 0; n < N; ++n) {
        if (key == names[n]) {
          out[n] = value;  // the last of repeated keys, as nlohmann keeps it
        }
      }
    };
    if (walked_ && seen_ <= kKept) {
      for (std::size_t k = 0; k < seen_; ++k) {
        take(kept_[k].first, kept_[k].second);
      }
      return out;
    }
    std::size_t i = 0;
    // The text was checked by parse (or as part of its parent), so this walk succeeds.
    walk_object(text_, i, 1, take);
    return out;
  }

 private:
  static constexpr int kMaxDepth = 16;
  // OpenAI's usage has 3-5 members, llama.cpp's timings 9.
  static constexpr std::size_t kKept = 10;

  explicit SmallObject(std::string_view text) : text_(text) {}

  void keep(std::string_view key, const Member& value) {
    if (seen_ < kKept) {
      kept_[seen_] = {key, value};
    }
    ++seen_;
  }

  static bool is_digit(char c) { return c >= '0' && c <= '9'; }

  // The string opening at t[i], only printable ASCII without escapes; i moves past it.
  static bool walk_string(std::string_view t, std::size_t& i, std::string_view* out) {
    const std::size_t start = ++i;
    for (; i < t.size(); ++i) {
      const auto c = static_cast<unsigned char>(t[i]);
      if (c == '"') {
        if (out != nullptr) {
          *out = t.substr(start, i - start);
        }
        ++i;
        return true;
      }
      if (c < 0x20 || c >= 0x7f || c == '\\') {
        return false;  // a control byte (invalid), an escape or UTF-8: the DOM decides
      }
    }
    return false;
  }

  // A JSON number at t[i], typed as nlohmann types it: an integer that fits std::uint64_t is
  // a count; any other integer that fits std::int64_t, and every other number, is a double.
  static bool walk_number(std::string_view t, std::size_t& i, Member* out) {
    const std::size_t start = i;
    const bool negative = t[i] == '-';
    if (negative) {
      ++i;
    }
    if (i < t.size() && t[i] == '0') {
      ++i;
    } else if (i < t.size() && t[i] >= '1' && t[i] <= '9') {
      while (i < t.size() && is_digit(t[i])) {
        ++i;
      }
    } else {
      return false;
    }
    bool integer = true;
    if (i < t.size() && t[i] == '.') {
      integer = false;
      if (++i >= t.size() || !is_digit(t[i])) {
        return false;
      }
      while (i < t.size() && is_digit(t[i])) {
        ++i;
      }
    }
    if (i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
      integer = false;
      if (++i < t.size() && (t[i] == '+' || t[i] == '-')) {
        ++i;
      }
      if (i >= t.size() || !is_digit(t[i])) {
        return false;
      }
      while (i < t.size() && is_digit(t[i])) {
        ++i;
      }
    }
    const char* first = t.data() + start;
    const char* last = t.data() + i;
    Member m;
    if (integer && !negative) {
      if (auto [end, ec] = std::from_chars(first, last, m.count_value); ec == std::errc()) {
        m.kind = Member::Kind::count;
        m.number_value = static_cast<double>(m.count_value);
      }
    } else if (integer) {
      std::int64_t value = 0;
      if (auto [end, ec] = std::from_chars(first, last, value); ec == std::errc()) {
        m.kind = Member::Kind::number;
        m.number_value = static_cast<double>(value);
      }
    }
    if (m.kind == Member::Kind::other) {
      // A fraction, an exponent or an integer too large: nlohmann reads it with strtod (both
      // round correctly). Out of range (nlohmann refuses an overflow; an underflow): the DOM.
      auto [end, ec] = std::from_chars(first, last, m.number_value);
      if (ec != std::errc() || end != last || !std::isfinite(m.number_value)) {
        return false;
      }
      m.kind = Member::Kind::number;
    }
    if (out != nullptr) {
      *out = m;
    }
    return true;
  }

  static bool walk_literal(std::string_view t, std::size_t& i, std::string_view word) {
    if (t.substr(i, word.size()) != word) {
      return false;
    }
    i += word.size();
    return true;
  }

  // The value at t[i] (i moves past it); out, when given, gets its type and figures.
  static bool walk_value(std::string_view t, std::size_t& i, int depth, Member* out) {
    if (i >= t.size()) {
      return false;
    }
    switch (t[i]) {
      case '{': {
        const std::size_t start = i;
        if (!walk_object(t, i, depth + 1, [](std::string_view, const Member&) {})) {
          return false;
        }
        if (out != nullptr) {
          out->kind = Member::Kind::object;
          out->text = t.substr(start, i - start);
        }
        return true;
      }
      case '[':
        if (depth + 1 > kMaxDepth) {
          return false;
        }
        i = skip_space(t, i + 1);
        if (i < t.size() && t[i] == ']') {
          ++i;
          return true;
        }
        for (;;) {
          if (!walk_value(t, i, depth + 1, nullptr)) {
            return false;
          }
          i = skip_space(t, i);
          if (i >= t.size()) {
            return false;
          }
          if (t[i] == ']') {
            ++i;
            return true;
          }
          if (t[i] != ',') {
            return false;
          }
          i = skip_space(t, i + 1);
        }
      case '"':
        return walk_string(t, i, nullptr);
      case 't':
        return walk_literal(t, i, "true");
      case 'f':
        return walk_literal(t, i, "false");
      case 'n':
        return walk_literal(t, i, "null");
      default:
        return walk_number(t, i, out);
    }
  }

  // The object opening at t[i] (i moves past its '}'), every value checked; on(key, member)
  // for each of its own members, in order.
  template <class OnMember>
  static bool walk_object(std::string_view t, std::size_t& i, int depth, OnMember&& on) {
    if (depth > kMaxDepth || i >= t.size() || t[i] != '{') {
      return false;
    }
    i = skip_space(t, i + 1);
    if (i < t.size() && t[i] == '}') {
      ++i;
      return true;
    }
    for (;;) {
      std::string_view key;
      if (i >= t.size() || t[i] != '"' || !walk_string(t, i, &key)) {
        return false;
      }
      i = skip_space(t, i);
      if (i >= t.size() || t[i] != ':') {
        return false;
      }
      i = skip_space(t, i + 1);
      Member value;
      if (!walk_value(t, i, depth, &value)) {
        return false;
      }
      on(key, value);
      i = skip_space(t, i);
      if (i >= t.size()) {
        return false;
      }
      if (t[i] == '}') {
        ++i;
        return true;
      }
      if (t[i] != ',') {
        return false;
      }
      i = skip_space(t, i + 1);
    }
  }

  std::string_view text_;
  // Set by parse: the first kKept members in order, and how many the object has.
  bool walked_ = false;
  std::size_t seen_ = 0;
  std::array<std::pair<std::string_view, Member>, kKept> kept_;
};

template <class Member>
void read_count(const Member& member, std::optional<std::uint64_t>& out) {
  if (auto count = member.count()) {
    out = count;
  }
}

template <class Member>
void read_ms(const Member& member, std::optional<double>& out) {
  if (auto ms = member.number(); ms && std::isfinite(*ms) && *ms >= 0) {
    out = ms;
  }
}

template <class Object>
void read_timings(const Object& timings, AnswerStats& stats) {
  static constexpr std::string_view kNames[] = {"prompt_n", "prompt_ms", "predicted_n",
                                                "predicted_ms", "cache_n"};
  const auto m = timings.members(kNames);
  read_count(m[0], stats.prompt_n);
  read_ms(m[1], stats.prompt_ms);
  read_count(m[2], stats.predicted_n);
  read_ms(m[3], stats.predicted_ms);
  read_count(m[4], stats.cache_n);
}

// A usage object of three members: the prompt's count, the answer's, and an object whose
// cached_tokens is the prompt's cached part, under each API's own names.
template <class Object>
void read_usage_triple(const Object& usage, const std::string_view (&names)[3],
                       AnswerStats& stats) {
  static constexpr std::string_view kDetails[] = {"cached_tokens"};
  const auto m = usage.members(names);
  read_count(m[0], stats.prompt_tokens);
  read_count(m[1], stats.completion_tokens);
  if (auto details = m[2].object()) {
    read_count(details->members(kDetails)[0], stats.cached_tokens);
  }
}

// OpenAI's usage {prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens}.
template <class Object>
void read_openai_usage(const Object& usage, AnswerStats& stats) {
  static constexpr std::string_view kNames[] = {"prompt_tokens", "completion_tokens",
                                                "prompt_tokens_details"};
  read_usage_triple(usage, kNames, stats);
}

// The Responses API's usage object {input_tokens, output_tokens, input_tokens_details}.
template <class Object>
void read_responses_usage(const Object& usage, AnswerStats& stats) {
  static constexpr std::string_view kNames[] = {"input_tokens", "output_tokens",
                                                "input_tokens_details"};
  read_usage_triple(usage, kNames, stats);
}

// Anthropic's usage object. The prompt is input_tokens plus the cache's reads and writes; a
// delta that reports only output_tokens leaves the prompt as message_start said.
template <class Object>
void read_anthropic_usage(const Object& usage, AnswerStats& stats) {
  static constexpr std::string_view kNames[] = {"input_tokens", "cache_read_input_tokens",
                                                "cache_creation_input_tokens", "output_tokens"};
  const auto m = usage.members(kNames);
  if (auto input = m[0].count()) {
    const auto read = m[1].count();
    const auto created = m[2].count();
    stats.prompt_tokens = *input + read.value_or(0) + created.value_or(0);
    if (read) {
      stats.cached_tokens = read;
    }
  }
  read_count(m[3], stats.completion_tokens);
}

// Applies read to the object whose text is member, with the small reader when it can read it
// and allowed to, else with nlohmann (which also decides when member is no object at all).
template <class Read>
void read_object(const std::optional<std::string_view>& member, bool small, Read&& read) {
  if (!member) {
    return;
  }
  if (small) {
    if (auto object = SmallObject::parse(*member)) {
      read(*object);
      return;
    }
  }
  const auto dom = parse_value(member);
  if (dom.is_object()) {
    read(DomObject(dom));
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

// Whether the token limit cut the answer, from the members each API says it with (found[2] and
// found[3] of read_usage_and_timings): OpenAI's choices[0].finish_reason "length"; the Responses
// API's status "incomplete" for max_output_tokens; Anthropic's stop_reason "max_tokens" (at the
// top of a whole message, inside "delta" of a stream's message_delta).
void read_truncation(Api api, const std::optional<std::string_view>& a,
                     const std::optional<std::string_view>& b, AnswerStats& stats) {
  switch (api) {
    case Api::openai:
      read_finish_reason(a, stats);
      return;
    case Api::responses:
      if (is_quoted(a)) {
        const auto reason = b ? top_level_member(*b, "reason") : std::nullopt;
        stats.truncated = *a == "\"incomplete\"" && reason && *reason == "\"max_output_tokens\"";
      }
      return;
    case Api::anthropic: {
      std::optional<std::string_view> stop = a;
      if (!is_quoted(stop) && b) {
        stop = top_level_member(*b, "stop_reason");
      }
      if (is_quoted(stop)) {
        stats.truncated = *stop == "\"max_tokens\"";
      }
      return;
    }
  }
}

// "usage", "timings" and what says the answer was cut (read_truncation) at the top level of one
// document (an answer, an event, the "response" or "message" inside one), found in one pass over
// it (a whole answer is scanned once, not once per member: ~2 instructions a byte saved on
// every answer).
void read_usage_and_timings(Api api, std::string_view json, AnswerStats& stats, bool small) {
  static constexpr std::string_view kOpenAi[] = {"usage", "timings", "choices"};
  static constexpr std::string_view kResponses[] = {"usage", "timings", "status",
                                                    "incomplete_details"};
  static constexpr std::string_view kAnthropic[] = {"usage", "timings", "stop_reason", "delta"};
  std::optional<std::string_view> found[4];
  switch (api) {
    case Api::openai:
      top_level_members(json, kOpenAi, std::span(found, 3));
      break;
    case Api::responses:
      top_level_members(json, kResponses, found);
      break;
    case Api::anthropic:
      top_level_members(json, kAnthropic, found);
      break;
  }
  read_truncation(api, found[2], found[3], stats);
  read_object(found[0], small, [&](const auto& usage) {
    switch (api) {
      case Api::openai:
        read_openai_usage(usage, stats);
        return;
      case Api::responses:
        read_responses_usage(usage, stats);
        return;
      case Api::anthropic:
        read_anthropic_usage(usage, stats);
        return;
    }
  });
  read_object(found[1], small, [&](const auto& timings) { read_timings(timings, stats); });
}

}  // namespace

namespace detail {
// Three std::string_view::find calls for the quoted names called memchr at every quote of the
// event (~1.8k instructions per streamed event, an event per token); every name has a 'g',
// which few bytes of a chunk are (swar::contains_any).
bool names_a_stat(std::string_view data) {
  return swar::contains_any(data, {"\"usage\"", "\"timings\"", "\"length\""}, 'g');
}
}  // namespace detail

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
  read_usage_and_timings(api, body, stats, true);
}

namespace detail {
void read_stats_from_body_dom(Api api, std::string_view body, AnswerStats& stats) {
  read_usage_and_timings(api, body, stats, false);
}
bool small_reader_takes(std::string_view object) {
  return SmallObject::parse(object).has_value();
}
}  // namespace detail

void read_stats_from_event(Api api, const SseEvent& event, AnswerStats& stats) {
  // Only a few events carry usage or timings; the others (the text deltas, "[DONE]") are skipped
  // by the first look for the member names. A quote inside a JSON string is escaped, so "usage"
  // with its quotes can only be a member name.
  // "length" with its quotes is likewise a JSON string of its own: a chunk that says
  // finish_reason "length".
  const std::string_view data = event.data;
  if (!detail::names_a_stat(data)) {
    return;
  }
  switch (api) {
    case Api::openai:
      read_usage_and_timings(api, data, stats, true);
      return;
    case Api::responses:
      // response.completed, response.incomplete, response.failed: {"response": {..., "usage"}}.
      // The response object holds the whole answer, so it is scanned, not parsed.
      if (auto response = top_level_member(data, "response")) {
        read_usage_and_timings(api, *response, stats, true);
      }
      return;
    case Api::anthropic:
      // message_start: {"message": {..., "usage"}}; message_delta: {"usage": {...}}.
      if (auto message = top_level_member(data, "message")) {
        read_usage_and_timings(api, *message, stats, true);
      } else {
        read_usage_and_timings(api, data, stats, true);
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
