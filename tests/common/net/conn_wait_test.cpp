// Conn::wait_readable and Conn::read_now over a real loopback TCP connection: the parked wait of
// a held stream (no buffer), its timeout, and the shared-buffer read after it. Each test ends on
// its events; a watchdog fails one that would hang.

#include <chrono>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/error.hpp>

#include "common/net/conn.hpp"

namespace fg::net {
namespace {

using namespace std::chrono_literals;

struct Pair {
  asio::io_context io;
  std::optional<tcp::socket> peer;
  std::unique_ptr<Conn> conn;

  Pair() {
    tcp::acceptor acceptor(io, {asio::ip::make_address("127.0.0.1"), 0});
    peer.emplace(io);
    peer->connect(acceptor.local_endpoint());
    conn = make_plain_conn(acceptor.accept());
  }

  // Runs task to its end, or fails after 10 s.
  void run(asio::awaitable<void> task) {
    bool done = false;
    asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) {
      done = true;
      EXPECT_EQ(e, nullptr);
    });
    asio::steady_timer watchdog(io, 10s);
    bool hung = false;
    watchdog.async_wait([&](error_code ec) { hung = !ec; });
    while (!done && !hung) {
      io.run_one();
    }
    ASSERT_FALSE(hung) << "the test did not end";
  }
};

TEST(ConnWait, ReadNowWouldBlockWhenNothingCame) {
  Pair p;
  char buf[16];
  const IoResult r = p.conn->read_now(asio::buffer(buf));
  EXPECT_EQ(r.ec, asio::error::would_block);
  EXPECT_TRUE(p.conn->can_read_now());
}

TEST(ConnWait, WaitEndsWhenBytesArriveAndReadNowTakesThem) {
  Pair p;
  p.run([](Pair* p) -> asio::awaitable<void> {
    asio::steady_timer later(p->io, 20ms);
    later.async_wait([p](error_code) {
      error_code ec;
      asio::write(*p->peer, asio::buffer(std::string_view("hello")), ec);
    });
    const error_code ec = co_await p->conn->wait_readable(5s);
    EXPECT_FALSE(ec) << ec.message();
    char buf[16];
    const IoResult r = p->conn->read_now(asio::buffer(buf));
    EXPECT_FALSE(r.ec);
    EXPECT_EQ(std::string(buf, r.bytes), "hello");
    // Nothing more: the next read would block.
    EXPECT_EQ(p->conn->read_now(asio::buffer(buf)).ec, asio::error::would_block);
  }(&p));
}

TEST(ConnWait, WaitTimesOutWhenNothingComes) {
  Pair p;
  p.run([](Pair* p) -> asio::awaitable<void> {
    const auto start = std::chrono::steady_clock::now();
    const error_code ec = co_await p->conn->wait_readable(50ms);
    EXPECT_EQ(ec, beast::error::timeout);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
    // The connection still works after a timed-out wait.
    error_code wec;
    asio::write(*p->peer, asio::buffer(std::string_view("x")), wec);
    EXPECT_FALSE(co_await p->conn->wait_readable(5s));
  }(&p));
}

TEST(ConnWait, ThePeersCloseEndsTheWaitAndReadsAsEof) {
  Pair p;
  p.run([](Pair* p) -> asio::awaitable<void> {
    p->peer->close();
    EXPECT_FALSE(co_await p->conn->wait_readable(std::chrono::steady_clock::duration::max()));
    char buf[16];
    EXPECT_EQ(p->conn->read_now(asio::buffer(buf)).ec, asio::error::eof);
  }(&p));
}

// The deadlines of a plain connection (expires_after): what beast::tcp_stream did before the
// connection kept one timer of its own.

TEST(ConnDeadline, AReadPastItsDeadlineTimesOutAndClosesTheConnection) {
  Pair p;
  p.run([](Pair* p) -> asio::awaitable<void> {
    char buf[16];
    p->conn->expires_after(30ms);
    const IoResult r = co_await p->conn->read_some(asio::buffer(buf));
    EXPECT_EQ(r.ec, beast::error::timeout);
    EXPECT_FALSE(p->conn->is_open());
    // Every operation after it fails too.
    const IoResult again = co_await p->conn->read_some(asio::buffer(buf));
    EXPECT_TRUE(again.ec);
  }(&p));
}

TEST(ConnDeadline, AWritePastItsDeadlineTimesOut) {
  Pair p;
  p.run([](Pair* p) -> asio::awaitable<void> {
    // The peer reads nothing, so a large enough write stays pending until its deadline.
    const std::string big(64 * 1024 * 1024, 'x');
    p->conn->expires_after(50ms);
    const IoResult r = co_await p->conn->write(asio::buffer(big));
    EXPECT_EQ(r.ec, beast::error::timeout);
    EXPECT_LT(r.bytes, big.size());
  }(&p));
}

TEST(ConnDeadline, AnOperationDoneInTimeLeavesNoDeadlineBehind) {
  Pair p;
  p.run([](Pair* p) -> asio::awaitable<void> {
    error_code wec;
    asio::write(*p->peer, asio::buffer(std::string_view("ab")), wec);
    char buf[16];
    p->conn->expires_after(50ms);
    const IoResult first = co_await p->conn->read_some(asio::buffer(buf));
    EXPECT_FALSE(first.ec);
    // Past the first deadline, with none set any more: the next read waits for its bytes.
    p->conn->expires_never();
    asio::steady_timer later(p->io, 120ms);
    later.async_wait([p](error_code) {
      error_code ec;
      asio::write(*p->peer, asio::buffer(std::string_view("cd")), ec);
    });
    const IoResult second = co_await p->conn->read_some(asio::buffer(buf));
    EXPECT_FALSE(second.ec) << second.ec.message();
    EXPECT_EQ(std::string(buf, second.bytes), "cd");
  }(&p));
}

TEST(ConnDeadline, ADeadlineSetAgainAppliesToTheNextOperation) {
  Pair p;
  p.run([](Pair* p) -> asio::awaitable<void> {
    char buf[16];
    p->conn->expires_after(1h);
    asio::steady_timer soon(p->io, 10ms);
    soon.async_wait([p](error_code) {
      error_code ec;
      asio::write(*p->peer, asio::buffer(std::string_view("x")), ec);
    });
    EXPECT_FALSE((co_await p->conn->read_some(asio::buffer(buf))).ec);
    p->conn->expires_after(20ms);
    EXPECT_EQ((co_await p->conn->read_some(asio::buffer(buf))).ec, beast::error::timeout);
  }(&p));
}

TEST(ConnDeadline, AConnectionDestroyedDuringATimedWaitEndsTheWait) {
  Pair p;
  p.run([](Pair* p) -> asio::awaitable<void> {
    bool ended = false;
    error_code ended_with;
    p->conn->async_wait_readable(1h, [&](error_code ec) {
      ended = true;
      ended_with = ec;
    });
    p->conn.reset();
    asio::steady_timer tick(p->io);
    for (int i = 0; i < 1000 && !ended; ++i) {
      tick.expires_after(1ms);
      co_await tick.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    EXPECT_TRUE(ended);
    EXPECT_TRUE(ended_with);
  }(&p));
}

}  // namespace
}  // namespace fg::net
