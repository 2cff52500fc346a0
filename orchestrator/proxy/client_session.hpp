#pragma once

#include <memory>

#include <boost/asio/awaitable.hpp>

#include "common/net/conn.hpp"
#include "orchestrator/proxy/context.hpp"

namespace fg::proxy {

// Serves one client connection of the public listener: HTTP/1.1 keep-alive, the OpenAI routes,
// queueing, relaying and failover.
boost::asio::awaitable<void> run_client_session(ProxyContext* ctx, std::unique_ptr<net::Conn> conn);

}  // namespace fg::proxy
