#include "orchestrator/fleet/url_challenge_fetch.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>

#include "common/net/conn.hpp"
#include "common/net/http_io.hpp"

namespace fg::fleet {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

asio::awaitable<ChallengeFetch> fetch_challenge(net::Url url, std::string nonce,
                                                asio::ssl::context* tls,
                                                std::chrono::milliseconds timeout,
                                                std::string authorization) {
  ChallengeFetch out;
  const auto deadline = Clock::now() + timeout;
  auto connected = co_await net::connect_to(url, tls, timeout);
  if (!connected.conn) {
    out.error = connected.failure == net::ConnectFailure::timeout   ? "timeout"
                : connected.failure == net::ConnectFailure::tls     ? "tls"
                : connected.failure == net::ConnectFailure::resolve ? "resolve"
                                                                    : "connect";
    co_return out;
  }
  net::Conn& c = *connected.conn;
  std::string request = "GET " + challenge_target(url.path_prefix, nonce) +
                        " HTTP/1.1\r\nHost: " + url.host_header() +
                        "\r\nUser-Agent: fleetgate-challenge\r\nAccept: application/json\r\n"
                        "Connection: close\r\n";
  if (!authorization.empty()) {
    request += "Authorization: " + authorization + "\r\n";
  }
  request += "\r\n";
  c.expires_after(deadline - Clock::now());
  auto [wec, wn] = co_await c.write(asio::buffer(request));
  if (wec) {
    out.error = wec == boost::beast::error::timeout ? "timeout" : "write";
    co_return out;
  }
  net::ResponseParser parser;
  parser.eager(true);
  parser.body_limit(kMaxChallengeBody);
  boost::beast::flat_buffer buffer;
  std::string body;
  while (!parser.is_done()) {
    auto [rec, n] = co_await c.read_some(buffer.prepare(4096));
    if (rec == asio::error::eof && parser.is_header_done()) {
      // A body delimited by the end of the connection.
      net::error_code eec;
      parser.put_eof(eec);
      if (!eec) {
        body += parser.take_body();
        break;
      }
    }
    if (rec) {
      out.error = rec == boost::beast::error::timeout ? "timeout" : "read";
      co_return out;
    }
    buffer.commit(n);
    net::error_code pec;
    buffer.consume(parser.put(buffer.data(), pec));
    if (pec == http::error::body_limit) {
      out.error = "answer too large";
      co_return out;
    }
    if (pec && pec != http::error::need_more) {
      out.error = "bad response";
      co_return out;
    }
    body += parser.take_body();
  }
  out.status = parser.status();
  out.body = std::move(body);
  co_return out;
}

}  // namespace fg::fleet
