// net::ClientWatch over a real loopback TCP connection: a client that leaves cancels the request's
// coroutine, pipelined bytes stay for the next request (up to the cap), keep-alive comments flow
// until the first content and the ticker ends there, stop() + settled() leave no handler behind,
// and a watch started through a WatchStarter begins only after its delay. Each test ends on its
// events; a watchdog fails one that would hang.

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/bind_cancellation_slot.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "common/net/conn.hpp"
#include "common/net/http_io.hpp"
#include "common/net/response_writer.hpp"

namespace fg::net {
namespace {

using namespace std::chrono_literals;
constexpr auto kTuple = asio::as_tuple(asio::use_awaitable);

struct Session {
  asio::io_context io;
  std::optional<tcp::socket> peer;  // the client
  std::unique_ptr<Conn> conn;       // the server's side
  asio::cancellation_signal cancel;
  beast::flat_buffer buffer;

  Session() {
    tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    peer.emplace(io);
    peer->connect(acceptor.local_endpoint());
    conn = make_plain_conn(acceptor.accept());
    conn->set_session_cancel(&cancel);
  }

  // Runs task as a connection's coroutine is run (cancelled through `cancel`), to its end, or
  // fails after 10 s.
  void run(asio::awaitable<void> task) {
    bool done = false;
    asio::co_spawn(io, std::move(task),
                   asio::bind_cancellation_slot(cancel.slot(), [&](std::exception_ptr e) {
                     done = true;
                     EXPECT_EQ(e, nullptr);
                   }));
    asio::steady_timer watchdog(io, 10s);
    bool hung = false;
    watchdog.async_wait([&](error_code ec) { hung = !ec; });
    while (!done && !hung) {
      io.run_one();
    }
    ASSERT_FALSE(hung) << "the test did not end";
  }

  void send(std::string_view bytes) {
    error_code ec;
    asio::write(*peer, asio::buffer(bytes), ec);
    ASSERT_FALSE(ec) << ec.message();
  }
};

// Waits (polling every millisecond) until done() holds.
template <class Done>
asio::awaitable<void> until(Done done) {
  asio::steady_timer tick(co_await asio::this_coro::executor);
  while (!done()) {
    tick.expires_after(1ms);
    co_await tick.async_wait(kTuple);
  }
}

// Reads what the client receives until it holds `count` times `what`.
asio::awaitable<std::string> receive(tcp::socket* peer, std::string_view what, int count) {
  std::string got;
  char buf[512];
  auto seen = [&] {
    int n = 0;
    for (auto at = got.find(what); at != std::string::npos; at = got.find(what, at + 1)) {
      ++n;
    }
    return n;
  };
  while (seen() < count) {
    auto [ec, n] = co_await peer->async_read_some(asio::buffer(buf), kTuple);
    if (ec) {
      break;
    }
    got.append(buf, n);
  }
  co_return got;
}

// The watch starts (at once, or through later), the client leaves, and the request's work, a
// wait that only the watch can end, is cancelled.
asio::awaitable<void> client_leaves(Session* s, ClientWatch* watch, WatchStarter* later) {
  watch->start(later);
  EXPECT_EQ(watch->started(), later == nullptr);
  s->peer->close();
  asio::steady_timer work(co_await asio::this_coro::executor, 1h);
  auto [ec] = co_await work.async_wait(kTuple);
  EXPECT_EQ(ec, asio::error::operation_aborted);
  EXPECT_TRUE(watch->gone());
  watch->stop();
  co_await asio::this_coro::reset_cancellation_state();
  co_await watch->settled();
}

TEST(ClientWatch, AClientThatLeavesCancelsTheRequestsCoroutine) {
  Session s;
  ClientWatch watch(s.conn.get(), &s.buffer, 1024, s.conn->session_cancel());
  s.run(client_leaves(&s, &watch, nullptr));
}

TEST(ClientWatch, PipelinedBytesStayForTheNextRequestAndStopSettles) {
  Session s;
  ClientWatch watch(s.conn.get(), &s.buffer, 1024, s.conn->session_cancel());
  s.run([](Session* s, ClientWatch* watch) -> asio::awaitable<void> {
    watch->start();
    s->send("GET /next HTTP/1.1\r\n\r\n");
    co_await until([s] { return s->buffer.size() == 22; });
    watch->stop();
    co_await watch->settled();
    EXPECT_FALSE(watch->gone());
    const auto data = s->buffer.data();
    EXPECT_EQ(std::string(static_cast<const char*>(data.data()), data.size()),
              "GET /next HTTP/1.1\r\n\r\n");
  }(&s, &watch));
}

TEST(ClientWatch, PastTheCapItStopsReading) {
  Session s;
  ClientWatch watch(s.conn.get(), &s.buffer, 4, s.conn->session_cancel());
  s.run([](Session* s, ClientWatch* watch) -> asio::awaitable<void> {
    watch->start();
    s->send("abcdefgh");
    co_await until([s] { return s->buffer.size() == 4; });
    watch->stop();
    co_await watch->settled();
    // The rest was left in the socket, for the session to read when it reads again.
    char rest[16];
    const IoResult r = s->conn->read_now(asio::buffer(rest));
    EXPECT_FALSE(r.ec);
    EXPECT_EQ(std::string(rest, r.bytes), "efgh");
  }(&s, &watch));
}

TEST(ClientWatch, StopEndsAWaitOnAQuietClient) {
  Session s;
  ClientWatch watch(s.conn.get(), &s.buffer, 1024, s.conn->session_cancel());
  s.run([](Session* s, ClientWatch* watch) -> asio::awaitable<void> {
    watch->start();
    watch->stop();
    co_await watch->settled();
    EXPECT_FALSE(watch->gone());
    // The connection is fine for the next request.
    s->send("x");
    EXPECT_FALSE(co_await s->conn->wait_readable(5s));
  }(&s, &watch));
}

// Started through a WatchStarter: nothing is pending on the socket until the delay has passed, so
// a request that ends sooner leaves no operation behind, and the client's bytes stay unread.
TEST(ClientWatch, AWatchStoppedBeforeItsDelayNeverStarted) {
  Session s;
  WatchStarter later(s.io.get_executor(), 1h);
  ClientWatch watch(s.conn.get(), &s.buffer, 1024, s.conn->session_cancel());
  s.run([](Session* s, WatchStarter* later, ClientWatch* watch) -> asio::awaitable<void> {
    watch->start(later);
    s->send("next");
    EXPECT_FALSE(watch->started());
    watch->stop();
    co_await watch->settled();
    EXPECT_FALSE(watch->gone());
    EXPECT_EQ(s->buffer.size(), 0u);
    EXPECT_FALSE(co_await s->conn->wait_readable(5s));
    char rest[16];
    const IoResult r = s->conn->read_now(asio::buffer(rest));
    EXPECT_EQ(std::string(rest, r.bytes), "next");
  }(&s, &later, &watch));
}

TEST(ClientWatch, AWatchStartedLaterNoticesAClientThatLeft) {
  Session s;
  WatchStarter later(s.io.get_executor(), 1ms);
  ClientWatch watch(s.conn.get(), &s.buffer, 1024, s.conn->session_cancel());
  s.run(client_leaves(&s, &watch, &later));
}

// Watches wait in one list: one that ends before its start is taken out, the others still start
// (here the second, whose client pipelines a request, reads it).
TEST(ClientWatch, WatchesStartedLaterStartInOrderAndAStoppedOneIsSkipped) {
  Session s;
  tcp::acceptor acceptor(s.io, {asio::ip::make_address("127.0.0.1"), 0});
  tcp::socket peer2(s.io);
  peer2.connect(acceptor.local_endpoint());
  auto conn2 = make_plain_conn(acceptor.accept());
  beast::flat_buffer buffer2;
  WatchStarter later(s.io.get_executor(), 1ms);
  ClientWatch first(s.conn.get(), &s.buffer, 1024, nullptr);
  ClientWatch second(conn2.get(), &buffer2, 1024, nullptr);
  ClientWatch third(s.conn.get(), &s.buffer, 1024, nullptr);
  s.run([](ClientWatch* first, ClientWatch* second, ClientWatch* third, WatchStarter* later,
           tcp::socket* peer2, beast::flat_buffer* buffer2) -> asio::awaitable<void> {
    first->start(later);
    second->start(later);
    third->start(later);
    first->stop();
    third->stop();
    co_await first->settled();
    co_await third->settled();
    asio::write(*peer2, asio::buffer(std::string_view("GET / HTTP/1.1\r\n\r\n")));
    co_await until([buffer2] { return buffer2->size() == 18; });
    EXPECT_FALSE(first->started());
    EXPECT_TRUE(second->started());
    EXPECT_FALSE(third->started());
    second->stop();
    co_await second->settled();
    EXPECT_FALSE(second->gone());
  }(&first, &second, &third, &later, &peer2, &buffer2));
}

// The gateway destroys its starter before the io_context, which then destroys the sessions still
// suspended: their watches, still listed, must not reach back to it.
TEST(ClientWatch, AWatchOutlivingItsStarterStopsSafely) {
  Session s;
  auto later = std::make_unique<WatchStarter>(s.io.get_executor(), 1h);
  ClientWatch watch(s.conn.get(), &s.buffer, 1024, s.conn->session_cancel());
  watch.start(later.get());
  later.reset();
  watch.stop();
  s.run([](ClientWatch* watch) -> asio::awaitable<void> {
    co_await watch->settled();
    EXPECT_FALSE(watch->gone());
  }(&watch));
}

TEST(ClientWatch, KeepAliveCommentsFlowUntilTheFirstContentWhichEndsTheTicker) {
  Session s;
  ResponseWriter writer(*s.conn, "req-1", true, 5s);
  ClientWatch watch(s.conn.get(), &s.buffer, 1024, s.conn->session_cancel());
  s.run([](Session* s, ResponseWriter* writer, ClientWatch* watch) -> asio::awaitable<void> {
    watch->start();
    watch->keep_alive(writer, 5ms);
    EXPECT_TRUE(watch->keeping_alive());
    const std::string before = co_await receive(&*s->peer, ": keep-alive", 2);
    EXPECT_EQ(before.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << before;
    EXPECT_FALSE(writer->content_started());
    EXPECT_TRUE(co_await writer->send_chunk("data: {}\n\n"));
    // The first content ends the ticker at once, not at its next tick.
    co_await until([watch] { return !watch->keeping_alive(); });
    EXPECT_TRUE(co_await writer->end_stream());
    watch->stop();
    co_await watch->settled();
    const std::string after = co_await receive(&*s->peer, "0\r\n\r\n", 1);
    EXPECT_EQ(after.find(": keep-alive"), std::string::npos) << after;
  }(&s, &writer, &watch));
}

}  // namespace
}  // namespace fg::net
