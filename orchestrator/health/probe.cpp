#include "orchestrator/health/probe.hpp"

#include <boost/beast/http/error.hpp>
#include <nlohmann/json.hpp>

#include "common/net/http_io.hpp"

namespace fg::health {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

namespace {
constexpr std::size_t kMaxProbeBody = 64 * 1024;
}

void parse_health_body(std::string_view body, ProbeOutcome* outcome) {
  auto doc = nlohmann::json::parse(body, nullptr, false);
  if (!doc.is_object()) {
    return;
  }
  auto read = [&](const char* key) -> std::optional<std::uint32_t> {
    auto it = doc.find(key);
    if (it != doc.end() && it->is_number_unsigned()) {
      auto v = it->get<std::uint64_t>();
      if (v <= 1024) {
        return static_cast<std::uint32_t>(v);
      }
    }
    return std::nullopt;
  };
  outcome->slots_total = read("slots_total");
  outcome->slots_idle = read("slots_idle");
  if (outcome->slots_total && *outcome->slots_total == 0) {
    outcome->slots_total.reset();
  }
}

asio::awaitable<ProbeOutcome> probe_once(net::Url url, std::string path, asio::ssl::context* tls,
                                         std::chrono::milliseconds timeout,
                                         std::string authorization,
                                         std::unique_ptr<net::Conn>* conn) {
  ProbeOutcome outcome;
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  auto fail = [&](std::string why) {
    outcome.result = ProbeResult::fail;
    outcome.error = std::move(why);
    outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    conn->reset();
    return outcome;
  };

  if (!*conn || !(*conn)->is_open()) {
    auto connected = co_await net::connect_to(url, tls, timeout);
    if (!connected.conn) {
      co_return fail(connected.failure == net::ConnectFailure::timeout ? "timeout"
                     : connected.failure == net::ConnectFailure::tls   ? "tls"
                                                                       : "connect");
    }
    *conn = std::move(connected.conn);
  }
  net::Conn& c = **conn;
  std::string request = "GET " + url.path_prefix + path +
                        " HTTP/1.1\r\nHost: " + url.host_header() +
                        "\r\nUser-Agent: fleetgate-health\r\nAccept: */*\r\n";
  if (!authorization.empty()) {
    request += "Authorization: " + authorization + "\r\n";
  }
  request += "\r\n";
  c.expires_after(deadline - Clock::now());
  auto [wec, wn] = co_await c.write(asio::buffer(request));
  if (wec) {
    co_return fail(wec == boost::beast::error::timeout ? "timeout" : "write");
  }
  net::ResponseParser parser;
  parser.eager(true);
  parser.body_limit(kMaxProbeBody);
  boost::beast::flat_buffer buffer;
  std::string body;
  while (!parser.is_done()) {
    auto [rec, n] = co_await c.read_some(buffer.prepare(4096));
    if (rec) {
      co_return fail(rec == boost::beast::error::timeout ? "timeout" : "read");
    }
    buffer.commit(n);
    net::error_code pec;
    buffer.consume(parser.put(buffer.data(), pec));
    if (pec && pec != http::error::need_more) {
      co_return fail("bad response");
    }
    body += parser.take_body();
  }
  outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (!parser.keep_alive()) {
    conn->reset();
  } else {
    c.expires_never();
  }
  const unsigned status = parser.status();
  if (status == 200) {
    outcome.result = ProbeResult::pass;
    parse_health_body(body, &outcome);
    co_return outcome;
  }
  if (status == 503 && (body.find("Loading model") != std::string::npos ||
                        body.find("\"loading\"") != std::string::npos)) {
    outcome.result = ProbeResult::loading;
    co_return outcome;
  }
  outcome.result = ProbeResult::fail;
  outcome.error = "HTTP " + std::to_string(status);
  co_return outcome;
}

}  // namespace fg::health
