#pragma once

#include <memory>

#include <boost/asio/awaitable.hpp>

#include "common/net/conn.hpp"
#include "replica-agent/agent/context.hpp"

namespace fg::agent {

// Serves one connection: HTTP/1.1 keep-alive, /health, the OpenAI routes, admission to slots.
boost::asio::awaitable<void> run_session(AgentContext* ctx, std::unique_ptr<net::Conn> conn);

}  // namespace fg::agent
