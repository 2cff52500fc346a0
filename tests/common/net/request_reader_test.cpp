#include "common/net/request_reader.hpp"

#include <algorithm>
#include <string>

#include <gtest/gtest.h>

namespace fg::net {
namespace {

using State = RequestReader::State;

// Feeds text one byte at a time (as a slow client sends it), keeping unused bytes like the
// session loop does; returns what was left unused.
std::string feed_slowly(RequestReader& reader, std::string_view text) {
  std::string pending;
  for (char c : text) {
    pending += c;
    pending.erase(0, reader.feed(pending));
    if (reader.state() == State::head_done) {
      reader.accept_body(1024);
      pending.erase(0, reader.feed(pending));
    }
  }
  return pending;
}

TEST(RequestReader, StopsAfterTheHeadUntilTheBodyIsAccepted) {
  RequestReader reader(16 * 1024);
  const std::string text =
      "POST /v1/x HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nExpect: 100-Continue\r\n\r\nhello";
  const std::size_t used = reader.feed(text);
  EXPECT_EQ(reader.state(), State::head_done);
  EXPECT_EQ(text.substr(used), "hello");
  const HeadFacts facts = reader.head_facts();
  EXPECT_EQ(facts.content_length, 5u);
  EXPECT_FALSE(facts.chunked);
  EXPECT_TRUE(facts.expect_continue);
  EXPECT_EQ(reader.message().target(), "/v1/x");
  EXPECT_EQ(reader.feed("hello"), 0u);  // not before accept_body
  reader.accept_body(5);
  EXPECT_EQ(reader.feed("hello"), 5u);
  ASSERT_EQ(reader.state(), State::done);
  EXPECT_EQ(reader.release().body(), "hello");
}

TEST(RequestReader, AHeadWithoutBodyIsStillJudgedFirst) {
  RequestReader reader(1024);
  reader.feed("GET /health HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(reader.state(), State::head_done);
  EXPECT_FALSE(reader.head_facts().has_body());
  reader.accept_body(0);
  EXPECT_EQ(reader.state(), State::done);
}

TEST(RequestReader, ByteByByteAndPipelinedBytesStayUnused) {
  RequestReader reader(1024);
  const std::string left =
      feed_slowly(reader, "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabcGET / HTTP/1.1\r\n\r\n");
  EXPECT_EQ(reader.state(), State::done);
  EXPECT_EQ(reader.release().body(), "abc");
  EXPECT_EQ(left, "GET / HTTP/1.1\r\n\r\n");
}

TEST(RequestReader, ADeclaredLengthIsNotRefusedByTheParser) {
  // decide_head judges it (after the application's verdict), so the reader lets it through.
  RequestReader reader(1024);
  reader.feed("POST / HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n");
  EXPECT_EQ(reader.state(), State::head_done);
  EXPECT_EQ(reader.head_facts().content_length, 99999999999u);
}

TEST(RequestReader, AChunkedBodyIsCutAtTheLimit) {
  RequestReader reader(1024);
  reader.feed("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
  ASSERT_EQ(reader.state(), State::head_done);
  EXPECT_TRUE(reader.head_facts().chunked);
  reader.accept_body(8);
  reader.feed("5\r\nhello\r\n5\r\nworld\r\n0\r\n\r\n");
  EXPECT_EQ(reader.state(), State::failed);
  EXPECT_EQ(reader.failure(), ReadFailure::body_too_large);
}

TEST(RequestReader, TooLargeAndMalformedHeads) {
  RequestReader large(64);
  large.feed("GET / HTTP/1.1\r\nX-Big: " + std::string(200, 'a') + "\r\n\r\n");
  EXPECT_EQ(large.state(), State::failed);
  EXPECT_EQ(large.failure(), ReadFailure::header_too_large);

  for (const char* text : {"HELLO WORLD\r\n\r\n", "GET / HTTP/9.9\r\n\r\n",
                           "POST / HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
                           "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n"}) {
    RequestReader reader(1024);
    reader.feed(text);
    if (reader.state() == State::head_done) {
      reader.accept_body(1024);
    }
    EXPECT_EQ(reader.state(), State::failed) << text;
    EXPECT_EQ(reader.failure(), ReadFailure::malformed) << text;
  }
}

// Found by ./fleet fuzz (tests/fuzz/regressions/http_request/head_over_limit_in_one_piece):
// Beast limits the request line and the fields separately when a head arrives in one piece, so
// a head of up to twice the limit was read when it came at once and refused when it trickled.
TEST(RequestReader, TheHeaderLimitIsTheWholeHeadHoweverItArrives) {
  const std::string head =
      "GET /" + std::string(40, 'p') + " HTTP/1.1\r\nHost: " + std::string(40, 'h') + "\r\n\r\n";
  for (std::size_t limit : {head.size() - 1, head.size() / 2 + 8}) {
    RequestReader whole(limit);
    whole.feed(head);
    EXPECT_EQ(whole.state(), State::failed) << limit;
    EXPECT_EQ(whole.failure(), ReadFailure::header_too_large) << limit;
    RequestReader slow(limit);
    feed_slowly(slow, head);
    EXPECT_EQ(slow.state(), State::failed) << limit;
    EXPECT_EQ(slow.failure(), ReadFailure::header_too_large) << limit;
  }
  // Exactly the limit is fine, in one piece or byte by byte.
  RequestReader whole(head.size());
  EXPECT_EQ(whole.feed(head), head.size());
  EXPECT_EQ(whole.state(), State::head_done);
  RequestReader slow(head.size());
  EXPECT_EQ(feed_slowly(slow, head), "");
  EXPECT_EQ(slow.state(), State::done);
}

TEST(RequestReader, EndOfStream) {
  RequestReader nothing(1024);
  nothing.feed_eof();
  EXPECT_EQ(nothing.failure(), ReadFailure::closed);

  RequestReader half(1024);
  half.feed("POST /v1/chat/compl");
  EXPECT_TRUE(half.started());
  half.feed_eof();
  EXPECT_EQ(half.failure(), ReadFailure::malformed);

  RequestReader body(1024);
  body.feed("POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\n");
  body.accept_body(100);
  body.feed("abc");
  body.feed_eof();
  EXPECT_EQ(body.failure(), ReadFailure::malformed);
}

// Streams a request's body through take_body, fed in pieces of `step` bytes; the body as taken,
// the largest piece held at once, and the bytes left unused.
struct Streamed {
  std::string body;
  std::size_t largest = 0;
  std::string rest;
  State state = State::reading_head;
  ReadFailure failure = ReadFailure::closed;
};
Streamed stream(std::string_view text, std::size_t step, std::uint64_t limit) {
  RequestReader reader(16 * 1024);
  Streamed out;
  std::string pending;
  for (std::size_t pos = 0; pos < text.size(); pos += step) {
    pending += text.substr(pos, step);
    pending.erase(0, reader.feed(pending));
    if (reader.state() == State::head_done) {
      reader.stream_body(limit);
      EXPECT_TRUE(reader.streaming());
      pending.erase(0, reader.feed(pending));
    }
    std::string piece = reader.take_body();
    out.largest = std::max(out.largest, piece.size());
    out.body += piece;
    if (reader.state() == State::done || reader.state() == State::failed) {
      out.rest = pending + std::string(text.substr(std::min(text.size(), pos + step)));
      break;
    }
  }
  out.state = reader.state();
  out.failure = reader.failure();
  return out;
}

TEST(RequestReaderStream, HandsTheBodyOutInPiecesWhereverItIsCut) {
  std::string data;
  for (int i = 0; i < 3000; ++i) {
    data += "line " + std::to_string(i) + "\n";
  }
  const std::string head =
      "POST /v1/files HTTP/1.1\r\nHost: h\r\nContent-Length: " + std::to_string(data.size()) +
      "\r\n\r\n";
  for (std::size_t step : {1u, 7u, 100u, 4096u, 1u << 20}) {
    const Streamed s = stream(head + data + "GET / HTTP/1.1\r\n\r\n", step, 1 << 20);
    EXPECT_EQ(s.state, State::done) << step;
    EXPECT_EQ(s.body, data) << step;
    EXPECT_LE(s.largest, std::max<std::size_t>(step, 1)) << step;  // never the whole body
    EXPECT_EQ(s.rest, "GET / HTTP/1.1\r\n\r\n") << step;
  }
}

TEST(RequestReaderStream, KeepsTheHeadAndItsFacts) {
  RequestReader reader(16 * 1024);
  const std::string text =
      "POST /v1/files HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer k\r\n"
      "Transfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n";
  EXPECT_EQ(reader.feed(text), text.size());
  ASSERT_EQ(reader.state(), State::head_done);
  reader.stream_body(100);
  EXPECT_EQ(reader.message().target(), "/v1/files");
  EXPECT_EQ(reader.message()["Authorization"], "Bearer k");
  EXPECT_TRUE(reader.head_facts().chunked);
  EXPECT_TRUE(reader.head_facts().expect_continue);
  std::string pending = "5\r\nhello\r\n";
  pending.erase(0, reader.feed(pending));  // a chunk's CRLF may wait for what follows
  EXPECT_EQ(reader.take_body(), "hello");
  EXPECT_EQ(reader.take_body(), "");
  pending += "0\r\n\r\n";
  pending.erase(0, reader.feed(pending));
  EXPECT_EQ(pending, "");
  EXPECT_EQ(reader.state(), State::done);
  EXPECT_EQ(reader.release().target(), "/v1/files");
}

TEST(RequestReaderStream, AChunkedBodyIsCutAtTheLimit) {
  const std::string text =
      "POST /v1/files HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "a\r\n0123456789\r\na\r\n0123456789\r\n0\r\n\r\n";
  const Streamed s = stream(text, 3, 15);
  EXPECT_EQ(s.state, State::failed);
  EXPECT_EQ(s.failure, ReadFailure::body_too_large);
}

TEST(RequestReaderStream, AClientLeavingMidBodyIsMalformed) {
  RequestReader reader(16 * 1024);
  const std::string head = "POST /v1/files HTTP/1.1\r\nHost: h\r\nContent-Length: 100\r\n\r\n";
  reader.feed(head);
  reader.stream_body(1000);
  reader.feed("partial");
  EXPECT_EQ(reader.take_body(), "partial");
  reader.feed_eof();
  EXPECT_EQ(reader.state(), State::failed);
  EXPECT_EQ(reader.failure(), ReadFailure::malformed);
}

}  // namespace
}  // namespace fg::net
