#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "common/openai/api.hpp"

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
// A typed event, as the Responses and Anthropic APIs send them: "event: <type>\ndata:
// <payload>\n\n".
std::string sse_event(std::string_view type, std::string_view payload);
// The error event that ends a stream of the family: openai as sse_error; responses an "error"
// event {"type":"error","sequence_number":0,"error":{"type","code","message","param"}} (the
// nested form both the openai client and the AI SDK read; the gateway does not count the
// replica's sequence numbers); anthropic an "error" event {"type":"error","error":{...}} (its
// SDK skips events without an event name).
std::string api_stream_error(Api api, int status, std::string_view message, std::string_view code);

}  // namespace fg::openai

namespace fg::openai {

// Relays a replica's event stream one whole event at a time, in time linear in the bytes (each
// byte is examined once, however the stream is split) and in memory bounded by the longest
// event allowed. An event still incomplete is held until its blank line; an event (or line)
// growing beyond max_event_bytes ends the relay, and nothing of it is forwarded, so the client's
// stream stays well formed for the error event that ends it.
//
// on_event sees every event dispatched (for usage and timings). With strip_usage (the gateway
// asked the replica for usage the client did not ask for), the usage-only event (empty "choices"
// and a "usage" object) is dropped and the `"usage":null` members other chunks then carry are
// removed, so the client receives what it would have without stream_options.include_usage. Every
// other byte is forwarded unchanged.
class SseRelay {
 public:
  using EventHandler = std::function<void(const SseEvent&)>;
  SseRelay(std::size_t max_event_bytes, bool strip_usage, EventHandler on_event);
  SseRelay(const SseRelay&) = delete;
  SseRelay& operator=(const SseRelay&) = delete;

  // Appends to out the bytes to forward now (the events these bytes completed). False once an
  // event is longer than max_event_bytes: the stream must end; later calls forward nothing.
  bool feed(std::string_view bytes, std::string& out);
  // The end of the stream: what is left of an event that had no closing blank line, unchanged;
  // an event whose blank line ended with a CR at the very end of the stream is complete and
  // relayed (seen by on_event, stripped) like any other.
  std::string finish();

  bool overflowed() const { return overflowed_; }
  std::size_t held() const { return held_.size(); }
  // The held bytes' buffer: between whole events no heap block is kept (std::string's own).
  std::size_t held_capacity() const { return held_.capacity(); }
  // Bytes examined for event ends so far: the bytes fed, each once (the relay never rescans).
  std::uint64_t bytes_scanned() const { return bytes_scanned_; }

 private:
  void forward(std::string_view event, std::string& out);

  std::size_t max_event_bytes_;
  bool strip_usage_;
  EventHandler on_event_;
  SseParser parser_;
  std::string held_;         // the incomplete event
  std::size_t scanned_ = 0;  // bytes of held_ already examined
  int breaks_ = 0;  // line breaks in a row before scanned_ (2: the event ended, maybe before an LF)
  bool after_cr_ = false;  // the last byte examined was a CR (an LF next is the same break)
  bool overflowed_ = false;
  std::uint64_t bytes_scanned_ = 0;
  // What the dispatched event asks of the relay (set by parser_'s handler).
  enum class Strip { keep, drop, remove_null_usage } strip_ = Strip::keep;
};

}  // namespace fg::openai
