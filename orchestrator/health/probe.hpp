#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/ssl/context.hpp>

#include "common/net/conn.hpp"
#include "common/net/url.hpp"
#include "orchestrator/health/health_tracker.hpp"

namespace fg::health {

struct ProbeOutcome {
  ProbeResult result = ProbeResult::fail;
  double seconds = 0;
  std::optional<std::uint32_t> slots_total;  // from a Fleetgate agent's /health
  std::optional<std::uint32_t> slots_idle;
  std::string error;  // why it failed ("timeout", "HTTP 500", ...), never a body
};

// One active probe: GET {url}{path}. 200 passes; a 503 saying the model is loading (llama.cpp's
// "Loading model", an agent's {"status":"loading"}) is `loading`; anything else fails. Never
// generates tokens. *conn is a keep-alive connection kept between probes (reset on failure).
boost::asio::awaitable<ProbeOutcome> probe_once(net::Url url, std::string path,
                                                boost::asio::ssl::context* tls,
                                                std::chrono::milliseconds timeout,
                                                std::string authorization,
                                                std::unique_ptr<net::Conn>* conn);

// Reads an agent's slot report from a /health body: {"slots_total":N,"slots_idle":M}. Pure.
void parse_health_body(std::string_view body, ProbeOutcome* outcome);

}  // namespace fg::health
