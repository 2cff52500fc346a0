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

namespace fg::openai {

// For a stream on which the gateway asked the replica for usage the client did not ask for:
// passes events through unchanged except that it drops the usage-only event (empty "choices"
// and a "usage" object) and the `"usage":null` members other chunks then carry, so the client
// receives what it would have without stream_options.include_usage. Usage is handed to on_usage.
// Works on whole events: bytes of an event still incomplete are held until its blank line.
class UsageStripper {
 public:
  using UsageHandler = std::function<void(std::string_view data)>;
  explicit UsageStripper(UsageHandler on_usage) : on_usage_(std::move(on_usage)) {}
  // Returns the bytes to forward now.
  std::string feed(std::string_view bytes);
  // Whatever is still held (a stream that ended without a final blank line).
  std::string finish();

 private:
  std::string event_out(std::string_view event);
  UsageHandler on_usage_;
  std::string held_;
};

}  // namespace fg::openai
