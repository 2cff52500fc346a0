// Conn::wait_readable and Conn::read_now over a real loopback TCP connection: the parked wait of
// a held stream (no buffer), its timeout, and the shared-buffer read after it. Each test ends on
// its events; a watchdog fails one that would hang.

#include <chrono>
#include <optional>
#include <string>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

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

}  // namespace
}  // namespace fg::net
