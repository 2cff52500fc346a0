#include "replica-agent/engines/proxy_engine.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include "replica-agent/engines/engine_monitor.hpp"
#include "replica-agent/engines/proxy.hpp"

namespace fg::agent {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;

namespace {

class ProxyEngine final : public Engine {
 public:
  ProxyEngine(asio::any_io_executor executor, AgentContext* ctx)
      : ctx_(ctx), monitor_(std::move(executor), ctx) {}

  void start() override { monitor_.start(); }
  void stop(std::function<void()> done) override { monitor_.stop(std::move(done)); }
  void kill_now() override { monitor_.kill_now(); }

  asio::awaitable<EngineOutcome> answer(EngineRequest request) override {
    return forward(ctx_, request);
  }

 private:
  // A named coroutine taking its parameters by value (not a member coroutine capturing this).
  static asio::awaitable<EngineOutcome> forward(AgentContext* ctx, EngineRequest q) {
    net::ServerRequest r = q.r;
    ProxyProgress progress;
    progress.slot = q.slot;
    progress.api = q.api;
    // A client that goes away cancels the forwarding, which closes the engine connection.
    r.conn->expires_never();
    auto done =
        co_await (net::watch_client(r) || forward_to_engine(ctx, r.writer, r.request, &progress));
    const bool client_gone = done.index() == 0 || (!progress.finished && progress.outcome.empty());
    EngineOutcome out;
    out.engine_outcome = client_gone ? "client_gone" : progress.outcome;
    out.outcome = out.engine_outcome;
    out.status = r.writer->head_sent() || !client_gone ? progress.status : 499;
    if (progress.finished) {
      ctx->metrics.tokens(static_cast<double>(progress.prompt_tokens),
                          static_cast<double>(progress.completion_tokens));
      ctx->metrics.speeds(progress.prefill_tps, progress.decode_tps);
    }
    q.slot->reset();
    out.keep_alive = done.index() == 1 && progress.finished && r.writer->keep_alive();
    co_return out;
  }

  AgentContext* ctx_;
  EngineMonitor monitor_;
};

}  // namespace

std::unique_ptr<Engine> make_proxy_engine(asio::any_io_executor executor, AgentContext* ctx) {
  return std::make_unique<ProxyEngine>(std::move(executor), ctx);
}

}  // namespace fg::agent
