#include "orchestrator/health/probe.hpp"

#include <boost/beast/http/error.hpp>

namespace fg::health {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

std::string probe_request(const net::Url& url, std::string_view path,
                          std::string_view authorization) {
  std::string request = "GET ";
  request.append(url.path_prefix).append(path).append(" HTTP/1.1\r\nHost: ");
  request.append(url.host_header()).append("\r\nUser-Agent: fleetgate-health\r\nAccept: */*\r\n");
  if (!authorization.empty()) {
    request.append("Authorization: ").append(authorization).append("\r\n");
  }
  request.append("\r\n");
  return request;
}

ProbeParser::ProbeParser(std::string* body) : body_(body) {
  eager(true);
  body_limit(kMaxProbeBody);
}

std::size_t ProbeParser::on_body_impl(string_view data, error_code&) {
  body_->append(data.data(), data.size());
  return data.size();
}

std::size_t ProbeParser::on_chunk_body_impl(std::uint64_t, string_view data, error_code&) {
  body_->append(data.data(), data.size());
  return data.size();
}

ProbeAnswer read_probe_answer(std::string_view bytes, bool eof, std::string* body) {
  ProbeAnswer answer;
  ProbeParser parser(body);
  while (!parser.is_done() && !bytes.empty()) {
    net::error_code ec;
    const std::size_t used = parser.put(asio::buffer(bytes.data(), bytes.size()), ec);
    bytes.remove_prefix(used);
    if (ec == http::error::need_more || (!ec && used == 0)) {
      break;
    }
    if (ec) {
      answer.state = ProbeAnswer::State::bad;
      return answer;
    }
  }
  if (!parser.is_done() && eof) {
    // Only an answer delimited by the end of the connection may end here.
    net::error_code ec;
    parser.put_eof(ec);
    if (ec) {
      answer.state = ProbeAnswer::State::bad;
      return answer;
    }
  }
  if (!parser.is_done()) {
    return answer;
  }
  answer.state = ProbeAnswer::State::done;
  answer.status = parser.status();
  answer.keep_alive = parser.keep_alive() && !eof;
  answer.extra_bytes = !bytes.empty();
  return answer;
}

asio::awaitable<ProbeReply> probe_once(const net::Url* url, const std::string* request,
                                       asio::ssl::context* tls, std::chrono::milliseconds timeout,
                                       std::unique_ptr<net::Conn>* conn) {
  ProbeReply reply;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto fail = [&](std::string why) {
    reply.failure.result = ProbeResult::fail;
    reply.failure.error = std::move(why);
    reply.failure.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    conn->reset();
    return std::move(reply);
  };

  if (*conn && (*conn)->input_pending()) {
    // The replica closed its keep-alive connection since the last probe (or sent bytes nobody
    // asked for): a probe sent on it would fail for nothing. One poll, no wait.
    conn->reset();
  }
  if (!*conn || !(*conn)->is_open()) {
    auto connected = co_await net::connect_to(*url, tls, timeout);
    if (!connected.conn) {
      co_return fail(connected.failure == net::ConnectFailure::timeout ? "timeout"
                     : connected.failure == net::ConnectFailure::tls   ? "tls"
                                                                       : "connect");
    }
    *conn = std::move(connected.conn);
  }
  net::Conn& c = **conn;
  c.expires_after(deadline - Clock::now());
  auto [wec, wn] = co_await c.write(asio::buffer(*request));
  if (wec) {
    co_return fail(wec == boost::beast::error::timeout ? "timeout" : "write");
  }
  ProbeParser parser(&reply.body);
  std::string pending;  // read and not yet taken by the parser (a head split between reads)
  while (!parser.is_done()) {
    const std::size_t held = pending.size();
    pending.resize(held + 4096);
    auto [rec, n] = co_await c.read_some(asio::buffer(pending.data() + held, 4096));
    pending.resize(held + n);
    if (rec) {
      co_return fail(rec == boost::beast::error::timeout ? "timeout" : "read");
    }
    net::error_code pec;
    pending.erase(0, parser.put(asio::buffer(pending), pec));
    if (pec && pec != http::error::need_more) {
      co_return fail("bad response");
    }
  }
  reply.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!parser.keep_alive()) {
    conn->reset();
  } else {
    c.expires_never();
  }
  reply.answered = true;
  reply.status = parser.status();
  co_return reply;
}

}  // namespace fg::health
