#pragma once

// The one interface every engine implements: sim (the phone simulator), llama-server (a local
// llama.cpp server the agent forwards to and may start and supervise) and openai (any other
// OpenAI-compatible server). The agent's session admits a request (route, key, body checks, a
// slot) and hands it to the engine; the engine answers it and says how it went. engines/ never
// includes agent/: what an engine needs is in core/.

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/net/http_session.hpp"
#include "common/openai/api.hpp"
#include "common/openai/inspect.hpp"
#include "replica-agent/core/context.hpp"
#include "replica-agent/engines/responses.hpp"
#include "replica-agent/engines/sim_model.hpp"

namespace fg::agent {

// One admitted request: its slot is taken, its body checked.
struct EngineRequest {
  net::ServerRequest r;
  Endpoint endpoint = Endpoint::chat;
  openai::Api api = openai::Api::openai;  // the error shape of the route
  const nlohmann::json* body = nullptr;
  const openai::RequestInfo* info = nullptr;  // stream already false for whole-only endpoints
  const std::string* prompt = nullptr;
  std::optional<SlotGuard>* slot = nullptr;  // the engine frees it as soon as it is done
};

// How it went, for the request log line (the session counts the status in the metrics).
struct EngineOutcome {
  unsigned status = 0;         // what the client got; 499 when it left before a response head
  std::string outcome;         // "ok", "client_gone", "simulated_failure", "engine_failed", ...
  std::string engine_outcome;  // proxied engines: how the exchange with the engine went
  std::optional<sim::SimPlan> plan;  // sim: the request's plan (token counts)
  bool keep_alive = false;           // the connection may carry another request
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Begins whatever the engine does in the background (probing, supervising a child). The
  // engine keeps ctx->engine_ready current.
  virtual void start() {}
  // Stops it; done runs on the io thread once it has (at once when there is nothing to stop).
  virtual void stop(std::function<void()> done) { done(); }
  // Stops at once without waiting (a second signal; the io loop has ended).
  virtual void kill_now() {}

  // A token count the engine answers itself without a slot (the sim counts locally); nullopt:
  // the request goes through admission and answer() like any other.
  virtual std::optional<std::string> count_tokens(Endpoint /*endpoint*/,
                                                  const std::string& /*prompt*/) {
    return std::nullopt;
  }

  // Answers one admitted request (cancelled when the client goes away).
  virtual boost::asio::awaitable<EngineOutcome> answer(EngineRequest request) = 0;
};

// The engine config.engine.kind names (sim, llama-server, openai).
std::unique_ptr<Engine> make_engine(boost::asio::any_io_executor executor, AgentContext* ctx);

}  // namespace fg::agent
