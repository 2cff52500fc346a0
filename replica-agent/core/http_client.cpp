#include "replica-agent/core/http_client.hpp"

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/error.hpp>

#include "common/net/conn.hpp"
#include "common/net/http_io.hpp"

namespace fg::agent {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

namespace {
constexpr std::uint64_t kMaxBody = 1024 * 1024;
}

asio::awaitable<HttpResult> http_call(net::Url base, std::string method, std::string path,
                                      std::string bearer, std::string json_body,
                                      asio::ssl::context* tls, std::chrono::milliseconds timeout,
                                      HttpHeaders headers) {
  HttpResult result;
  const auto deadline = Clock::now() + timeout;
  auto connected = co_await net::connect_to(base, tls, timeout);
  if (!connected.conn) {
    result.error = connected.failure == net::ConnectFailure::timeout ? "timeout"
                   : connected.failure == net::ConnectFailure::tls   ? "tls"
                                                                     : "connect";
    co_return result;
  }
  net::Conn& conn = *connected.conn;
  std::string request = method + " " + base.path_prefix + path +
                        " HTTP/1.1\r\nHost: " + base.host_header() +
                        "\r\nUser-Agent: fleetgate-agent/" FLEETGATE_VERSION
                        "\r\nAccept: application/json\r\nConnection: close\r\n";
  if (!bearer.empty()) {
    request += "Authorization: Bearer " + bearer + "\r\n";
  }
  for (const auto& [name, value] : headers) {
    request += name + ": " + value + "\r\n";
  }
  if (!json_body.empty() || method == "POST") {
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(json_body.size()) +
        "\r\n";
  }
  request += "\r\n";
  request += json_body;
  conn.expires_after(deadline - Clock::now());
  auto [wec, wn] = co_await conn.write(asio::buffer(request));
  if (wec) {
    result.error = wec == boost::beast::error::timeout ? "timeout" : "write";
    co_return result;
  }
  net::ResponseParser parser;
  parser.eager(true);
  parser.body_limit(kMaxBody);
  boost::beast::flat_buffer buffer;
  while (!parser.is_done()) {
    auto [rec, n] = co_await conn.read_some(buffer.prepare(16 * 1024));
    net::error_code pec;
    if (rec == asio::error::eof) {
      parser.put_eof(pec);
      if (pec) {
        result.error = "read";
        co_return result;
      }
      break;
    }
    if (rec) {
      result.error = rec == boost::beast::error::timeout ? "timeout" : "read";
      co_return result;
    }
    buffer.commit(n);
    buffer.consume(parser.put(buffer.data(), pec));
    if (pec && pec != http::error::need_more) {
      result.error = "bad response";
      co_return result;
    }
    result.body += parser.take_body();
  }
  result.body += parser.take_body();
  result.answered = true;
  result.status = parser.status();
  conn.close();
  co_return result;
}

}  // namespace fg::agent
