#pragma once

#include <memory>

#include <boost/asio/any_io_executor.hpp>

#include "replica-agent/engines/engine.hpp"

namespace fg::agent {

// llama-server and openai: requests are forwarded to the engine (proxy.hpp) while an
// EngineMonitor probes it (and, with engine.command, starts and supervises it).
std::unique_ptr<Engine> make_proxy_engine(boost::asio::any_io_executor executor, AgentContext* ctx);

}  // namespace fg::agent
