#include "replica-agent/agent/session.hpp"

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
#include "common/openai/errors.hpp"
#include "common/openai/inspect.hpp"
#include "common/util/request_id.hpp"
#include "common/util/text.hpp"
#include "replica-agent/agent/sim_answer.hpp"
#include "replica-agent/engines/proxy.hpp"

namespace fg::agent {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using namespace asio::experimental::awaitable_operators;

namespace {

constexpr std::size_t kHeaderLimit = 16 * 1024;
constexpr std::uint64_t kBodyLimit = 8 * 1024 * 1024;
constexpr auto kReadTimeout = std::chrono::seconds(30);
constexpr auto kIdleTimeout = std::chrono::seconds(60);
constexpr auto kReplyTimeout = std::chrono::seconds(10);
// Bytes a client may pipeline while a request is answered before we stop reading (and so stop
// noticing a disconnect) on that connection.
constexpr std::size_t kPipelineCap = 64 * 1024;

// Built outside co_await expressions: GCC 12 cannot keep braced lists of string literals in a
// coroutine frame.
std::vector<net::Header> request_id_header(const std::string& request_id) {
  std::vector<net::Header> headers;
  headers.emplace_back("X-Request-Id", request_id);
  return headers;
}

std::vector<net::Header> with_header(std::vector<net::Header> headers, std::string name,
                                     std::string value) {
  headers.emplace_back(std::move(name), std::move(value));
  return headers;
}

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

Reply allow_only(const char* method, std::string_view path) {
  Reply reply = error_reply(405, "use " + std::string(method) + " for " + std::string(path),
                            "method_not_allowed");
  reply.headers.emplace_back("Allow", method);
  return reply;
}

Reply health_reply(const AgentContext& ctx) {
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
  Reply reply;
  reply.status = draining || loading ? 503 : 200;
  reply.body = body.dump();
  return reply;
}

// Constant-time comparison of the request's bearer token with the configured key.
asio::awaitable<bool> send_reply(net::Conn* conn, Reply reply, bool keep_alive) {
  conn->expires_after(kReplyTimeout);
  auto bytes =
      net::full_response(reply.status, reply.content_type, reply.body, reply.headers, keep_alive);
  auto [ec, n] = co_await conn->write(asio::buffer(bytes));
  co_return !ec;
}

// The endpoint-specific field the simulator reads the prompt from must have the right type.
std::optional<Reply> check_prompt_field(Endpoint endpoint, const nlohmann::json& body) {
  if (endpoint == Endpoint::chat) {
    auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array() || messages->empty()) {
      return error_reply(400, "'messages' must be a non-empty array", "invalid_request",
                         "messages");
    }
    return std::nullopt;
  }
  auto prompt = body.find("prompt");
  if (prompt == body.end() || !(prompt->is_string() || prompt->is_array())) {
    return error_reply(400, "'prompt' must be a string or an array", "invalid_request", "prompt");
  }
  return std::nullopt;
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

double per_second(std::size_t n, double ms) {
  return ms > 0 ? static_cast<double>(n) / ms * 1000.0 : 0.0;
}

// Forwards an admitted request to a proxied engine while watching the client; returns whether
// the connection may carry another request.
asio::awaitable<bool> proxy_inference(AgentContext* ctx, net::Conn* conn,
                                      boost::beast::flat_buffer* buffer,
                                      const net::Request* request, std::string request_id,
                                      bool keep_alive, std::optional<SlotGuard>* slot,
                                      RequestRecord* record) {
  ProxyProgress progress;
  progress.slot = slot;
  // A client that goes away cancels the forwarding, which closes the engine connection.
  conn->expires_never();
  auto done = co_await (net::watch_client(conn, buffer, kPipelineCap) ||
                        forward_to_engine(ctx, conn, request, request_id, keep_alive, &progress));
  const bool client_gone = done.index() == 0 || (!progress.finished && progress.outcome.empty());
  record->engine_outcome = client_gone ? "client_gone" : progress.outcome;
  record->outcome = client_gone ? "client_gone" : progress.outcome;
  record->status = progress.head_sent || !client_gone ? progress.status : 499;
  if (progress.finished) {
    ctx->metrics.tokens(static_cast<double>(progress.prompt_tokens),
                        static_cast<double>(progress.completion_tokens));
    ctx->metrics.speeds(progress.prefill_tps, progress.decode_tps);
  }
  co_return done.index() == 1 && progress.keep_alive;
}

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

// Admits, plans and answers one completion request. Returns whether the connection may carry
// another request.
asio::awaitable<bool> handle_inference(AgentContext* ctx, net::Conn* conn,
                                       boost::beast::flat_buffer* buffer,
                                       const net::Request* request, Endpoint endpoint,
                                       std::string request_id, bool keep_alive) {
  RequestRecord record;
  record.request_id = request_id;
  record.endpoint = endpoint == Endpoint::chat ? "chat" : "completions";
  auto refuse = [&](Reply reply) {
    reply.headers = with_header(std::move(reply.headers), "X-Request-Id", request_id);
    record.status = reply.status;
    record.outcome = reply.outcome;
    return reply;
  };
  std::optional<Reply> refusal;

  std::optional<openai::RequestInfo> info;
  nlohmann::json body;
  if (ctx->sessions.draining()) {
    refusal = refuse(
        error_reply(503, "this replica is shutting down; retry on another", "shutting_down"));
    refusal->headers.emplace_back("Retry-After", "1");
  } else if (!ctx->engine_ready) {
    refusal = refuse(error_reply(503, "the model is still loading on this replica; retry later",
                                 "model_loading"));
    refusal->headers.emplace_back("Retry-After", "5");
  } else {
    auto inspected =
        openai::inspect_request((*request)[http::field::content_type], request->body());
    if (auto* error = std::get_if<openai::InspectError>(&inspected)) {
      refusal = refuse(error_reply(static_cast<unsigned>(error->status), error->message,
                                   error->code, error->param));
    } else {
      info = std::get<openai::RequestInfo>(inspected);
      // inspect_request accepted it, so it parses (and its depth is bounded).
      body = nlohmann::json::parse(request->body(), nullptr, false);
      if (info->model != ctx->config.model) {
        refusal = refuse(error_reply(404,
                                     "the model '" + info->model +
                                         "' does not exist on this replica (it serves '" +
                                         ctx->config.model + "')",
                                     "model_not_found", "model"));
      } else if (auto bad = check_prompt_field(endpoint, body)) {
        refusal = refuse(std::move(*bad));
      }
    }
  }
  if (refusal) {
    bool ok = co_await send_reply(conn, std::move(*refusal), keep_alive);
    log_request(*ctx, record);
    co_return (ok && keep_alive);
  }

  const std::string prompt = sim::extract_prompt_text(body);
  auto guard = ctx->admission.try_acquire(prompt);
  if (!guard) {
    Reply busy = refuse(error_reply(503,
                                    "all " + std::to_string(ctx->admission.total()) +
                                        " slots of this replica are busy; retry later",
                                    "slots_busy"));
    busy.headers.emplace_back("Retry-After", "1");
    bool ok = co_await send_reply(conn, std::move(busy), keep_alive);
    log_request(*ctx, record);
    co_return (ok && keep_alive);
  }
  record.slot = guard->slot();
  record.start = Clock::now();
  if (ctx->profile == nullptr) {
    bool again = co_await proxy_inference(ctx, conn, buffer, request, request_id, keep_alive,
                                          &guard, &record);
    guard.reset();
    log_request(*ctx, record);
    co_return again;
  }
  const std::size_t cached = ctx->admission.cached_tokens(*guard, prompt);
  record.plan = sim::plan_request(*ctx->profile, ctx->sim, prompt, cached,
                                  sim::requested_max_tokens(body), ctx->sim_rng);
  const sim::SimPlan& plan = *record.plan;
  if (plan.fail) {
    guard.reset();
    Reply failed =
        refuse(error_reply(500, "simulated failure (--fail-rate); retry", "simulated_failure"));
    bool ok = co_await send_reply(conn, std::move(failed), keep_alive);
    log_request(*ctx, record);
    co_return (ok && keep_alive);
  }

  ResponseMeta meta;
  meta.endpoint = endpoint;
  meta.id = make_response_id(endpoint, ctx->id_rng(), ctx->id_rng());
  meta.created = static_cast<std::int64_t>(std::time(nullptr));
  meta.model = ctx->config.model;
  meta.include_usage = info->stream && info->include_usage;

  AnswerInput input;
  input.plan = &plan;
  input.meta = &meta;
  input.slot = &guard;
  input.prompt = &prompt;
  input.usage = Usage{plan.prompt_tokens, plan.cached_tokens, plan.completion_tokens};
  input.stream = info->stream;
  input.keep_alive = keep_alive;
  input.headers = request_id_header(request_id);
  input.start = record.start;
  AnswerProgress progress;

  // The client may vanish at any time, during prefill included: watch_client notices, and
  // whichever branch ends first cancels the other, so the slot is freed at once.
  conn->expires_never();
  auto done = co_await (net::watch_client(conn, buffer, kPipelineCap) ||
                        run_sim_answer(ctx, conn, input, &progress));
  const bool client_gone = done.index() == 0 || !progress.finished;
  finish_slot(ctx, input, progress);
  if (progress.finished) {
    ctx->metrics.tokens(static_cast<double>(plan.prompt_tokens),
                        static_cast<double>(plan.completion_tokens));
    ctx->metrics.speeds(per_second(progress.timings.prompt_n, progress.timings.prompt_ms),
                        per_second(progress.timings.predicted_n, progress.timings.predicted_ms));
  }
  // 499 (nginx's "client closed request") when the client left before any response head.
  record.status = info->stream || !client_gone ? 200 : 499;
  record.outcome = client_gone ? "client_gone" : "ok";
  log_request(*ctx, record);
  co_return !client_gone && keep_alive;
}

// Routes one request; returns whether the connection may carry another.
asio::awaitable<bool> handle_request(AgentContext* ctx, net::Conn* conn,
                                     boost::beast::flat_buffer* buffer,
                                     const net::Request* request) {
  auto given_id = (*request)["X-Request-Id"];
  std::string request_id = request_id_for(given_id, ctx->id_rng);
  const bool keep_alive = request->keep_alive() && !ctx->sessions.draining();
  std::string_view target(request->target().data(), request->target().size());
  std::string_view path = target.substr(0, target.find('?'));
  const auto method = request->method();

  Reply reply;
  if (path.substr(0, 4) == "/v1/" && !ctx->api_key.empty() &&
      !bearer_matches((*request)[http::field::authorization], ctx->api_key)) {
    reply = error_reply(401, "a valid API key is required (Authorization: Bearer ...)",
                        "invalid_api_key");
    reply.headers.emplace_back("WWW-Authenticate", "Bearer");
  } else if (path == "/health") {
    reply = method == http::verb::get ? health_reply(*ctx) : allow_only("GET", path);
  } else if (path == "/metrics") {
    if (method == http::verb::get) {
      reply.body = ctx->metrics.scrape(static_cast<double>(ctx->admission.busy()),
                                       static_cast<double>(ctx->admission.total()));
      reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
    } else {
      reply = allow_only("GET", path);
    }
  } else if (path == "/v1/models") {
    if (method == http::verb::get) {
      reply.body = model_list(ctx->config.model);
    } else {
      reply = allow_only("GET", path);
    }
  } else if (path.substr(0, 11) == "/v1/models/") {
    std::string id(path.substr(11));
    if (method != http::verb::get) {
      reply = allow_only("GET", path);
    } else if (id == ctx->config.model) {
      reply.body = model_object(id);
    } else {
      reply = error_reply(404, "the model '" + id + "' does not exist", "model_not_found");
    }
  } else if (path == "/v1/chat/completions" || path == "/v1/completions") {
    if (method != http::verb::post) {
      reply = allow_only("POST", path);
    } else {
      Endpoint endpoint = path == "/v1/chat/completions" ? Endpoint::chat : Endpoint::completions;
      co_return co_await handle_inference(ctx, conn, buffer, request, endpoint, request_id,
                                          keep_alive);
    }
  } else {
    reply = error_reply(404, "no route for " + std::string(path), "not_found");
  }
  reply.headers = with_header(std::move(reply.headers), "X-Request-Id", request_id);
  bool ok = co_await send_reply(conn, std::move(reply), keep_alive);
  co_return (ok && keep_alive);
}

}  // namespace

asio::awaitable<void> run_session(AgentContext* ctx, std::unique_ptr<net::Conn> conn) {
  struct Tracked {
    SessionTracker* tracker;
    std::uint64_t id;
    ~Tracked() { tracker->remove(id); }
  } tracked{&ctx->sessions, ctx->sessions.add(conn.get())};

  net::RequestLimits limits;
  limits.header_limit = kHeaderLimit;
  limits.body_limit = kBodyLimit;
  limits.timeout = kReadTimeout;
  boost::beast::flat_buffer buffer(kBodyLimit + kHeaderLimit + kPipelineCap);

  // A drain closes idle connections itself; a connection opened during a drain still reads its
  // request so that it can be answered 503.
  for (;;) {
    net::Request request;
    auto outcome = co_await net::read_request(*conn, buffer, limits, kIdleTimeout, request);
    if (outcome == net::ReadOutcome::closed || outcome == net::ReadOutcome::timeout) {
      break;
    }
    ctx->sessions.set_busy(tracked.id, true);
    if (outcome != net::ReadOutcome::ok) {
      Reply reply;
      if (outcome == net::ReadOutcome::body_too_large) {
        reply =
            error_reply(413, "the request body exceeds " + std::to_string(kBodyLimit) + " bytes",
                        "request_too_large");
      } else if (outcome == net::ReadOutcome::header_too_large) {
        reply = error_reply(431, "the request headers are too large", "headers_too_large");
      } else {
        reply = error_reply(400, "malformed HTTP request", "bad_request");
      }
      co_await send_reply(conn.get(), std::move(reply), false);
      break;
    }
    bool again = co_await handle_request(ctx, conn.get(), &buffer, &request);
    if (!again) {
      break;
    }
    ctx->sessions.set_busy(tracked.id, false);
  }
  // Lingering close: half-close, then read what the client still sends until it closes too, so
  // that unread input does not turn our last response into a reset. The connection no longer
  // counts as busy, so a drain does not wait for this (it closes the connection instead).
  co_await conn->shutdown();
  ctx->sessions.set_busy(tracked.id, false);
  co_await net::drain_and_close(conn.get());
}

}  // namespace fg::agent
