#include "common/openai/sse.hpp"

#include "common/openai/errors.hpp"

namespace fg::openai {

namespace {

// Writes each line of text behind prefix, so a payload containing line breaks stays one event
// instead of ending it early (the reader joins the data lines back with '\n').
std::string prefix_lines(std::string_view prefix, std::string_view text) {
  std::string out;
  out.reserve(text.size() + prefix.size() + 3);
  while (true) {
    const std::size_t end = text.find_first_of("\r\n");
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
    const std::size_t end = bytes.find_first_of("\r\n");
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

}  // namespace fg::openai

namespace fg::openai {

namespace {

// The end of the first event in text (just past its blank line), or npos.
std::size_t event_end(std::string_view text) {
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n' && text[i] != '\r') {
      continue;
    }
    // A line break; a second one right after it ends the event.
    std::size_t j = i + 1;
    if (text[i] == '\r' && j < text.size() && text[j] == '\n') {
      ++j;
    }
    if (j < text.size() && (text[j] == '\n' || text[j] == '\r')) {
      std::size_t k = j + 1;
      if (text[j] == '\r' && k < text.size() && text[k] == '\n') {
        ++k;
      }
      return k;
    }
  }
  return std::string_view::npos;
}

}  // namespace

std::string UsageStripper::event_out(std::string_view event) {
  std::string data;
  SseParser parser([&](const SseEvent& e) { data = e.data; });
  parser.feed(event);
  if (data.find("\"usage\"") == std::string::npos) {
    return std::string(event);
  }
  // The usage-only chunk: {"choices":[], "usage":{...}} (OpenAI, llama.cpp, fleetgate-agent).
  const bool empty_choices = data.find("\"choices\":[]") != std::string::npos;
  const bool usage_object = data.find("\"usage\":{") != std::string::npos;
  if (empty_choices && usage_object) {
    on_usage_(data);
    return {};
  }
  // Other chunks carry "usage":null once usage was asked for. A quote inside a JSON string is
  // escaped, so this exact text can only be the member itself.
  std::string out(event);
  for (std::string_view member : {",\"usage\":null", "\"usage\":null,"}) {
    for (auto at = out.find(member); at != std::string::npos; at = out.find(member, at)) {
      out.erase(at, member.size());
    }
  }
  if (usage_object) {
    on_usage_(data);
  }
  return out;
}

std::string UsageStripper::feed(std::string_view bytes) {
  held_.append(bytes);
  std::string out;
  std::size_t start = 0;
  for (;;) {
    auto end = event_end(std::string_view(held_).substr(start));
    if (end == std::string_view::npos) {
      break;
    }
    out += event_out(std::string_view(held_).substr(start, end));
    start += end;
  }
  held_.erase(0, start);
  return out;
}

std::string UsageStripper::finish() {
  std::string rest = std::move(held_);
  held_.clear();
  return rest;
}

}  // namespace fg::openai
