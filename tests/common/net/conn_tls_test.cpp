// TLS connections (net::connect_to for https, make_tls_server_conn + tls_server_handshake) over
// real loopback sockets: OpenSSL on the socket itself, waiting for the socket through Asio. Bytes
// both ways (writes far larger than the socket buffers), certificate and name checks, the ends of
// a connection (close_notify, a close without it, a deadline), and input OpenSSL holds. The
// certificates are made here with OpenSSL's API. Each test ends on its events; a watchdog fails
// one that would hang.

#include <malloc.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "common/net/conn.hpp"
#include "common/net/tls_sessions.hpp"

namespace fg::net {
namespace {

using namespace std::chrono_literals;

// ASSERT_* returns, which a coroutine cannot: this ends it with co_return instead.
#define CO_ASSERT(cond, what)                 \
  if (!(cond)) {                              \
    ADD_FAILURE() << #cond << ": " << (what); \
    co_return;                                \
  }

// A P-256 key and a self-signed certificate whose subjectAltName is san ("IP:127.0.0.1"), as PEM
// files in a new temporary directory (the certificate is its own CA).
struct TestCert {
  std::filesystem::path dir;
  std::string cert;
  std::string key;

  explicit TestCert(const char* san) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fg-tls-XXXXXX").string();
    dir = ::mkdtemp(tmpl.data());
    cert = (dir / "cert.pem").string();
    key = (dir / "key.pem").string();
    std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> pkey(EVP_EC_gen("P-256"), EVP_PKEY_free);
    std::unique_ptr<X509, decltype(&X509_free)> x509(X509_new(), X509_free);
    X509_set_version(x509.get(), 2);
    ASN1_INTEGER_set(X509_get_serialNumber(x509.get()), 1);
    X509_gmtime_adj(X509_getm_notBefore(x509.get()), -60);
    X509_gmtime_adj(X509_getm_notAfter(x509.get()), 3600);
    X509_set_pubkey(x509.get(), pkey.get());
    X509_NAME* name = X509_get_subject_name(x509.get());
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("fleetgate test"), -1, -1, 0);
    X509_set_issuer_name(x509.get(), name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, x509.get(), x509.get(), nullptr, nullptr, 0);
    for (auto [nid, value] : {std::pair{NID_subject_alt_name, san},
                              std::pair{NID_basic_constraints, "critical,CA:TRUE"}}) {
      X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
      X509_add_ext(x509.get(), ext, -1);
      X509_EXTENSION_free(ext);
    }
    X509_sign(x509.get(), pkey.get(), EVP_sha256());
    std::FILE* k = std::fopen(key.c_str(), "w");
    std::FILE* c = std::fopen(cert.c_str(), "w");
    PEM_write_PrivateKey(k, pkey.get(), nullptr, nullptr, 0, nullptr, nullptr);
    PEM_write_X509(c, x509.get());
    std::fclose(k);
    std::fclose(c);
  }
  ~TestCert() { std::filesystem::remove_all(dir); }
};

// A TLS server on 127.0.0.1 and a client connected to it through connect_to.
struct TlsPair {
  asio::io_context io;
  TestCert server_cert;
  std::optional<TestCert> trusted;  // what the client trusts; the server's own by default
  std::shared_ptr<asio::ssl::context> server_ctx;
  std::shared_ptr<asio::ssl::context> client_ctx;
  tcp::acceptor acceptor{io, {asio::ip::make_address("127.0.0.1"), 0}};
  std::unique_ptr<Conn> server;
  std::unique_ptr<Conn> client;
  ConnectResult connected;
  error_code server_handshake;

  explicit TlsPair(const char* san = "IP:127.0.0.1", const char* trusted_san = nullptr)
      : server_cert(san) {
    if (trusted_san != nullptr) {
      trusted.emplace(trusted_san);
    }
    server_ctx = make_server_tls_context(server_cert.cert, server_cert.key);
    client_ctx = make_client_tls_context(trusted ? trusted->cert : server_cert.cert);
  }

  // Accepts and handshakes on the server side while the client connects.
  asio::awaitable<void> connect(const std::string& path = "") {
    bool accepted = false;
    asio::co_spawn(
        io,
        [this, &accepted]() -> asio::awaitable<void> {
          tcp::socket socket = co_await acceptor.async_accept(asio::use_awaitable);
          server = make_tls_server_conn(std::move(socket), *server_ctx);
          server->expires_after(5s);
          server_handshake = co_await tls_server_handshake(*server);
          accepted = true;
        },
        asio::detached);
    const auto url =
        parse_url("https://127.0.0.1:" + std::to_string(acceptor.local_endpoint().port()) + path);
    connected = co_await connect_to(*url, client_ctx.get(), 5s);
    client = std::move(connected.conn);
    asio::steady_timer poll(io);
    while (!accepted) {  // the server's side ends its handshake after the client's
      poll.expires_after(1ms);
      co_await poll.async_wait(asio::use_awaitable);
    }
  }

  // Runs task to its end, or fails after 20 s.
  void run(asio::awaitable<void> task) {
    bool done = false;
    asio::co_spawn(io, std::move(task), [&](std::exception_ptr e) {
      done = true;
      EXPECT_EQ(e, nullptr);
    });
    asio::steady_timer watchdog(io, 20s);
    bool hung = false;
    watchdog.async_wait([&](error_code ec) { hung = !ec; });
    while (!done && !hung) {
      io.run_one();
    }
    ASSERT_FALSE(hung) << "the test did not end";
  }
};

std::string pattern(std::size_t size, char seed) {
  std::string out(size, '\0');
  for (std::size_t i = 0; i < size; ++i) {
    out[i] = static_cast<char>(seed + (i * 7) % 61);
  }
  return out;
}

asio::awaitable<std::string> read_exactly(Conn& conn, std::size_t size) {
  std::string got;
  char buf[16 * 1024];
  while (got.size() < size) {
    const IoResult r =
        co_await conn.read_some(asio::buffer(buf, std::min(sizeof buf, size - got.size())));
    if (r.ec) {
      ADD_FAILURE() << "read failed after " << got.size() << " bytes: " << r.ec.message();
      co_return got;
    }
    got.append(buf, r.bytes);
  }
  co_return got;
}

TEST(ConnTls, BytesGoBothWaysWritesLargerThanTheSocketBuffersIncluded) {
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    co_await p->connect();
    CO_ASSERT(p->client, p->connected.ec.message());
    CO_ASSERT(!p->server_handshake, p->server_handshake.message());
    // 8 MiB each way: far more than loopback's socket buffers, so both sides wait to write.
    const std::string up = pattern(8 << 20, 'a');
    const std::string down = pattern(8 << 20, 'A');
    bool wrote_up = false;
    asio::co_spawn(
        p->io,
        [&]() -> asio::awaitable<void> {
          const IoResult w = co_await p->client->write(
              asio::buffer(up.data(), 100), asio::buffer(up.data() + 100, up.size() - 100));
          EXPECT_FALSE(w.ec) << w.ec.message();
          EXPECT_EQ(w.bytes, up.size());
          wrote_up = true;
        },
        asio::detached);
    // The server writes its answer while the client's bytes are still arriving.
    bool wrote_down = false;
    asio::co_spawn(
        p->io,
        [&]() -> asio::awaitable<void> {
          const IoResult w = co_await p->server->write(asio::buffer(down));
          EXPECT_FALSE(w.ec) << w.ec.message();
          wrote_down = true;
        },
        asio::detached);
    const std::string at_server = co_await read_exactly(*p->server, up.size());
    const std::string at_client = co_await read_exactly(*p->client, down.size());
    EXPECT_TRUE(at_server == up);
    EXPECT_TRUE(at_client == down);
    asio::steady_timer poll(p->io);
    while (!wrote_up || !wrote_down) {
      poll.expires_after(1ms);
      co_await poll.async_wait(asio::use_awaitable);
    }
  }(&p));
}

TEST(ConnTls, ACertificateForAnotherNameFailsAsTls) {
  TlsPair p("DNS:not-this-host.example");
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    const auto url =
        parse_url("https://127.0.0.1:" + std::to_string(p->acceptor.local_endpoint().port()));
    asio::co_spawn(
        p->io,
        [p]() -> asio::awaitable<void> {
          tcp::socket socket = co_await p->acceptor.async_accept(asio::use_awaitable);
          p->server = make_tls_server_conn(std::move(socket), *p->server_ctx);
          p->server->expires_after(5s);
          co_await tls_server_handshake(*p->server);
        },
        asio::detached);
    const ConnectResult r = co_await connect_to(*url, p->client_ctx.get(), 5s);
    EXPECT_EQ(r.conn, nullptr);
    EXPECT_EQ(r.failure, ConnectFailure::tls);
  }(&p));
}

TEST(ConnTls, AnUntrustedCertificateFailsAsTls) {
  TlsPair p("IP:127.0.0.1", /*trusted_san=*/"IP:127.0.0.1");  // the client trusts another one
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    co_await p->connect();
    EXPECT_EQ(p->client, nullptr);
    EXPECT_EQ(p->connected.failure, ConnectFailure::tls);
  }(&p));
}

TEST(ConnTls, CloseNotifyReadsAsEndOfStream) {
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    co_await p->connect();
    CO_ASSERT(p->client, p->connected.ec.message());
    co_await p->server->shutdown();
    EXPECT_FALSE(p->server->is_open());
    char buf[64];
    const IoResult r = co_await p->client->read_some(asio::buffer(buf));
    EXPECT_EQ(r.ec, asio::error::eof) << r.ec.message();
  }(&p));
}

TEST(ConnTls, ACloseWithoutCloseNotifyReadsAsTruncated) {
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    co_await p->connect();
    CO_ASSERT(p->client, p->connected.ec.message());
    p->server->close();
    char buf[64];
    const IoResult r = co_await p->client->read_some(asio::buffer(buf));
    EXPECT_EQ(r.ec, asio::ssl::error::stream_truncated) << r.ec.message();
  }(&p));
}

TEST(ConnTls, AReadPastItsDeadlineTimesOutAndClosesTheConnection) {
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    co_await p->connect();
    CO_ASSERT(p->client, p->connected.ec.message());
    p->client->expires_after(50ms);
    char buf[64];
    const IoResult r = co_await p->client->read_some(asio::buffer(buf));
    EXPECT_EQ(r.ec, beast::error::timeout) << r.ec.message();
    EXPECT_FALSE(p->client->is_open());
    // Closed: another read fails at once instead of touching a descriptor that is not its own.
    const IoResult again = co_await p->client->read_some(asio::buffer(buf));
    EXPECT_TRUE(again.ec);
  }(&p));
}

TEST(ConnTls, InputOpenSslHoldsEndsAWaitAtOnce) {
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    co_await p->connect();
    CO_ASSERT(p->client, p->connected.ec.message());
    const std::string sent = pattern(100, 'x');
    co_await p->server->write(asio::buffer(sent));
    char buf[10];
    const IoResult first = co_await p->client->read_some(asio::buffer(buf));
    CO_ASSERT(!first.ec, first.ec.message());
    // The record's other bytes were read from the socket with it: only OpenSSL knows of them.
    EXPECT_TRUE(p->client->input_buffered());
    EXPECT_TRUE(p->client->input_pending());
    EXPECT_FALSE(co_await p->client->wait_readable(5s));
    std::string got(buf, first.bytes);
    got += co_await read_exactly(*p->client, sent.size() - got.size());
    EXPECT_EQ(got, sent);
    EXPECT_FALSE(p->client->input_buffered());
  }(&p));
}

TEST(ConnTls, AHandlerReadWaitsForTheRecordAndNeverRunsInsideTheCall) {
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    co_await p->connect();
    CO_ASSERT(p->client, p->connected.ec.message());
    char buf[64];
    bool called = false;
    error_code got_ec;
    std::size_t got_n = 0;
    p->client->async_read_some(asio::buffer(buf), [&](error_code ec, std::size_t n) {
      called = true;
      got_ec = ec;
      got_n = n;
    });
    EXPECT_FALSE(called);
    co_await p->server->write(asio::buffer(std::string_view("hello")));
    asio::steady_timer poll(p->io);
    while (!called) {
      poll.expires_after(1ms);
      co_await poll.async_wait(asio::use_awaitable);
    }
    EXPECT_FALSE(got_ec) << got_ec.message();
    EXPECT_EQ(std::string(buf, got_n), "hello");
  }(&p));
}

// A held stream waits for its replica's next event for seconds: OpenSSL's 16.5 KiB read buffer
// must not wait with it. OpenSSL 3.0 kept it after the first read of a connection (the server's
// session tickets, then the first record, read whole); heaptrack found one per held https stream.
// Measured as the heap in use just before and after the wait begins; ASan's allocator keeps no
// such count, so the sanitized build skips it.
TEST(ConnTls, AConnectionGivesOpenSslsReadBufferBackWhileItWaitsForInput) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "mallinfo2 counts glibc's heap, not ASan's";
#endif
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    co_await p->connect();
    CO_ASSERT(p->client, p->connected.ec.message());
    const std::string_view event = "data: one\n\n";
    co_await p->server->write(asio::buffer(event));
    CO_ASSERT(!co_await p->client->wait_readable(5s), "the event did not arrive");
    char buf[16 * 1024];
    const IoResult r = co_await p->client->read_some(asio::buffer(buf));
    CO_ASSERT(!r.ec, r.ec.message());
    EXPECT_EQ(std::string_view(buf, r.bytes), event);
    // The record is read whole; now the connection waits for the next one.
    const std::size_t before = ::mallinfo2().uordblks;
    bool woke = false;
    p->client->async_wait_readable(5s, [&](error_code) { woke = true; });
    const std::size_t during = ::mallinfo2().uordblks;
    // 16.5 KiB freed, less what the wait itself allocates (a few hundred bytes).
    EXPECT_GE(static_cast<double>(before) - static_cast<double>(during), 15 * 1024)
        << "heap in use before the wait " << before << ", during it " << during;
    co_await p->server->write(asio::buffer(std::string_view("x")));
    asio::steady_timer poll(p->io);
    while (!woke) {
      poll.expires_after(1ms);
      co_await poll.async_wait(asio::use_awaitable);
    }
    EXPECT_EQ(co_await read_exactly(*p->client, 1), "x");
  }(&p));
}

// A TLS 1.3 server sends its session tickets after the handshake; the client takes them with its
// first read. Connects (path: the server URL's path, which names a replica), then reads one byte
// the server writes, so that the client holds the tickets; the connections stay open.
asio::awaitable<bool> connect_and_take_tickets(TlsPair* p, const std::string& path = "") {
  co_await p->connect(path);
  if (!p->client) {
    ADD_FAILURE() << "connect failed: " << p->connected.ec.message();
    co_return false;
  }
  co_await p->server->write(asio::buffer(std::string_view("t")));
  co_return co_await read_exactly(*p->client, 1) == "t";
}

// Resumption: the second connection to a server offers the session of the first, and the server
// takes it (no certificate, no signature); bytes still go both ways.
TEST(ConnTls, ASecondConnectionToTheSameServerResumesTheFirstOnesSession) {
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    CO_ASSERT(co_await connect_and_take_tickets(p), "first connection");
    EXPECT_FALSE(p->connected.tls_resumed);
    auto first = std::move(p->client);
    auto first_server = std::move(p->server);
    EXPECT_EQ(TlsSessions::of(p->client_ctx->native_handle())->size(), 1u);
    co_await p->connect();
    CO_ASSERT(p->client, p->connected.ec.message());
    EXPECT_TRUE(p->connected.tls_resumed) << "the second handshake was a full one";
    const std::string out = pattern(100 * 1024, 'r');
    co_await p->client->write(asio::buffer(out));
    EXPECT_EQ(co_await read_exactly(*p->server, out.size()), out);
    co_await p->server->write(asio::buffer(std::string_view("back")));
    EXPECT_EQ(co_await read_exactly(*p->client, 4), "back");
    // Of the first connection's two tickets one is left; OpenSSL's server sent one more after
    // the resumed handshake.
    const std::string server =
        "https://127.0.0.1:" + std::to_string(p->acceptor.local_endpoint().port());
    EXPECT_EQ(TlsSessions::of(p->client_ctx->native_handle())->kept(server), 2u);
  }(&p));
}

// Each ticket is offered once (OpenSSL's client would not resume with it again): the first
// connection's two tickets resume the next two connections, opened before either read its own
// ticket; a third finds none left and makes a full handshake.
TEST(ConnTls, EachKeptTicketIsOfferedOnce) {
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    CO_ASSERT(co_await connect_and_take_tickets(p), "first connection");
    const std::string server =
        "https://127.0.0.1:" + std::to_string(p->acceptor.local_endpoint().port());
    TlsSessions* sessions = TlsSessions::of(p->client_ctx->native_handle());
    EXPECT_EQ(sessions->kept(server), 2u);
    std::vector<std::unique_ptr<Conn>> open;
    open.push_back(std::move(p->client));
    open.push_back(std::move(p->server));
    for (auto [want_resumed, left] : {std::pair{true, 1u}, {true, 0u}, {false, 0u}}) {
      co_await p->connect();
      CO_ASSERT(p->client, p->connected.ec.message());
      EXPECT_EQ(p->connected.tls_resumed, want_resumed) << "connection " << open.size() / 2 + 1;
      EXPECT_EQ(sessions->kept(server), left);
      open.push_back(std::move(p->client));
      open.push_back(std::move(p->server));
    }
    EXPECT_EQ(sessions->size(), 0u);
  }(&p));
}

// Sessions belong to a server URL (a replica), never shared between two, even on one port.
TEST(ConnTls, SessionsAreKeptPerServerUrl) {
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    CO_ASSERT(co_await connect_and_take_tickets(p, "/a"), "connection to /a");
    auto a = std::move(p->client);
    auto a_server = std::move(p->server);
    CO_ASSERT(co_await connect_and_take_tickets(p, "/b"), "connection to /b");
    EXPECT_FALSE(p->connected.tls_resumed) << "/b resumed /a's session";
    auto b = std::move(p->client);
    auto b_server = std::move(p->server);
    EXPECT_EQ(TlsSessions::of(p->client_ctx->native_handle())->size(), 2u);
    co_await p->connect("/a");
    CO_ASSERT(p->client, p->connected.ec.message());
    EXPECT_TRUE(p->connected.tls_resumed);
  }(&p));
}

// A restarted server (new ticket keys) does not know the session: it answers with a full
// handshake, which works, and its new session is kept for the next connection.
TEST(ConnTls, AServerThatNoLongerKnowsTheSessionMakesAFullHandshake) {
  TlsPair p;
  p.run([](TlsPair* p) -> asio::awaitable<void> {
    CO_ASSERT(co_await connect_and_take_tickets(p), "first connection");
    auto first = std::move(p->client);
    auto first_server = std::move(p->server);
    p->server_ctx = make_server_tls_context(p->server_cert.cert, p->server_cert.key);
    CO_ASSERT(co_await connect_and_take_tickets(p), "connection to the restarted server");
    EXPECT_FALSE(p->connected.tls_resumed);
    auto second = std::move(p->client);
    auto second_server = std::move(p->server);
    co_await p->connect();
    CO_ASSERT(p->client, p->connected.ec.message());
    EXPECT_TRUE(p->connected.tls_resumed);
  }(&p));
}

// A kept session proves nothing about a server that cannot resume it: a server at the same URL
// whose certificate the client does not trust fails as before, and the session is dropped.
TEST(ConnTls, AFailedHandshakeAfterAnOfferedSessionFailsAsTlsAndDropsTheSession) {
  TlsPair p;
  TestCert untrusted("IP:127.0.0.1");
  p.run([](TlsPair* p, TestCert* untrusted) -> asio::awaitable<void> {
    CO_ASSERT(co_await connect_and_take_tickets(p), "first connection");
    auto first = std::move(p->client);
    auto first_server = std::move(p->server);
    TlsSessions* sessions = TlsSessions::of(p->client_ctx->native_handle());
    EXPECT_EQ(sessions->size(), 1u);
    p->server_ctx = make_server_tls_context(untrusted->cert, untrusted->key);
    co_await p->connect();
    EXPECT_FALSE(p->client);
    EXPECT_EQ(p->connected.failure, ConnectFailure::tls);
    EXPECT_EQ(sessions->size(), 0u);
  }(&p, &untrusted));
}

}  // namespace
}  // namespace fg::net
