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
#include "orchestrator/health/probe_body.hpp"

namespace fg::health {

struct ProbeOutcome {
  ProbeResult result = ProbeResult::fail;
  double seconds = 0;
  std::optional<std::uint32_t> slots_total;  // from a Fleetgate agent's /health
  std::optional<std::uint32_t> slots_idle;
  // An agent's speeds and cache facts (ProbeBody), when it passed.
  std::optional<double> prefill_tps;
  std::optional<double> decode_tps;
  std::optional<std::uint64_t> host_prompt_cache_tokens;
  std::optional<std::uint64_t> engine_starts;
  // What the body says about the model: a mismatch fails the probe (error says what it serves).
  ModelCheck model = ModelCheck::unverified;
  std::string
      error;  // why it failed ("timeout", "HTTP 500", "serves model x, not y"), never a body
};

// One active probe: GET {url}{path}. 200 passes; a 503 saying the model is loading (llama.cpp's
// "Loading model", an agent's {"status":"loading"}) is `loading`; anything else fails. A body
// naming another model than expected_model (an agent's /health, a server's /v1/models) fails
// with that reason. Never generates tokens. *conn is a keep-alive connection kept between probes
// (reset on failure).
boost::asio::awaitable<ProbeOutcome> probe_once(
    net::Url url, std::string path, std::string expected_model, boost::asio::ssl::context* tls,
    std::chrono::milliseconds timeout, std::string authorization, std::unique_ptr<net::Conn>* conn);

}  // namespace fg::health
