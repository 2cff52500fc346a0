#pragma once

#include <memory>
#include <random>
#include <string>

#include <boost/asio/ssl/context.hpp>

#include "common/net/session_tracker.hpp"
#include "common/util/text.hpp"

#include "replica-agent/config/agent_config.hpp"
#include "replica-agent/core/admission.hpp"
#include "replica-agent/core/device.hpp"
#include "replica-agent/engines/autotune.hpp"
#include "replica-agent/engines/sim_model.hpp"
#include "replica-agent/metrics/agent_metrics.hpp"

namespace fg::agent {

// The state one agent's connections share. One io_context thread: no locks.
struct AgentContext {
  AgentContext(AgentConfig cfg, const sim::SimProfile* sim_profile, std::size_t slots)
      : config(std::move(cfg)),
        profile(sim_profile),
        sim_rng(config.engine.seed),
        id_rng(std::random_device{}()),
        admission(slots),
        engine_ready(false),
        public_url(config.public_url) {
    sim.time_scale = config.engine.time_scale;
    sim.jitter = config.engine.jitter;
    sim.fail_rate = config.engine.fail_rate;
    sim.seed = config.engine.seed;
  }

  AgentConfig config;
  const sim::SimProfile* profile;  // the sim engine's; nullptr for the other engines
  sim::SimOptions sim;
  std::mt19937_64 sim_rng;  // failure and jitter draws: seeded, so a run is reproducible
  std::mt19937_64 id_rng;   // response and request ids only
  Admission admission;
  net::SessionTracker sessions;
  AgentMetrics metrics;
  DeviceFacts device;
  // The engine answers (sim: once started, after model_file; the others: once their health probe
  // passed). Until then /health says "loading" and completions get 503.
  bool engine_ready;
  // engine.autotune's progress and outcome (state off without it), shown in /health.
  autotune::Report autotune;
  BearerKeys api_key;  // the bearer key /v1/* requires (empty = open), from api_key_env
  // The URL registered with the gateway: public_url, or the one the tunnel gave.
  std::string public_url;
  // The Acurast deployment this phone runs in (from the bridge; "" without a tunnel), and when it
  // ends (RFC 3339 UTC): both go into the registration.
  std::string deployment_id;
  std::string ends_at;
  // Client TLS (system CAs) for an https gateway, engine or model URL.
  std::shared_ptr<boost::asio::ssl::context> client_tls;
};

}  // namespace fg::agent
