#include "common/openai/sse.hpp"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

namespace fg::openai {
namespace {

// Collects every event a parser dispatches.
struct Recorder {
  std::vector<SseEvent> events;
  SseParser parser{[this](const SseEvent& e) { events.push_back(e); }};
};

std::vector<SseEvent> parse_all(std::string_view stream) {
  Recorder r;
  r.parser.feed(stream);
  return r.events;
}

// Feeds the stream in two pieces split at `at`.
std::vector<SseEvent> parse_split(std::string_view stream, std::size_t at) {
  Recorder r;
  r.parser.feed(stream.substr(0, at));
  r.parser.feed(stream.substr(at));
  return r.events;
}

std::vector<std::string> datas(const std::vector<SseEvent>& events) {
  std::vector<std::string> out;
  for (const auto& e : events) {
    out.push_back(e.data);
  }
  return out;
}

using Strings = std::vector<std::string>;

TEST(SseParser, SingleEvent) {
  const auto events = parse_all("data: {\"a\":1}\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "{\"a\":1}");
  EXPECT_EQ(events[0].event, "");
  EXPECT_EQ(events[0].id, "");
}

TEST(SseParser, NoDispatchWithoutBlankLine) {
  Recorder r;
  r.parser.feed("data: x\n");
  EXPECT_TRUE(r.events.empty());
  r.parser.feed("\n");
  EXPECT_EQ(datas(r.events), Strings{"x"});
}

TEST(SseParser, LineEndingsLfCrlfCr) {
  EXPECT_EQ(datas(parse_all("data: a\n\ndata: b\r\n\r\ndata: c\r\rdata: d\n\r\n")),
            (Strings{"a", "b", "c", "d"}));
}

TEST(SseParser, OptionalSingleSpaceAfterColon) {
  EXPECT_EQ(datas(parse_all("data:x\n\n")), Strings{"x"});
  EXPECT_EQ(datas(parse_all("data: x\n\n")), Strings{"x"});
  EXPECT_EQ(datas(parse_all("data:  x\n\n")), Strings{" x"});  // only one space is stripped
  EXPECT_EQ(datas(parse_all("data: x \n\n")), Strings{"x "});
  EXPECT_EQ(datas(parse_all("data:\tx\n\n")), Strings{"\tx"});
}

TEST(SseParser, MultiLineDataJoinedWithNewline) {
  EXPECT_EQ(datas(parse_all("data: a\ndata: b\ndata:c\n\n")), Strings{"a\nb\nc"});
  EXPECT_EQ(datas(parse_all("data: a\ndata:\ndata: b\n\n")), Strings{"a\n\nb"});
}

TEST(SseParser, EmptyDataStillDispatched) {
  EXPECT_EQ(datas(parse_all("data\n\n")), Strings{""});
  EXPECT_EQ(datas(parse_all("data:\n\n")), Strings{""});
}

TEST(SseParser, EventsWithoutDataAreNotDispatched) {
  EXPECT_TRUE(parse_all("event: ping\n\n").empty());
  EXPECT_TRUE(parse_all("id: 7\n\n").empty());
  EXPECT_TRUE(parse_all("\n\n\n\n").empty());
  EXPECT_TRUE(parse_all("retry: 1000\n\n").empty());
}

TEST(SseParser, EventTypeDoesNotLeakIntoNextEvent) {
  const auto events = parse_all("event: ping\n\ndata: x\n\nevent: error\ndata: y\n\ndata: z\n\n");
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].event, "");
  EXPECT_EQ(events[0].data, "x");
  EXPECT_EQ(events[1].event, "error");
  EXPECT_EQ(events[1].data, "y");
  EXPECT_EQ(events[2].event, "");
}

TEST(SseParser, EventFieldAndLastWins) {
  const auto events = parse_all("event: a\nevent:b\ndata: 1\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].event, "b");
}

TEST(SseParser, IdPersistsAcrossEvents) {
  const auto events = parse_all("id: 1\ndata: a\n\ndata: b\n\nid\ndata: c\n\n");
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].id, "1");
  EXPECT_EQ(events[1].id, "1");
  EXPECT_EQ(events[2].id, "");
  // An id containing NUL is ignored.
  const auto nul = parse_all(std::string("id: 5\ndata: a\n\nid: x\0y\ndata: b\n\n", 33));
  ASSERT_EQ(nul.size(), 2u);
  EXPECT_EQ(nul[1].id, "5");
}

TEST(SseParser, CommentsIgnored) {
  const auto events = parse_all(": keep-alive\n\n:\ndata: a\n: between\ndata: b\n\n: tail\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "a\nb");
}

TEST(SseParser, UnknownFieldsIgnored) {
  EXPECT_EQ(datas(parse_all("foo: bar\nDATA: no\ndata : no\ndata: yes\n\n")), Strings{"yes"});
}

TEST(SseParser, ColonsInValueKept) {
  EXPECT_EQ(datas(parse_all("data: a: b:c\n\n")), Strings{"a: b:c"});
}

TEST(SseParser, DoneMarker) {
  const auto events = parse_all("data: {\"x\":1}\n\ndata: [DONE]\n\n");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].data, "[DONE]");
}

TEST(SseParser, IncompleteEventAtEndNotDispatched) {
  Recorder r;
  r.parser.feed("data: a\n\ndata: partial\n");
  EXPECT_EQ(datas(r.events), Strings{"a"});
}

const std::string kMixedStream =
    ": keep-alive\r\n\r\n"
    "event: message\r\n"
    "id: 42\r\n"
    "data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\r\n"
    "\r\n"
    "data:line1\n"
    "data: line2\r"
    "\r"
    "data: [DONE]\r\n"
    "\r\n";

void expect_mixed(const std::vector<SseEvent>& events, const std::string& where) {
  ASSERT_EQ(events.size(), 3u) << where;
  EXPECT_EQ(events[0].event, "message") << where;
  EXPECT_EQ(events[0].id, "42") << where;
  EXPECT_EQ(events[0].data, "{\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}") << where;
  EXPECT_EQ(events[1].event, "") << where;
  EXPECT_EQ(events[1].data, "line1\nline2") << where;
  EXPECT_EQ(events[2].data, "[DONE]") << where;
}

TEST(SseParser, SplitAtEveryBytePosition) {
  for (std::size_t at = 0; at <= kMixedStream.size(); ++at) {
    expect_mixed(parse_split(kMixedStream, at), "split at " + std::to_string(at));
  }
}

TEST(SseParser, SplitAtEveryPairOfPositions) {
  for (std::size_t a = 0; a <= kMixedStream.size(); ++a) {
    for (std::size_t b = a; b <= kMixedStream.size(); ++b) {
      Recorder r;
      const std::string_view s = kMixedStream;
      r.parser.feed(s.substr(0, a));
      r.parser.feed(s.substr(a, b - a));
      r.parser.feed(s.substr(b));
      expect_mixed(r.events, "split at " + std::to_string(a) + "," + std::to_string(b));
      if (HasFailure()) {
        return;
      }
    }
  }
}

TEST(SseParser, OneByteAtATime) {
  Recorder r;
  for (char c : kMixedStream) {
    r.parser.feed(std::string_view(&c, 1));
  }
  expect_mixed(r.events, "byte by byte");
}

TEST(SseParser, CrlfSplitAcrossFeedsIsOneLineBreak) {
  // If the LF after a CR were taken as a second line end, "data: a\r" + "\n" + "data: b\n\n"
  // would dispatch "a" alone and then "b".
  Recorder r;
  r.parser.feed("data: a\r");
  r.parser.feed("\ndata: b\r");
  r.parser.feed("\n");
  EXPECT_TRUE(r.events.empty());
  r.parser.feed("\r");
  EXPECT_EQ(datas(r.events), Strings{"a\nb"});
  // The LF completing that CRLF is not a second blank line, so nothing else is dispatched.
  r.parser.feed("\ndata: c\r");
  r.parser.feed("\n\r\n");
  EXPECT_EQ(datas(r.events), (Strings{"a\nb", "c"}));
}

TEST(SseParser, CrThenOtherByteInNextFeed) {
  Recorder r;
  r.parser.feed("data: a\r");
  r.parser.feed("data: b\r");
  r.parser.feed("\r");
  EXPECT_EQ(datas(r.events), Strings{"a\nb"});
}

TEST(SseParser, EmptyFeedsAreHarmless) {
  Recorder r;
  r.parser.feed("");
  r.parser.feed("data: a\r");
  r.parser.feed("");
  r.parser.feed("\n");
  r.parser.feed("");
  r.parser.feed("\n");
  EXPECT_EQ(datas(r.events), Strings{"a"});
}

TEST(SseParser, BufferedCountsPendingBytes) {
  Recorder r;
  EXPECT_EQ(r.parser.buffered(), 0u);
  r.parser.feed("data: abc");
  EXPECT_EQ(r.parser.buffered(), 9u);  // partial line
  r.parser.feed("\n");
  EXPECT_EQ(r.parser.buffered(), 3u);  // "abc" waiting for the blank line
  r.parser.feed("data: de\n");
  EXPECT_EQ(r.parser.buffered(), 6u);  // "abc\nde"
  r.parser.feed("\n");
  EXPECT_EQ(r.parser.buffered(), 0u);
  r.parser.feed(": a long comment line that is not finished");
  EXPECT_GT(r.parser.buffered(), 0u);
  r.parser.feed("\n");
  EXPECT_EQ(r.parser.buffered(), 0u);
}

TEST(SseParser, HandlerMayFeedAgain) {
  std::vector<std::string> seen;
  SseParser* self = nullptr;
  SseParser parser([&](const SseEvent& e) {
    seen.push_back(e.data);
    if (e.data == "first") {
      self->feed("data: nested\n\n");
    }
  });
  self = &parser;
  parser.feed("data: first\n\ndata: second\n\n");
  EXPECT_EQ(seen, (Strings{"first", "nested", "second"}));
}

TEST(SseWriter, DataFraming) {
  EXPECT_EQ(sse_data("{\"a\":1}"), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_data("[DONE]"), "data: [DONE]\n\n");
  EXPECT_EQ(sse_data(""), "data: \n\n");
}

TEST(SseWriter, MultiLinePayloadStaysOneEvent) {
  EXPECT_EQ(sse_data("a\nb"), "data: a\ndata: b\n\n");
  EXPECT_EQ(sse_data("a\r\nb\rc"), "data: a\ndata: b\ndata: c\n\n");
  EXPECT_EQ(datas(parse_all(sse_data("a\n\nb"))), Strings{"a\n\nb"});
}

TEST(SseWriter, CommentFraming) {
  EXPECT_EQ(sse_comment("keep-alive"), ": keep-alive\n\n");
  EXPECT_TRUE(parse_all(sse_comment("keep-alive")).empty());
  EXPECT_TRUE(parse_all(sse_comment("x\ndata: injected")).empty());
}

TEST(SseWriter, RoundTripThroughParser) {
  const std::string stream = sse_comment("keep-alive") + sse_data("{\"x\":1}") +
                             sse_data("two\nlines") + sse_data("[DONE]");
  EXPECT_EQ(datas(parse_all(stream)), (Strings{"{\"x\":1}", "two\nlines", "[DONE]"}));
}

TEST(SseWriter, ErrorIsValidJsonThenDone) {
  const std::string text =
      sse_error("upstream \"replica\" failed\nbadly", "server_error", "upstream_error");
  const auto events = parse_all(text);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1].data, "[DONE]");
  const auto body = nlohmann::json::parse(events[0].data);
  const auto& error = body.at("error");
  EXPECT_EQ(error.at("message"), "upstream \"replica\" failed\nbadly");
  EXPECT_EQ(error.at("type"), "server_error");
  EXPECT_EQ(error.at("code"), "upstream_error");
  EXPECT_TRUE(error.at("param").is_null());
  // Exact framing: one data line of JSON, then the DONE marker.
  EXPECT_EQ(text, "data: " + events[0].data + "\n\ndata: [DONE]\n\n");
  EXPECT_EQ(text.rfind("data: {\"error\":", 0), 0u);
}

TEST(SseWriter, ErrorWithEmptyCodeHasNullCode) {
  const auto events = parse_all(sse_error("x", "server_error", ""));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_TRUE(nlohmann::json::parse(events[0].data).at("error").at("code").is_null());
}

}  // namespace
}  // namespace fg::openai

namespace fg::openai {
namespace {

constexpr std::string_view kStream =
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"RISK\"}}],"
    "\"usage\":null}\n\n"
    ": keep-alive\n\n"
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}],"
    "\"usage\":null}\n\n"
    "data: {\"id\":\"c\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,"
    "\"completion_tokens\":2}}\n\n"
    "data: [DONE]\n\n";

constexpr std::string_view kExpected =
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"RISK\"}}]}\n\n"
    ": keep-alive\n\n"
    "data: {\"id\":\"c\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}"
    "\n\n"
    "data: [DONE]\n\n";

constexpr std::size_t kCap = 1024 * 1024;

// Relays the stream fed in the given pieces; returns what was forwarded (finish() included).
std::string relay_all(SseRelay& relay, const std::vector<std::string_view>& pieces) {
  std::string out;
  for (auto piece : pieces) {
    EXPECT_TRUE(relay.feed(piece, out));
  }
  return out + relay.finish();
}

int usage_events(const SseEvent& e) {
  return e.data.find("\"usage\":{") != std::string::npos ? 1 : 0;
}

TEST(SseRelay, StripDropsTheUsageChunkAndNullMembers) {
  int usage = 0;
  SseRelay relay(kCap, true, [&](const SseEvent& e) { usage += usage_events(e); });
  EXPECT_EQ(relay_all(relay, {kStream}), kExpected);
  EXPECT_EQ(usage, 1);
}

TEST(SseRelay, WithoutStripEveryByteIsForwarded) {
  int usage = 0;
  SseRelay relay(kCap, false, [&](const SseEvent& e) { usage += usage_events(e); });
  EXPECT_EQ(relay_all(relay, {kStream}), kStream);
  EXPECT_EQ(usage, 1);
}

TEST(SseRelay, SameResultWhateverTheSplit) {
  for (bool strip : {true, false}) {
    for (std::size_t cut = 0; cut <= kStream.size(); ++cut) {
      int usage = 0;
      SseRelay relay(kCap, strip, [&](const SseEvent& e) { usage += usage_events(e); });
      ASSERT_EQ(relay_all(relay, {kStream.substr(0, cut), kStream.substr(cut)}),
                strip ? kExpected : kStream)
          << "split at " << cut;
      ASSERT_EQ(usage, 1);
    }
  }
}

TEST(SseRelay, ByteByByte) {
  SseRelay relay(kCap, true, nullptr);
  std::string out;
  for (char c : kStream) {
    ASSERT_TRUE(relay.feed(std::string_view(&c, 1), out));
  }
  EXPECT_EQ(out + relay.finish(), kExpected);
}

TEST(SseRelay, HoldsOnlyAnIncompleteEvent) {
  SseRelay relay(kCap, true, nullptr);
  std::string out;
  ASSERT_TRUE(relay.feed("data: {\"a\":1}\n\ndata: {\"b\"", out));
  EXPECT_EQ(out, "data: {\"a\":1}\n\n");
  EXPECT_EQ(relay.held(), 10u);
  out.clear();
  ASSERT_TRUE(relay.feed(":2}\r\n\r\n", out));
  EXPECT_EQ(out, "data: {\"b\":2}\r\n\r\n");
  EXPECT_EQ(relay.held(), 0u);
  out.clear();
  ASSERT_TRUE(relay.feed("data: tail", out));
  EXPECT_EQ(out, "");
  EXPECT_EQ(relay.finish(), "data: tail");
}

TEST(SseRelay, KeepsNoBufferBetweenWholeEvents) {
  // A held stream waits between events for minutes: whole events are forwarded from the bytes
  // as they came, and a tail held for a while is let go once its event is complete.
  SseRelay relay(kCap, false, nullptr);
  const std::string event = "data: " + std::string(300, 'x') + "\n\n";
  std::string out;
  ASSERT_TRUE(relay.feed(event + event, out));
  EXPECT_EQ(out, event + event);
  EXPECT_LE(relay.held_capacity(), std::string().capacity());
  out.clear();
  ASSERT_TRUE(relay.feed(event.substr(0, 200), out));
  EXPECT_EQ(relay.held(), 200u);
  ASSERT_TRUE(relay.feed(event.substr(200), out));
  EXPECT_EQ(out, event);
  EXPECT_EQ(relay.held(), 0u);
  EXPECT_LE(relay.held_capacity(), std::string().capacity());
}

TEST(SseRelay, EveryLineEndingEndsEvents) {
  SseRelay relay(kCap, false, nullptr);
  std::string out;
  ASSERT_TRUE(relay.feed("data: a\r\rdata: b\n\ndata: c\r\n\r\n", out));
  EXPECT_EQ(out, "data: a\r\rdata: b\n\ndata: c\r\n\r\n");
  EXPECT_EQ(relay.held(), 0u);
}

TEST(SseRelay, CrlfSplitAcrossFeedsIsOneLineBreak) {
  std::vector<std::string> data;
  SseRelay relay(kCap, false, [&](const SseEvent& e) { data.push_back(e.data); });
  std::string out;
  // "\r" then "\n": one line break, so the event is not over until the second CRLF.
  ASSERT_TRUE(relay.feed("data: a\r", out));
  ASSERT_TRUE(relay.feed("\ndata: b\r\n", out));
  EXPECT_EQ(out, "");
  ASSERT_TRUE(relay.feed("\r\n", out));
  EXPECT_EQ(out, "data: a\r\ndata: b\r\n\r\n");
  EXPECT_EQ(data, (Strings{"a\nb"}));
}

// Found by ./fleet fuzz (tests/fuzz/regressions/sse_relay/usage_event_ends_with_cr_cr): a
// stream whose last event ends with "\r\r" (or "\n\r") is complete, but the relay held it in
// case an LF followed, and finish() handed it back raw: the usage-only event reached a client
// that had not asked for it, and its usage was never counted.
TEST(SseRelay, AnEventEndedByACrAtTheEndOfTheStreamIsRelayedNotLeaked) {
  for (std::string_view end : {"\r\r", "\n\r", "\r\n\r"}) {
    const std::string usage_event =
        "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}" + std::string(end);
    int usage = 0;
    SseRelay relay(kCap, true, [&](const SseEvent& e) { usage += usage_events(e); });
    std::string out;
    ASSERT_TRUE(relay.feed("data: {\"choices\":[{}],\"usage\":null}\n\n" + usage_event, out));
    EXPECT_EQ(out, "data: {\"choices\":[{}]}\n\n");
    EXPECT_EQ(relay.finish(), "") << "the usage-only event is dropped";
    EXPECT_EQ(usage, 1) << "and counted";
  }
  // Without strip, the same bytes are forwarded unchanged, and the event is seen.
  int events = 0;
  SseRelay relay(kCap, false, [&](const SseEvent&) { ++events; });
  std::string out;
  ASSERT_TRUE(relay.feed("data: a\r\r", out));
  EXPECT_EQ(out + relay.finish(), "data: a\r\r");
  EXPECT_EQ(events, 1);
}

TEST(SseRelay, ContentMentioningUsageIsUntouched) {
  SseRelay relay(kCap, true, nullptr);
  std::string_view event =
      "data: {\"choices\":[{\"delta\":{\"content\":\"the \\\"usage\\\":null field\"}}]}\n\n";
  EXPECT_EQ(relay_all(relay, {event}), event);
}

TEST(SseRelay, ManyNullUsageMembersRemovedInOnePass) {
  std::string event = "data: {\"a\":1";
  std::string expected = event;
  for (int i = 0; i < 2000; ++i) {
    event += ",\"usage\":null";
  }
  event += "}\n\n";
  expected += "}\n\n";
  SseRelay relay(kCap, true, nullptr);
  EXPECT_EQ(relay_all(relay, {event}), expected);
}

TEST(SseRelay, AnEndlessLineOverflowsAtTheCapAndForwardsNothingOfIt) {
  constexpr std::size_t cap = 64 * 1024;
  SseRelay relay(cap, false, nullptr);
  std::string out;
  ASSERT_TRUE(relay.feed("data: {\"ok\":1}\n\ndata: ", out));
  EXPECT_EQ(out, "data: {\"ok\":1}\n\n");
  out.clear();
  // Byte by byte: each byte is examined once, so this is linear however it is split.
  std::uint64_t fed = 22;
  bool ok = true;
  while (ok && fed < 4 * cap) {
    ok = relay.feed("x", out);
    ++fed;
  }
  EXPECT_FALSE(ok);
  EXPECT_TRUE(relay.overflowed());
  EXPECT_EQ(fed, 22u + cap - 6 + 1) << "stops at the first byte beyond the cap";
  EXPECT_EQ(out, "");
  EXPECT_EQ(relay.held(), 0u) << "the held bytes are released";
  EXPECT_EQ(relay.bytes_scanned(), fed) << "no byte examined twice";
  EXPECT_FALSE(relay.feed("\n\n", out));
  EXPECT_EQ(out, "");
}

TEST(SseRelay, ALongEventIsScannedOnceHoweverItIsSplit) {
  // One event of 512 KiB of short lines, fed in 7-byte pieces: the quadratic rescan this
  // replaces examined ~10^10 bytes here.
  std::string event;
  while (event.size() < 512 * 1024) {
    event += "data: 0123456789abcdef\n";
  }
  event += "\n";
  SseRelay relay(kCap, true, nullptr);
  std::string out;
  for (std::size_t at = 0; at < event.size(); at += 7) {
    ASSERT_TRUE(relay.feed(std::string_view(event).substr(at, 7), out));
  }
  EXPECT_EQ(out, event);
  EXPECT_EQ(relay.bytes_scanned(), event.size());
}

TEST(SseRelay, AWholeEventAboveTheCapInOnePieceOverflows) {
  SseRelay relay(16, false, nullptr);
  std::string out;
  EXPECT_TRUE(relay.feed("data: short\n\n", out));
  EXPECT_FALSE(relay.feed("data: this one is too long\n\n", out));
  EXPECT_EQ(out, "data: short\n\n");
}

TEST(SseRelay, ExactlyTheCapIsAllowed) {
  const std::string event = "data: 12345678\n\n";  // 16 bytes
  SseRelay relay(event.size(), false, nullptr);
  std::string out;
  EXPECT_TRUE(relay.feed(event, out));
  EXPECT_EQ(out, event);
}

TEST(SseFraming, TypedEvent) {
  EXPECT_EQ(sse_event("message_stop", R"({"type":"message_stop"})"),
            "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n");
}

TEST(SseFraming, StreamErrorsPerApi) {
  EXPECT_EQ(api_stream_error(Api::openai, 502, "boom", "upstream_error"),
            sse_error("boom", "server_error", "upstream_error"));

  auto responses = parse_all(api_stream_error(Api::responses, 502, "boom", "upstream_error"));
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].event, "error");
  const auto r = nlohmann::json::parse(responses[0].data);
  EXPECT_EQ(r["type"], "error");
  EXPECT_TRUE(r["sequence_number"].is_number());
  EXPECT_EQ(r["error"]["message"], "boom");
  EXPECT_EQ(r["error"]["code"], "upstream_error");
  EXPECT_EQ(r["error"]["type"], "server_error");

  auto anthropic = parse_all(api_stream_error(Api::anthropic, 503, "busy", "queue_timeout"));
  ASSERT_EQ(anthropic.size(), 1u);
  EXPECT_EQ(anthropic[0].event, "error");
  EXPECT_EQ(nlohmann::json::parse(anthropic[0].data),
            nlohmann::json::parse(
                R"({"type":"error","error":{"type":"overloaded_error","message":"busy"}})"));
}

}  // namespace
}  // namespace fg::openai
