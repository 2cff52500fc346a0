#pragma once

#include <memory>

#include "replica-agent/engines/engine.hpp"

namespace fg::agent {

// The phone simulator: plans each request with the pure model (sim_model.hpp) and answers it
// with real timers (sim_answer.hpp), in the endpoint's shape (responses.hpp).
std::unique_ptr<Engine> make_sim_engine(AgentContext* ctx);

}  // namespace fg::agent
