#include "common/openai/sse.hpp"

#include <nlohmann/json.hpp>

#include "common/openai/errors.hpp"
#include "common/util/swar.hpp"

namespace fg::openai {

namespace {

// The first CR or LF of text at or after from, or npos. Not find_first_of("\r\n"): libstdc++
// calls memchr on the two-byte set for every byte it scans, which was 71k of the ~305k
// instructions a proxied 10-event stream cost (callgrind, `./fleet bench cpu`); swar::find
// tests eight bytes at a time (every event's bytes are scanned twice: the relay's event ends,
// the parser's lines).
std::size_t find_line_break(std::string_view text, std::size_t from = 0) {
  return swar::find(text, from, '\r', '\n');
}

// Writes each line of text behind prefix, so a payload containing line breaks stays one event
// instead of ending it early (the reader joins the data lines back with '\n').
std::string prefix_lines(std::string_view prefix, std::string_view text) {
  std::string out;
  out.reserve(text.size() + prefix.size() + 3);
  while (true) {
    const std::size_t end = find_line_break(text);
    out += prefix;
    out += text.substr(0, end);
    out += '\n';
    if (end == std::string_view::npos) {
      break;
    }
    const bool crlf = text[end] == '\r' && end + 1 < text.size() && text[end + 1] == '\n';
    text.remove_prefix(end + (crlf ? 2 : 1));
  }
  out += '\n';
  return out;
}

}  // namespace

void SseParser::feed(std::string_view bytes) {
  while (!bytes.empty()) {
    // A CR ended the previous line; an LF right after it (maybe in this feed) is the same break.
    if (last_was_cr_) {
      last_was_cr_ = false;
      if (bytes.front() == '\n') {
        bytes.remove_prefix(1);
        continue;
      }
    }
    const std::size_t end = find_line_break(bytes);
    if (end == std::string_view::npos) {
      line_.append(bytes);
      return;
    }
    last_was_cr_ = bytes[end] == '\r';
    // Most lines arrive whole: parse them in place without copying into line_.
    if (line_.empty()) {
      line(bytes.substr(0, end));
    } else {
      line_.append(bytes.substr(0, end));
      const std::string whole = std::move(line_);
      line_.clear();
      line(whole);
    }
    bytes.remove_prefix(end + 1);
  }
}

void SseParser::line(std::string_view l) {
  if (l.empty()) {
    if (!has_data_) {
      pending_.event.clear();
      return;
    }
    // Reset before calling out so the parser is consistent even if the handler throws or feeds.
    SseEvent event;
    event.event = std::move(pending_.event);
    event.data = std::move(pending_.data);
    event.id = pending_.id;  // the last event ID persists across events (WHATWG)
    pending_.event.clear();
    pending_.data.clear();
    has_data_ = false;
    on_event_(event);
    return;
  }
  if (l.front() == ':') {
    return;  // comment, e.g. ": keep-alive"
  }
  const std::size_t colon = l.find(':');
  const std::string_view field = l.substr(0, colon);
  std::string_view value =
      colon == std::string_view::npos ? std::string_view{} : l.substr(colon + 1);
  if (!value.empty() && value.front() == ' ') {
    value.remove_prefix(1);
  }
  if (field == "data") {
    if (has_data_) {
      pending_.data += '\n';
    }
    pending_.data.append(value);
    has_data_ = true;
  } else if (field == "event") {
    pending_.event.assign(value);
  } else if (field == "id") {
    if (value.find('\0') == std::string_view::npos) {
      pending_.id.assign(value);
    }
  }
  // "retry" and unknown fields are ignored: the gateway never reconnects on a client's behalf.
}

std::string sse_data(std::string_view payload) {
  return prefix_lines("data: ", payload);
}

std::string sse_comment(std::string_view text) {
  return prefix_lines(": ", text);
}

std::string sse_error(std::string_view message, std::string_view type, std::string_view code) {
  return sse_data(error_body(message, type, code)) + sse_data("[DONE]");
}

std::string sse_event(std::string_view type, std::string_view payload) {
  // Types are the APIs' own names (never client text), so they hold no line break.
  std::string out = "event: ";
  out += type;
  out += '\n';
  out += sse_data(payload);
  return out;
}

std::string api_stream_error(Api api, int status, std::string_view message, std::string_view code) {
  switch (api) {
    case Api::openai:
      break;
    case Api::responses: {
      nlohmann::ordered_json error = {
          {"type", error_type_for_status(status)},
          {"code", code.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code)},
          {"message", message},
          {"param", nullptr}};
      nlohmann::ordered_json event = {
          {"type", "error"}, {"sequence_number", 0}, {"error", std::move(error)}};
      return sse_event(
          "error", event.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
    }
    case Api::anthropic:
      return sse_event("error", api_error_body(api, status, message));
  }
  return sse_error(message, error_type_for_status(status), code);
}

}  // namespace fg::openai

namespace fg::openai {

namespace {

constexpr std::string_view kNullUsage = "\"usage\":null";

// Whether text holds "usage" with its quotes: found by its 'g' (swar::contains_any), not by
// find("\"usage\""), which calls memchr at every quote (~0.5k instructions per streamed event).
bool holds_usage(std::string_view text) {
  return swar::contains_any(text, {"\"usage\""}, 'g');
}

// text without its `"usage":null` members (and the comma that joined each to its neighbour), in
// one pass. A quote inside a JSON string is escaped, so this exact text can only be the member.
std::string without_null_usage(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t from = 0;
  for (auto at = text.find(kNullUsage); at != std::string_view::npos;
       at = text.find(kNullUsage, from)) {
    const std::size_t end = at + kNullUsage.size();
    if (at > from && text[at - 1] == ',') {
      out.append(text.substr(from, at - 1 - from));
      from = end;
    } else if (end < text.size() && text[end] == ',') {
      out.append(text.substr(from, at - from));
      from = end + 1;
    } else {
      out.append(text.substr(from, end - from));
      from = end;
    }
  }
  out.append(text.substr(from));
  return out;
}

}  // namespace

SseRelay::SseRelay(std::size_t max_event_bytes, bool strip_usage, EventHandler on_event)
    : max_event_bytes_(max_event_bytes),
      strip_usage_(strip_usage),
      on_event_(std::move(on_event)),
      parser_([this](const SseEvent& event) {
        if (on_event_) {
          on_event_(event);
        }
        if (!strip_usage_ || !holds_usage(event.data)) {
          return;
        }
        // The usage-only chunk: {"choices":[], "usage":{...}} (OpenAI, llama.cpp, the agent).
        const bool usage_only = event.data.find("\"choices\":[]") != std::string::npos &&
                                event.data.find("\"usage\":{") != std::string::npos;
        strip_ = usage_only ? Strip::drop : Strip::remove_null_usage;
      }) {}

void SseRelay::forward(std::string_view event, std::string& out) {
  strip_ = Strip::keep;
  // The event ends with its blank line, so the parser dispatches it (if it has data) right here.
  parser_.feed(event);
  switch (strip_) {
    case Strip::keep:
      out.append(event);
      break;
    case Strip::drop:
      break;
    case Strip::remove_null_usage:
      out += without_null_usage(event);
      break;
  }
}

bool SseRelay::feed(std::string_view bytes, std::string& out) {
  if (overflowed_) {
    return false;
  }
  // Events are forwarded from the bytes as they came; only an incomplete tail is copied into
  // held_. Copying every piece kept the last event's size of capacity in each held stream
  // (~170 bytes per stream between two events) and copied each byte once more.
  std::string_view data = bytes;
  if (!held_.empty()) {
    held_.append(bytes);
    data = held_;
  }
  std::size_t start = 0;  // where the current event begins in data
  std::size_t i = scanned_;
  for (;;) {
    if (breaks_ == 2) {
      // A blank line ended the event; a CR may still be followed by the LF of its CRLF, which
      // belongs to this event.
      if (after_cr_) {
        if (i == data.size()) {
          break;  // known with the next byte (or at the end of the stream)
        }
        if (data[i] == '\n') {
          ++i;
        }
        after_cr_ = false;
      }
      breaks_ = 0;
      if (i - start > max_event_bytes_) {
        overflowed_ = true;
        break;
      }
      forward(data.substr(start, i - start), out);
      start = i;
      continue;
    }
    if (i == data.size()) {
      break;
    }
    const char c = data[i];
    if (c != '\r' && c != '\n') {
      breaks_ = 0;
      after_cr_ = false;
      const std::size_t next = find_line_break(data, i + 1);
      i = next == std::string::npos ? data.size() : next;
      continue;
    }
    ++i;
    if (c == '\n' && after_cr_) {
      after_cr_ = false;  // the LF of a CRLF: the same line break
      continue;
    }
    after_cr_ = c == '\r';
    ++breaks_;
  }
  bytes_scanned_ += i - scanned_;
  if (!overflowed_ && data.size() - start > max_event_bytes_) {
    overflowed_ = true;
  }
  if (overflowed_) {
    std::string().swap(held_);
    scanned_ = 0;
    return false;
  }
  if (data.data() == held_.data()) {
    held_.erase(0, start);
  } else {
    held_.assign(data.substr(start));
  }
  if (held_.empty()) {
    std::string().swap(held_);  // no heap block kept between events
  }
  scanned_ = held_.size();
  return true;
}

std::string SseRelay::finish() {
  std::string rest;
  if (!overflowed_ && breaks_ == 2) {
    // The held event is complete: it ended with a CR, and only an LF (of a CRLF) could still
    // have followed. It is relayed like every other event: seen by on_event, stripped.
    forward(held_, rest);
  } else {
    rest = std::move(held_);
  }
  held_.clear();
  scanned_ = 0;
  breaks_ = 0;
  after_cr_ = false;
  return rest;
}

}  // namespace fg::openai
