// The session loop over a real loopback TCP connection: a scripted client on one end,
// serve_session with test handlers on the other. Each test ends on events (the server closing,
// the session coroutine completing); a watchdog fails a test that would hang.

#include "common/net/http_session.hpp"
#include <algorithm>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

namespace fg::net {
namespace {

using namespace std::chrono_literals;
constexpr auto kUseTuple = asio::as_tuple(asio::use_awaitable);

class SessionTest : public ::testing::Test {
 protected:
  SessionTest() {
    hooks_.listener = "test";
    hooks_.limits = [this] { return limits_; };
    hooks_.count = [this](std::string_view reason) { counted_.emplace_back(reason); };
    hooks_.id_rng = &rng_;
    hooks_.tracker = &tracker_;
    limits_.timeouts = {2s, 2s, 2s};
    limits_.write_timeout = 2s;
    limits_.body_limit = 1024;
  }

  // Connects a client to a fresh server session; client_rcvbuf (when set) keeps the client's
  // receive buffer small, so that a client that does not read blocks the server soon.
  void connect(std::optional<int> client_rcvbuf = std::nullopt) {
    tcp::acceptor acceptor(io_, {asio::ip::make_address("127.0.0.1"), 0});
    client_.emplace(io_);
    client_->open(tcp::v4());
    if (client_rcvbuf) {
      client_->set_option(asio::socket_base::receive_buffer_size(*client_rcvbuf));
    }
    client_->connect(acceptor.local_endpoint());
    tcp::socket server = acceptor.accept();
    if (client_rcvbuf) {
      server.set_option(asio::socket_base::send_buffer_size(*client_rcvbuf));
    }
    asio::co_spawn(io_, serve_session(&hooks_, make_plain_conn(std::move(server))),
                   [this](std::exception_ptr e) {
                     session_done_ = true;
                     session_threw_ = e != nullptr;
                   });
  }

  // Runs until the session ended and the client script finished (or the watchdog fired).
  void run() {
    asio::steady_timer watchdog(io_, 10s);
    watchdog.async_wait([this](boost::system::error_code ec) {
      if (!ec) {
        timed_out_ = true;
        io_.stop();
      }
    });
    while (!io_.stopped() && !(session_done_ && client_done_)) {
      io_.run_one();
    }
    ASSERT_FALSE(timed_out_) << "the session did not end";
    EXPECT_FALSE(session_threw_);
  }

  // Sends bytes, then reads everything until the server closes.
  static asio::awaitable<void> send_then_read(tcp::socket* s, std::string bytes, std::string* out,
                                              bool* done) {
    co_await asio::async_write(*s, asio::buffer(bytes), kUseTuple);
    char buf[4096];
    for (;;) {
      auto [ec, n] = co_await s->async_read_some(asio::buffer(buf), kUseTuple);
      out->append(buf, n);
      if (ec) {
        break;
      }
    }
    s->close();  // as a client does once the server closed: the lingering close ends
    *done = true;
  }

  void script(std::string bytes) {
    asio::co_spawn(io_, send_then_read(&*client_, std::move(bytes), &received_, &client_done_),
                   asio::detached);
  }

  asio::io_context io_;
  std::mt19937_64 rng_{1};
  SessionTracker tracker_;
  SessionLimits limits_;
  SessionHooks hooks_;
  std::optional<tcp::socket> client_;
  std::string received_;
  std::vector<std::string> counted_;
  bool session_done_ = false;
  bool session_threw_ = false;
  bool client_done_ = false;
  bool timed_out_ = false;
};

constexpr std::string_view kPost = "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}";

asio::awaitable<bool> throws_at_once(ServerRequest r) {
  if (r.request != nullptr) {
    throw std::runtime_error("a message that must not reach the log");
  }
  co_return true;
}

TEST_F(SessionTest, AnExceptionBeforeAnyByteIsA500InOpenAiShapeAndCloses) {
  hooks_.handle = [](ServerRequest r) { return throws_at_once(r); };
  connect();
  // Two pipelined requests: the second must not be served after the failure.
  script(std::string(kPost) + std::string(kPost));
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 500 ", 0), 0u) << received_;
  EXPECT_NE(received_.find("Connection: close"), std::string::npos);
  EXPECT_NE(received_.find(R"("type":"server_error")"), std::string::npos);
  EXPECT_NE(received_.find(R"("code":"internal_error")"), std::string::npos);
  EXPECT_EQ(received_.find("HTTP/1.1", 1), std::string::npos) << "one answer only";
  EXPECT_EQ(counted_, std::vector<std::string>{"exception"});
  EXPECT_EQ(tracker_.size(), 0u);
}

asio::awaitable<bool> throws_mid_stream(ServerRequest r) {
  co_await r.writer->begin_stream(200, "text/event-stream");
  co_await r.writer->send_chunk("data: one\n\n");
  throw std::logic_error("boom");
  co_return true;
}

TEST_F(SessionTest, AnExceptionMidStreamEndsTheStreamWithAnErrorEvent) {
  hooks_.handle = [](ServerRequest r) { return throws_mid_stream(r); };
  connect();
  script(std::string(kPost));
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 200 ", 0), 0u) << received_;
  const auto one = received_.find("data: one");
  const auto error = received_.find(R"(data: {"error":)");
  ASSERT_NE(one, std::string::npos) << received_;
  ASSERT_NE(error, std::string::npos) << received_;
  EXPECT_LT(one, error);
  EXPECT_EQ(received_.substr(received_.size() - 5), "0\r\n\r\n") << "the chunked body is ended";
  EXPECT_EQ(counted_, std::vector<std::string>{"exception"});
}

asio::awaitable<bool> answers_ok(ServerRequest r, int* served) {
  ++*served;
  co_await r.writer->send_full(200, "text/plain", "ok");
  co_return r.writer->keep_alive();
}

TEST_F(SessionTest, ARefusedHeadIsAnsweredBeforeTheBodyWithoutContinue) {
  int served = 0;
  hooks_.handle = [&served](ServerRequest r) { return answers_ok(r, &served); };
  hooks_.check_head = [](const Request& head) -> std::optional<ErrorReply> {
    if (head.target() == "/secret") {
      return ErrorReply{401, "invalid_api_key", "no key", {{"WWW-Authenticate", "Bearer"}}};
    }
    return std::nullopt;
  };
  connect();
  // The body is announced but never sent: only an answer from the head can come back.
  script(
      "POST /secret HTTP/1.1\r\nHost: t\r\nContent-Length: 1000000\r\n"
      "Expect: 100-continue\r\n\r\n");
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 401 ", 0), 0u) << received_;
  EXPECT_EQ(received_.find("100 Continue"), std::string::npos);
  EXPECT_NE(received_.find("WWW-Authenticate: Bearer"), std::string::npos);
  EXPECT_NE(received_.find("Connection: close"), std::string::npos);
  EXPECT_EQ(served, 0);
  EXPECT_EQ(counted_, std::vector<std::string>{"invalid_api_key"});
}

TEST_F(SessionTest, ATooLargeDeclaredBodyIs413AndABodilessRefusalKeepsTheConnection) {
  int served = 0;
  hooks_.handle = [&served](ServerRequest r) { return answers_ok(r, &served); };
  hooks_.check_head = [](const Request& head) -> std::optional<ErrorReply> {
    if (head.target() == "/nothing") {
      return ErrorReply{404, "not_found", "no route", {}};
    }
    return std::nullopt;
  };
  connect();
  script(
      "GET /nothing HTTP/1.1\r\nHost: t\r\n\r\n"
      "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"
      "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n");
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 404 ", 0), 0u) << received_;
  const auto ok = received_.find("HTTP/1.1 200 ");
  const auto too_large = received_.find("HTTP/1.1 413 ");
  ASSERT_NE(ok, std::string::npos) << received_;
  ASSERT_NE(too_large, std::string::npos) << received_;
  EXPECT_LT(ok, too_large);
  EXPECT_EQ(served, 1);
  EXPECT_EQ(counted_, (std::vector<std::string>{"not_found", "request_too_large"}));
}

// Reads a streamed body to its end (or, with stop_after, answers after that many bytes): the
// total, the largest piece, and whether the session had read the body whole first.
struct StreamStats {
  std::size_t total = 0;
  std::size_t largest = 0;
  std::size_t pieces = 0;
  bool whole_body_given = false;
  std::optional<ReadFailure> failure;
};
asio::awaitable<bool> reads_stream(ServerRequest r, StreamStats* stats, std::size_t stop_after) {
  if (r.body == nullptr) {
    co_await r.writer->send_full(200, "text/plain", "pipelined-ok");
    co_return r.writer->keep_alive();
  }
  stats->whole_body_given = !r.request->body().empty();
  for (;;) {
    auto piece = co_await r.body->next();
    if (piece.failure) {
      stats->failure = piece.failure;
      co_return false;
    }
    stats->total += piece.data.size();
    stats->largest = std::max(stats->largest, piece.data.size());
    ++stats->pieces;
    if (stats->total >= stop_after && !piece.end) {
      r.writer->refuse_keep_alive();
      co_await r.writer->send_full(413, "text/plain", "enough");
      co_return false;
    }
    if (piece.end) {
      break;
    }
  }
  co_await r.writer->send_full(200, "text/plain", "got " + std::to_string(stats->total));
  co_return r.writer->keep_alive();
}

std::optional<StreamedBody> streams_uploads(const Request& head) {
  if (head.target() == "/upload") {
    return StreamedBody{1024 * 1024, "test.upload_limit"};
  }
  return std::nullopt;
}

TEST_F(SessionTest, AStreamedBodyComesInPiecesPastTheBodyLimitAndAPipelinedRequestFollows) {
  StreamStats stats;
  hooks_.handle = [&stats](ServerRequest r) { return reads_stream(r, &stats, SIZE_MAX); };
  hooks_.stream_body = streams_uploads;
  connect();
  const std::string body(200'000, 'u');  // the listener's body limit is 1024
  script("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 200000\r\n\r\n" + body +
         "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 200 ", 0), 0u) << received_.substr(0, 200);
  EXPECT_NE(received_.find("got 200000"), std::string::npos);
  EXPECT_NE(received_.find("pipelined-ok"), std::string::npos);  // the pipelined request
  EXPECT_EQ(stats.total, 200'000u);
  EXPECT_GT(stats.pieces, 1u);
  EXPECT_LE(stats.largest, 64u * 1024);  // never the whole body
  EXPECT_FALSE(stats.whole_body_given);
}

TEST_F(SessionTest, AStreamedBodyOverItsOwnLimitIs413FromTheHead) {
  StreamStats stats;
  hooks_.handle = [&stats](ServerRequest r) { return reads_stream(r, &stats, SIZE_MAX); };
  hooks_.stream_body = streams_uploads;
  connect();
  script("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 2000000\r\n\r\n");
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 413 ", 0), 0u) << received_;
  EXPECT_NE(received_.find("test.upload_limit"), std::string::npos) << received_;
  EXPECT_EQ(stats.pieces, 0u);
}

TEST_F(SessionTest, AHeadRefusedByTheCheckIsNeverStreamed) {
  StreamStats stats;
  bool asked = false;
  hooks_.handle = [&stats](ServerRequest r) { return reads_stream(r, &stats, SIZE_MAX); };
  hooks_.check_head = [](const Request&) -> std::optional<ErrorReply> {
    return ErrorReply{401, "invalid_api_key", "no key", {}};
  };
  hooks_.stream_body = [&asked](const Request& head) {
    asked = true;
    return streams_uploads(head);
  };
  connect();
  script("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 500000\r\n\r\n");
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 401 ", 0), 0u) << received_;
  EXPECT_FALSE(asked);
  EXPECT_EQ(stats.pieces, 0u);
}

// Outside the body budget, any number of streamed uploads could each hold megabytes at once.
class StreamedBudgetTest : public SessionTest {
 protected:
  StreamedBudgetTest() {
    limits_.body_budget = &budget_;
    limits_.body_budget_limit = 5000;
    hooks_.handle = [this](ServerRequest r) -> asio::awaitable<bool> {
      used_while_streaming_ = budget_.used();
      while (r.body != nullptr && !(co_await r.body->next()).end) {
      }
      co_await r.writer->send_full(200, "text/plain", "ok");
      co_return r.writer->keep_alive();
    };
    hooks_.stream_body = [this](const Request&) {
      return std::optional(StreamedBody{1024 * 1024, "test.upload_limit", held_});
    };
  }
  BodyBudget budget_;
  std::uint64_t held_ = 0;
  std::uint64_t used_while_streaming_ = 0;
};

TEST_F(StreamedBudgetTest, AStreamedBodyHoldsItsRoutesShareWhileItsHandlerRuns) {
  held_ = 4000;
  connect();
  script(
      "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\nConnection: close\r\n\r\n"
      "0123456789");
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 200 ", 0), 0u) << received_;
  EXPECT_EQ(used_while_streaming_, 4000u);
  EXPECT_EQ(budget_.used(), 0u);  // released with the request
}

TEST_F(StreamedBudgetTest, AStreamedBodyPastTheBudgetIs503BeforeItsBodyIsRead) {
  held_ = 6000;
  connect();
  script("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n0123456789");
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 503 ", 0), 0u) << received_;
  EXPECT_EQ(used_while_streaming_, 0u);
}

TEST_F(SessionTest, AStreamedChunkLineLongerThanTheBufferIsMalformedNotAServerFailure) {
  StreamStats stats;
  hooks_.handle = [&stats](ServerRequest r) { return reads_stream(r, &stats, SIZE_MAX); };
  hooks_.stream_body = streams_uploads;
  connect();
  // A chunk size line with an endless extension: Beast keeps it whole in the read buffer.
  script("POST /upload HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5;" +
         std::string(200'000, 'x'));
  run();
  ASSERT_TRUE(stats.failure.has_value());
  EXPECT_EQ(*stats.failure, ReadFailure::malformed);
}

TEST_F(SessionTest, AnAnswerBeforeTheStreamEndsClosesTheConnection) {
  StreamStats stats;
  hooks_.handle = [&stats](ServerRequest r) { return reads_stream(r, &stats, 1); };
  hooks_.stream_body = streams_uploads;
  connect();
  const std::string body(100'000, 'u');
  script("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n" + body +
         "GET /x HTTP/1.1\r\nHost: t\r\n\r\n");
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 413 ", 0), 0u) << received_;
  EXPECT_NE(received_.find("Connection: close"), std::string::npos);
  EXPECT_EQ(received_.find("pipelined-ok"), std::string::npos);  // not taken as a request
  EXPECT_LT(stats.total, 100'000u);
}

TEST_F(SessionTest, AClientLeavingMidStreamIsAFailureForTheHandler) {
  StreamStats stats;
  hooks_.handle = [&stats](ServerRequest r) { return reads_stream(r, &stats, SIZE_MAX); };
  hooks_.stream_body = streams_uploads;
  connect();
  asio::co_spawn(
      io_,
      [this]() -> asio::awaitable<void> {
        const std::string head =
            "POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n" +
            std::string(5000, 'u');
        co_await asio::async_write(*client_, asio::buffer(head), kUseTuple);
        client_->close();
        client_done_ = true;
      },
      asio::detached);
  run();
  ASSERT_TRUE(stats.failure);
  EXPECT_EQ(*stats.failure, ReadFailure::malformed);
  EXPECT_LE(stats.total, 5000u);
}

// Sends bytes and reads at the same time, as an HTTP client that handles early answers does;
// records whether the whole write went through.
asio::awaitable<void> send_while_reading(tcp::socket* s, std::string bytes, std::string* out,
                                         bool* write_ok, bool* done) {
  auto ex = s->get_executor();
  bool writing = true;
  asio::co_spawn(
      ex,
      [s, bytes = std::move(bytes), write_ok, &writing]() -> asio::awaitable<void> {
        auto [ec, n] = co_await asio::async_write(*s, asio::buffer(bytes), kUseTuple);
        *write_ok = !ec && n == bytes.size();
        writing = false;
      },
      asio::detached);
  char buf[4096];
  for (;;) {
    auto [ec, n] = co_await s->async_read_some(asio::buffer(buf), kUseTuple);
    out->append(buf, n);
    if (ec) {
      break;
    }
  }
  asio::steady_timer wait(ex);
  while (writing) {
    wait.expires_after(1ms);
    co_await wait.async_wait(kUseTuple);
  }
  s->close();
  *done = true;
}

TEST_F(SessionTest, ARefusedRequestWhoseClientSendsItsBodyAnywayGetsItsAnswerNotAReset) {
  // A declared body within the limit is read and dropped at the close: closing on unread input
  // would send a reset, and a reset may make the client's kernel drop the answer unread.
  limits_.body_limit = 64 * 1024 * 1024;
  int served = 0;
  hooks_.handle = [&served](ServerRequest r) { return answers_ok(r, &served); };
  hooks_.check_head = [](const Request&) -> std::optional<ErrorReply> {
    return ErrorReply{503, "server_busy", "busy", {{"Retry-After", "1"}}};
  };
  connect();
  const std::string body(32 * 1024 * 1024, 'x');
  bool write_ok = false;
  asio::co_spawn(io_,
                 send_while_reading(&*client_,
                                    "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: " +
                                        std::to_string(body.size()) + "\r\n\r\n" + body,
                                    &received_, &write_ok, &client_done_),
                 asio::detached);
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 503 ", 0), 0u) << received_.substr(0, 200);
  EXPECT_TRUE(write_ok) << "the server read the whole body before closing";
  EXPECT_EQ(served, 0);
}

asio::awaitable<void> trickle(tcp::socket* s, bool* done) {
  co_await asio::async_write(*s, asio::buffer(std::string_view("POST /x HTTP/1.1\r\n")), kUseTuple);
  asio::steady_timer pause(s->get_executor());
  for (;;) {
    pause.expires_after(50ms);
    co_await pause.async_wait(kUseTuple);
    auto [ec, n] = co_await asio::async_write(*s, asio::buffer(std::string_view("X")), kUseTuple);
    if (ec) {
      break;
    }
  }
  *done = true;
}

TEST_F(SessionTest, AHeadCheckThatThrowsIsA500AndClosesEvenWithoutBody) {
  int served = 0;
  hooks_.handle = [&served](ServerRequest r) { return answers_ok(r, &served); };
  hooks_.check_head = [](const Request&) -> std::optional<ErrorReply> {
    throw std::out_of_range("bug");
  };
  connect();
  script("GET /a HTTP/1.1\r\nHost: t\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n");
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 500 ", 0), 0u) << received_;
  EXPECT_NE(received_.find("Connection: close"), std::string::npos);
  EXPECT_EQ(received_.find("HTTP/1.1", 1), std::string::npos) << "one answer only";
  EXPECT_EQ(served, 0);
  EXPECT_EQ(counted_, std::vector<std::string>{"exception"});
}

asio::awaitable<bool> abandons_json_body(ServerRequest r) {
  co_await r.writer->begin_body(200, "application/json", std::nullopt);
  co_await r.writer->send_chunk("{\"partial\":");
  co_return true;
}

TEST_F(SessionTest, AnUnfinishedBodyThatIsNoEventStreamIsCutWithoutAnErrorEvent) {
  hooks_.handle = [](ServerRequest r) { return abandons_json_body(r); };
  connect();
  script(std::string(kPost) + std::string(kPost));
  run();
  EXPECT_EQ(received_.rfind("HTTP/1.1 200 ", 0), 0u) << received_;
  EXPECT_NE(received_.find("{\"partial\":"), std::string::npos);
  EXPECT_EQ(received_.find("data:"), std::string::npos) << "no SSE event inside a JSON body";
  EXPECT_EQ(received_.find("HTTP/1.1", 1), std::string::npos) << "the connection closed";
}

TEST_F(SessionTest, AHeadTricklingPastTheHeaderTimeoutIsCut) {
  int served = 0;
  hooks_.handle = [&served](ServerRequest r) { return answers_ok(r, &served); };
  limits_.timeouts = {5s, 300ms, 5s};
  connect();
  // One header byte every 50 ms, never the end of the head: every read arrives well within the
  // header timeout, so only a deadline counted from the first byte cuts it.
  asio::co_spawn(io_, trickle(&*client_, &client_done_), asio::detached);
  run();
  EXPECT_EQ(served, 0);
  EXPECT_EQ(counted_, std::vector<std::string>{"header_timeout"});
}

asio::awaitable<bool> floods(ServerRequest r, bool* slot_released) {
  struct Slot {
    bool* released;
    ~Slot() { *released = true; }
  } slot{slot_released};
  co_await r.writer->begin_stream(200, "text/event-stream");
  const std::string piece(64 * 1024, 'x');
  for (;;) {
    if (!co_await r.writer->send_chunk(piece)) {
      break;
    }
  }
  co_return false;
}

asio::awaitable<void> send_only(tcp::socket* s, bool* done) {
  co_await asio::async_write(*s, asio::buffer(kPost), kUseTuple);
  *done = true;
}

TEST_F(SessionTest, AClientThatStopsReadingIsDroppedAfterTheWriteTimeout) {
  bool released = false;
  hooks_.handle = [&released](ServerRequest r) { return floods(r, &released); };
  limits_.write_timeout = 200ms;
  connect(4096);
  // The client sends its request and never reads.
  asio::co_spawn(io_, send_only(&*client_, &client_done_), asio::detached);
  run();
  EXPECT_TRUE(released) << "the handler (and what it held) is gone";
  EXPECT_EQ(counted_, std::vector<std::string>{"write_timeout"});
  EXPECT_EQ(tracker_.busy(), 0u);
}

TEST_F(SessionTest, AnIdleConnectionIsClosedSilently) {
  int served = 0;
  hooks_.handle = [&served](ServerRequest r) { return answers_ok(r, &served); };
  limits_.timeouts = {200ms, 5s, 5s};
  connect();
  script("");
  run();
  EXPECT_EQ(received_, "");
  EXPECT_TRUE(counted_.empty());
}

}  // namespace
}  // namespace fg::net
