#include "orchestrator/health/probe.hpp"

#include <boost/beast/http/error.hpp>

#include "common/net/http_io.hpp"

namespace fg::health {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using Clock = std::chrono::steady_clock;

namespace {
constexpr std::size_t kMaxProbeBody = 64 * 1024;
}

asio::awaitable<ProbeOutcome> probe_once(net::Url url, std::string path, std::string expected_model,
                                         asio::ssl::context* tls, std::chrono::milliseconds timeout,
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
  const bool loading = status == 503 && (body.find("Loading model") != std::string::npos ||
                                         body.find("\"loading\"") != std::string::npos);
  if (status != 200 && !loading) {
    outcome.result = ProbeResult::fail;
    outcome.error = "HTTP " + std::to_string(status);
    co_return outcome;
  }
  const ProbeBody facts = parse_probe_body(body, expected_model);
  outcome.model = facts.model;
  if (facts.model == ModelCheck::mismatch) {
    outcome.result = ProbeResult::fail;
    outcome.error = "serves model " + facts.served + ", not " + expected_model;
    co_return outcome;
  }
  outcome.result = loading ? ProbeResult::loading : ProbeResult::pass;
  if (!loading) {
    outcome.slots_total = facts.slots_total;
    outcome.slots_idle = facts.slots_idle;
    outcome.prefill_tps = facts.prefill_tps;
    outcome.decode_tps = facts.decode_tps;
    outcome.host_prompt_cache_tokens = facts.host_prompt_cache_tokens;
    outcome.engine_starts = facts.engine_starts;
  }
  co_return outcome;
}

}  // namespace fg::health
