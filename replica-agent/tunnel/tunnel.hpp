#pragma once

// How the phone's public URL comes about (tunnel.kind): none (public_url is given and reachable)
// or acurast (the Shell runtime's tunnel, opened through the bridge). The agent registers the
// URL the tunnel gives and stops the tunnel before it deregisters.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <boost/asio/any_io_executor.hpp>

#include "replica-agent/core/context.hpp"

namespace fg::agent {

class Tunnel {
 public:
  virtual ~Tunnel() = default;
  // Opens the tunnel to 127.0.0.1:local_port (the agent's listener); on_ready runs once, on the
  // io thread, when ctx->public_url (and, for acurast, ctx->deployment_id) are known. The tunnel
  // then keeps itself open.
  virtual void start(std::uint16_t local_port, std::function<void()> on_ready) = 0;
  // Closes it; done runs on the io thread once closed (at once for none).
  virtual void stop(std::function<void()> done) = 0;
};

// tunnel.kind none or acurast. key is the acurast tunnel's key (base64 PKCS#8 P-256), read from
// tunnel.key_env by the caller; bridge_socket the BRIDGE_SOCKET name.
std::unique_ptr<Tunnel> make_tunnel(boost::asio::any_io_executor executor, AgentContext* ctx,
                                    std::string key, std::string bridge_socket);

}  // namespace fg::agent
