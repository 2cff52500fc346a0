#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace fg::openai {

// One Server-Sent Event. Comment lines (": keep-alive") are not events.
struct SseEvent {
  std::string event;  // "" unless an "event:" field was given
  std::string data;   // "data:" lines joined with '\n'
  std::string id;
};

// Incremental SSE parser (WHATWG rules: LF, CRLF or CR line ends; one optional space after the
// colon; an event is dispatched at a blank line; events with no data line are not dispatched).
// Bytes may arrive split anywhere, including inside a CRLF.
class SseParser {
 public:
  using Handler = std::function<void(const SseEvent&)>;
  explicit SseParser(Handler on_event) : on_event_(std::move(on_event)) {}
  void feed(std::string_view bytes);
  // Bytes held waiting for the end of a line or event (bounded use: callers cap memory by this).
  std::size_t buffered() const { return line_.size() + pending_.data.size(); }

 private:
  void line(std::string_view l);
  Handler on_event_;
  std::string line_;
  bool last_was_cr_ = false;
  SseEvent pending_;
  bool has_data_ = false;
};

// Framing helpers for what the gateway itself writes into a stream.
std::string sse_data(std::string_view payload);  // "data: <payload>\n\n"
std::string sse_comment(std::string_view text);  // ": <text>\n\n"
// An OpenAI-style error inside a stream: "data: {\"error\":{...}}\n\n" followed by
// "data: [DONE]\n\n" so that SDKs stop reading.
std::string sse_error(std::string_view message, std::string_view type, std::string_view code);

}  // namespace fg::openai
