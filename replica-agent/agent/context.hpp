#pragma once

#include <random>

#include "replica-agent/agent/admission.hpp"
#include "replica-agent/agent/options.hpp"
#include "replica-agent/agent/sessions.hpp"
#include "replica-agent/engines/sim_model.hpp"

namespace fg::agent {

// The state one agent's connections share. One io_context thread: no locks.
struct AgentContext {
  AgentContext(AgentOptions opts, const sim::SimProfile* sim_profile, std::size_t slots)
      : options(std::move(opts)),
        profile(sim_profile),
        sim_rng(options.seed),
        id_rng(std::random_device{}()),
        admission(slots) {
    sim.time_scale = options.time_scale;
    sim.jitter = options.jitter;
    sim.fail_rate = options.fail_rate;
    sim.seed = options.seed;
  }

  AgentOptions options;
  const sim::SimProfile* profile;
  sim::SimOptions sim;
  std::mt19937_64 sim_rng;  // failure and jitter draws: seeded, so a run is reproducible
  std::mt19937_64 id_rng;   // response and request ids only
  Admission admission;
  SessionTracker sessions;
};

}  // namespace fg::agent
