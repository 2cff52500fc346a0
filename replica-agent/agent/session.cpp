#include "replica-agent/agent/session.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <ctime>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/experimental/awaitable_operators.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <nlohmann/json.hpp>

#include "common/log/log.hpp"
#include "common/net/http_io.hpp"
#include "common/net/http_session.hpp"
#include "common/net/off_thread.hpp"
#include "common/openai/errors.hpp"
#include "common/openai/inspect.hpp"
#include "common/util/json.hpp"
#include "common/util/text.hpp"
#include "replica-agent/agent/routes.hpp"
#include "replica-agent/model/fetcher.hpp"
#include "replica-agent/registration/challenge.hpp"
#include "replica-agent/registration/registrar.hpp"

namespace fg::agent {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using namespace asio::experimental::awaitable_operators;

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kHeaderLimit = 16 * 1024;
constexpr std::uint64_t kBodyLimit = 8 * 1024 * 1024;
// The agent's own limits (it has no server.* keys): the same roles as the gateway's
// server.header_timeout, body_timeout, idle_timeout and write_timeout.
constexpr auto kHeaderTimeout = std::chrono::seconds(10);
constexpr auto kBodyTimeout = std::chrono::seconds(60);
constexpr auto kIdleTimeout = std::chrono::seconds(60);
// A client that stops reading is dropped after this and its slot freed. Longer than the
// gateway's server.write_timeout (60 s by default): behind a gateway whose own client is slow,
// the gateway (which stops reading from the phone meanwhile) decides, not the phone.
constexpr auto kWriteTimeout = std::chrono::seconds(120);
// Bytes a client may pipeline while a request is answered before we stop reading (and so stop
// noticing a disconnect) on that connection.
constexpr std::size_t kPipelineCap = 64 * 1024;

// A whole response: a JSON body (or an OpenAI error) of known length.
struct Reply {
  unsigned status = 200;
  std::string body;
  std::vector<net::Header> headers;
  std::string outcome = "ok";
  std::string content_type = "application/json";
};

Reply error_reply(unsigned status, const std::string& message, const std::string& code,
                  const std::string& param = {}) {
  Reply reply;
  reply.status = status;
  reply.body = openai::error_body(message, openai::error_type_for_status(static_cast<int>(status)),
                                  code, param);
  reply.outcome = code;
  return reply;
}

// What the gateway's router seeds its model of this phone with: speeds in tokens per second of
// wall time (the sim: its profile's, times time_scale; llama-server: the autotune's chosen
// measurement, null before one), the host prompt cache's size in tokens (0: none or unknown),
// and how often the engine became ready (a change means its caches were lost).
void add_routing_facts(const AgentContext& ctx, nlohmann::ordered_json& body) {
  nlohmann::json prefill = nullptr;
  nlohmann::json decode = nullptr;
  std::uint64_t host_tokens = 0;
  if (ctx.profile != nullptr) {
    prefill = ctx.profile->prefill_tps * ctx.config.engine.time_scale;
    decode = ctx.profile->decode_tps * ctx.config.engine.time_scale;
    host_tokens = ctx.config.engine.host_cache_tokens;
  } else if (ctx.autotune.chosen && *ctx.autotune.chosen < ctx.autotune.results.size()) {
    const auto& speeds = ctx.autotune.results[*ctx.autotune.chosen].speeds;
    prefill = speeds.prefill_tps;
    decode = speeds.decode_tps;
  }
  body["prefill_tps"] = prefill;
  body["decode_tps"] = decode;
  body["host_prompt_cache_tokens"] = host_tokens;
  body["engine_starts"] = ctx.engine_starts;
}

Reply health_reply(const AgentContext& ctx, const AgentServices& services) {
  const bool draining = ctx.sessions.draining();
  const bool loading = !ctx.engine_ready;
  nlohmann::ordered_json body{
      {"status", draining  ? "draining"
                 : loading ? "loading"
                           : "ok"},
      {"model", ctx.config.model},
      {"engine", to_string(ctx.config.engine.kind)},
  };
  if (ctx.profile != nullptr) {
    body["profile"] = ctx.profile->name;
    body["time_scale"] = ctx.config.engine.time_scale;
  }
  body["slots_total"] = ctx.admission.total();
  body["slots_idle"] = ctx.admission.idle();
  body["agent_version"] = FLEETGATE_VERSION;
  body["device"] = device_json(ctx.device);
  if (ctx.config.engine.autotune.enabled) {
    body["autotune"] = autotune::report_json(ctx.autotune, ctx.config.engine.autotune);
  }
  if (services.model != nullptr) {
    body["model_download"] = model::progress_json(services.model->progress());
  }
  add_routing_facts(ctx, body);
  Reply reply;
  reply.status = draining || loading ? 503 : 200;
  reply.body = body.dump();
  return reply;
}

// The gateway's proof that this agent answers at the URL it registered: an HMAC of the nonce
// under the registration's secret (registration/challenge.hpp).
Reply challenge_reply(const AgentServices& services, std::string_view target) {
  const std::string no_secret;
  const std::string& secret = services.registrar ? services.registrar->secret() : no_secret;
  if (secret.empty()) {
    Reply reply = error_reply(
        503, "this agent is not registered with a gateway yet (it has no replica secret)",
        "not_registered");
    reply.headers.emplace_back("Retry-After", "1");
    return reply;
  }
  auto nonce = query_value(target, "nonce");
  if (!nonce || !valid_challenge_nonce(*nonce)) {
    return error_reply(400, "'nonce' must be 64 hexadecimal digits", "invalid_nonce", "nonce");
  }
  Reply reply;
  reply.body = nlohmann::json{{"hmac", challenge_hmac(secret, *nonce)}}.dump();
  return reply;
}

asio::awaitable<bool> send_reply(net::ServerRequest r, Reply reply) {
  co_await r.writer->send_full(reply.status, std::move(reply.content_type), std::move(reply.body),
                               std::move(reply.headers));
  co_return r.writer->keep_alive() && r.writer->finished();
}

Reply bad_field(const char* field, const std::string& what) {
  std::string message = "'";
  message += field;
  message += "' must be ";
  message += what;
  return error_reply(400, message, "invalid_request", field);
}

bool non_empty_array(const nlohmann::json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && it->is_array() && !it->empty();
}

bool string_or_array(const nlohmann::json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && (it->is_string() || it->is_array());
}

// The endpoint-specific field the simulator reads the prompt from must have the right type.
std::optional<Reply> check_prompt_field(Endpoint endpoint, const nlohmann::json& body) {
  switch (endpoint) {
    case Endpoint::chat:
    case Endpoint::messages:
    case Endpoint::count_tokens:
      if (!non_empty_array(body, "messages")) {
        return bad_field("messages", "a non-empty array");
      }
      return std::nullopt;
    case Endpoint::completions:
      if (!string_or_array(body, "prompt")) {
        return bad_field("prompt", "a string or an array");
      }
      return std::nullopt;
    case Endpoint::responses:
    case Endpoint::input_tokens:
      if (!string_or_array(body, "input")) {
        return bad_field("input", "a string or an array");
      }
      return std::nullopt;
    case Endpoint::rerank: {
      auto query = body.find("query");
      if (query == body.end() || !query->is_string()) {
        return bad_field("query", "a string");
      }
      auto documents = body.find("documents");
      if (documents == body.end() || !documents->is_array() ||
          !std::all_of(documents->begin(), documents->end(),
                       [](const nlohmann::json& d) { return d.is_string(); })) {
        return bad_field("documents", "an array of strings");
      }
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// The API family of an endpoint: its error shape.
openai::Api api_of(Endpoint endpoint) {
  switch (endpoint) {
    case Endpoint::responses:
    case Endpoint::input_tokens:
      return openai::Api::responses;
    case Endpoint::messages:
    case Endpoint::count_tokens:
      return openai::Api::anthropic;
    default:
      return openai::Api::openai;
  }
}

// An error reply in the endpoint's API shape.
Reply shaped(Reply reply, Endpoint endpoint) {
  if (reply.status >= 400) {
    if (auto body =
            openai::reshaped_error(api_of(endpoint), static_cast<int>(reply.status), reply.body)) {
      reply.body = std::move(*body);
    }
  }
  return reply;
}

bool answers_whole(Endpoint endpoint) {
  return endpoint == Endpoint::input_tokens || endpoint == Endpoint::count_tokens ||
         endpoint == Endpoint::rerank;
}

// What one inference request did, for its log line.
struct RequestRecord {
  std::string request_id;
  std::string endpoint;
  unsigned status = 0;
  std::string outcome;
  std::optional<std::size_t> slot;
  std::optional<sim::SimPlan> plan;
  std::string engine_outcome;  // proxied engines: how the exchange with the engine went
  Clock::time_point start = Clock::now();
};

void log_request(AgentContext& ctx, const RequestRecord& record) {
  using nlohmann::json;
  ctx.metrics.request_done(record.status);
  const auto* plan = record.plan ? &*record.plan : nullptr;
  log::info("request",
            {{"request_id", record.request_id},
             {"endpoint", record.endpoint},
             {"status", record.status},
             {"outcome", record.outcome},
             {"slot", record.slot ? json(*record.slot) : json(nullptr)},
             {"slots_busy", ctx.admission.busy()},
             {"prompt_tokens", plan ? json(plan->prompt_tokens) : json(nullptr)},
             {"cached_tokens", plan ? json(plan->cached_tokens) : json(nullptr)},
             {"completion_tokens", plan ? json(plan->completion_tokens) : json(nullptr)},
             {"engine_outcome",
              record.engine_outcome.empty() ? json(nullptr) : json(record.engine_outcome)},
             {"duration_ms",
              std::chrono::duration<double, std::milli>(Clock::now() - record.start).count()}});
}

// Bodies larger than net::kOffThreadBody are examined (the scan, the DOM parse, the prompt's
// text) on the agent's work pool instead of the io thread, which meanwhile relays the other
// slots' streams.
using net::kOffThreadBody;

// What handle_inference needs from a request body: a refusal, or the request's facts, its DOM
// (the sim engine reads sampling fields from it) and the prompt's text (the slots' prefix
// caches). A plain function of its inputs, so that it may run on a pool thread.
struct Examined {
  std::optional<Reply> refusal;
  std::optional<openai::RequestInfo> info;
  nlohmann::json body;
  std::string prompt;
};

Examined examine(Endpoint endpoint, const net::Request& request, const std::string& model) {
  Examined out;
  auto inspected = openai::inspect_request(request[http::field::content_type], request.body());
  if (auto* error = std::get_if<openai::InspectError>(&inspected)) {
    out.refusal = error_reply(static_cast<unsigned>(error->status), error->message, error->code,
                              error->param);
    return out;
  }
  out.info = std::move(std::get<openai::RequestInfo>(inspected));
  if (out.info->model != model) {
    out.refusal = error_reply(404,
                              "the model '" + out.info->model +
                                  "' does not exist on this replica (it serves '" + model + "')",
                              "model_not_found", "model");
    return out;
  }
  out.body = parse_network_json(request.body());
  if (auto bad = check_prompt_field(endpoint, out.body)) {
    out.refusal = std::move(bad);
    return out;
  }
  out.prompt = sim::extract_prompt_text(out.body);
  return out;
}

// Admits, plans and answers one completion request. Returns whether the connection may carry
// another request.
asio::awaitable<bool> handle_inference(AgentContext* ctx, AgentServices services,
                                       net::ServerRequest r, Endpoint endpoint) {
  const net::Request* request = r.request;
  RequestRecord record;
  record.request_id = r.writer->request_id();
  record.endpoint = std::string(endpoint_name(endpoint));
  auto refuse = [&](Reply reply) {
    record.status = reply.status;
    record.outcome = reply.outcome;
    return reply;
  };
  std::optional<Reply> refusal;

  Examined examined;
  const bool large = request->body().size() > kOffThreadBody;
  if (ctx->sessions.draining()) {
    refusal = refuse(
        error_reply(503, "this replica is shutting down; retry on another", "shutting_down"));
    refusal->headers.emplace_back("Retry-After", "1");
  } else if (!ctx->engine_ready) {
    refusal = refuse(error_reply(503, "the model is still loading on this replica; retry later",
                                 "model_loading"));
    refusal->headers.emplace_back("Retry-After", "5");
  } else if (large && services.off_thread != nullptr) {
    auto work = [endpoint, request, model = &ctx->config.model] {
      return examine(endpoint, *request, *model);
    };
    examined = co_await services.off_thread->run(std::move(work));
  } else {
    examined = examine(endpoint, *request, ctx->config.model);
  }
  // The body's DOM (thousands of nodes for a large prompt) is freed off the io thread too, when
  // the request ends (not from a destructor: a frame destroyed with the io_context at shutdown
  // would reach an OffThread destroyed before it).
  // A small body's DOM is freed here: handing it over would cost more than it saves.
  auto done = [&](bool again) {
    if (large && services.off_thread != nullptr && !examined.body.is_null()) {
      services.off_thread->dispose(std::move(examined.body));
    }
    return again;
  };
  if (!refusal && examined.refusal) {
    refusal = refuse(std::move(*examined.refusal));
  }
  if (refusal) {
    bool again = co_await send_reply(r, shaped(std::move(*refusal), endpoint));
    log_request(*ctx, record);
    co_return done(again);
  }

  std::optional<openai::RequestInfo>& info = examined.info;
  const nlohmann::json& body = examined.body;
  const std::string& prompt = examined.prompt;
  if (answers_whole(endpoint)) {
    info->stream = false;
  }
  if (endpoint == Endpoint::input_tokens || endpoint == Endpoint::count_tokens) {
    if (auto counted = services.engine->count_tokens(endpoint, prompt)) {
      Reply count;
      count.body = std::move(*counted);
      record.status = 200;
      record.outcome = "ok";
      bool again = co_await send_reply(r, std::move(count));
      log_request(*ctx, record);
      co_return done(again);
    }
  }
  auto guard = ctx->admission.try_acquire(prompt);
  if (!guard) {
    Reply busy = refuse(error_reply(503,
                                    "all " + std::to_string(ctx->admission.total()) +
                                        " slots of this replica are busy; retry later",
                                    "slots_busy"));
    busy.headers.emplace_back("Retry-After", "1");
    bool again = co_await send_reply(r, shaped(std::move(busy), endpoint));
    log_request(*ctx, record);
    co_return done(again);
  }
  record.slot = guard->slot();
  record.start = Clock::now();
  EngineRequest engine_request;
  engine_request.r = r;
  engine_request.endpoint = endpoint;
  engine_request.api = api_of(endpoint);
  engine_request.body = &body;
  engine_request.info = &*info;
  engine_request.prompt = &prompt;
  engine_request.slot = &guard;
  EngineOutcome outcome = co_await services.engine->answer(engine_request);
  guard.reset();
  record.status = outcome.status;
  record.outcome = outcome.outcome;
  record.engine_outcome = outcome.engine_outcome;
  record.plan = std::move(outcome.plan);
  log_request(*ctx, record);
  co_return done(outcome.keep_alive);
}

// The routes and the key, judged from the head before any body byte is read.
std::optional<net::ErrorReply> check_head(const AgentContext* ctx, const net::Request& head) {
  const bool authorized =
      ctx->api_key.empty() || ctx->api_key.matches(head[http::field::authorization]);
  const std::string_view method(head.method_string().data(), head.method_string().size());
  const std::string_view target(head.target().data(), head.target().size());
  return route_agent(method, target.substr(0, target.find('?')), authorized).refusal;
}

// Serves one request whose head check_head let through; returns whether the connection may
// carry another.
asio::awaitable<bool> handle_request(AgentContext* ctx, AgentServices services,
                                     net::ServerRequest r) {
  const net::Request* request = r.request;
  const std::string_view target(request->target().data(), request->target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  const std::string_view method(request->method_string().data(), request->method_string().size());
  const AgentRouteDecision decision = route_agent(method, path, true);

  Reply reply;
  if (!decision.route) {
    reply =
        error_reply(decision.refusal->status, decision.refusal->message, decision.refusal->code);
    reply.headers = decision.refusal->headers;
  } else {
    switch (*decision.route) {
      case AgentRoute::health:
        reply = health_reply(*ctx, services);
        break;
      case AgentRoute::metrics:
        reply.body = ctx->metrics.scrape(static_cast<double>(ctx->admission.busy()),
                                         static_cast<double>(ctx->admission.total()));
        reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
        break;
      case AgentRoute::challenge:
        reply = challenge_reply(services, target);
        break;
      case AgentRoute::models:
        reply.body = model_list(ctx->config.model);
        break;
      case AgentRoute::model: {
        std::string id(path.substr(11));
        if (id == ctx->config.model) {
          reply.body = model_object(id);
        } else {
          reply = error_reply(404, "the model '" + id + "' does not exist", "model_not_found");
        }
        break;
      }
      case AgentRoute::chat_completions:
        co_return co_await handle_inference(ctx, services, r, Endpoint::chat);
      case AgentRoute::completions:
        co_return co_await handle_inference(ctx, services, r, Endpoint::completions);
      case AgentRoute::responses:
        co_return co_await handle_inference(ctx, services, r, Endpoint::responses);
      case AgentRoute::responses_input_tokens:
        co_return co_await handle_inference(ctx, services, r, Endpoint::input_tokens);
      case AgentRoute::messages:
        co_return co_await handle_inference(ctx, services, r, Endpoint::messages);
      case AgentRoute::messages_count_tokens:
        co_return co_await handle_inference(ctx, services, r, Endpoint::count_tokens);
      case AgentRoute::rerank:
        co_return co_await handle_inference(ctx, services, r, Endpoint::rerank);
    }
  }
  co_return co_await send_reply(r, std::move(reply));
}

}  // namespace

net::SessionHooks agent_session_hooks(AgentContext* ctx, AgentServices services) {
  net::SessionHooks hooks;
  hooks.listener = "agent";
  hooks.limits = [] {
    net::SessionLimits limits;
    limits.header_limit = kHeaderLimit;
    limits.body_limit = kBodyLimit;
    limits.body_limit_key = "the agent's body limit";
    limits.timeouts = {kIdleTimeout, kHeaderTimeout, kBodyTimeout};
    limits.write_timeout = kWriteTimeout;
    limits.pipeline_cap = kPipelineCap;
    return limits;
  };
  hooks.check_head = [ctx](const net::Request& head) { return check_head(ctx, head); };
  hooks.error_api = [](const net::Request& head) {
    const std::string_view target(head.target().data(), head.target().size());
    return agent_error_api(target.substr(0, target.find('?')));
  };
  hooks.handle = [ctx, services](net::ServerRequest r) { return handle_request(ctx, services, r); };
  hooks.id_rng = &ctx->id_rng;
  // A drain closes idle connections; one opened during a drain still reads its request so that
  // it can be answered 503.
  hooks.tracker = &ctx->sessions;
  hooks.off_thread = services.off_thread;
  return hooks;
}

}  // namespace fg::agent
