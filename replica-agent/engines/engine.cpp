#include "replica-agent/engines/engine.hpp"

#include "replica-agent/engines/proxy_engine.hpp"
#include "replica-agent/engines/sim_engine.hpp"

namespace fg::agent {

std::unique_ptr<Engine> make_engine(boost::asio::any_io_executor executor, AgentContext* ctx) {
  if (ctx->config.engine.kind == EngineKind::sim) {
    return make_sim_engine(ctx);
  }
  return make_proxy_engine(std::move(executor), ctx);
}

}  // namespace fg::agent
